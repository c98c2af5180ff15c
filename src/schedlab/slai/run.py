"""Paper C's run summary: the flat run summary of the contract plus
per-class TTFT, P99 TBT over every generated token against the class target, and engine
figures; requests arriving during the warm-up are simulated but not measured."""

from __future__ import annotations

import numpy as np
import pandas as pd

from schedlab.engine import RunResult
from schedlab.metrics import latency_columns, summarize

#: Prompt-length buckets (tokens) of the served-requests and TTFT-by-length figures.
BUCKETS = (0, 512, 1024, 2048, 4096, 8192)
#: Serving capacity: median TTFT at most this, and every class within its P99 TBT target.
CAPACITY_TTFT_MS = 500.0


def summary(res: RunResult, trace: pd.DataFrame, **identity) -> dict:
    req = res.requests[res.requests["measured"]]
    out = summarize(req, res.gaps, **identity)
    ttft = latency_columns(req)["ttft_ms"]
    targets = trace.groupby("slo_class")["tbt_target_s"].first() if "tbt_target_s" in trace else pd.Series(dtype=float)
    meets = True
    for cls, hist in res.class_gaps.items():
        mine = (req["class"] == cls).to_numpy()
        p99 = hist.quantile(0.99) * 1e3
        target = float(targets.get(cls, np.inf)) * 1e3
        ok = bool(hist.total == 0 or p99 <= target)
        meets &= ok
        out.update({
            f"completed_{cls}": int(req.loc[mine, "finish_s"].notna().sum()),
            f"p50_ttft_ms_{cls}": float(ttft[mine].median()),
            f"mean_ttft_ms_{cls}": float(ttft[mine].mean()),
            f"p99_tbt_ms_{cls}": p99,
            f"tbt_target_ms_{cls}": target,
            f"tbt_ok_{cls}": ok,
        })
    out["mean_ttft_ms"] = float(ttft.mean())
    out["tbt_ok"] = meets
    out["within_capacity"] = bool(meets and out["p50_ttft_ms"] <= CAPACITY_TTFT_MS)
    out["batches"] = res.steps
    out["mean_batch_ms"] = res.busy_s / max(res.steps, 1) * 1e3
    out["peak_kv_frac"] = res.peak_kv_frac
    out["preemptions"] = int(res.requests["preemptions"].sum())
    out["wall_s"] = res.wall_s
    return out


def by_bucket(res: RunResult, horizon_s: float) -> pd.DataFrame:
    """Per prompt-length bucket: measured requests, those finished by ``horizon_s`` (served
    within the run's arrival window) and their mean TTFT."""
    req = res.requests[res.requests["measured"]]
    bucket = pd.cut(req["prompt_tokens"], BUCKETS, right=True, include_lowest=True).astype(str)
    ttft = latency_columns(req)["ttft_ms"]
    frame = pd.DataFrame({"bucket": bucket, "served": req["finish_s"] <= horizon_s, "ttft_ms": ttft})
    out = frame.groupby("bucket", sort=False).agg(requests=("served", "size"), served=("served", "sum"),
                                                  mean_ttft_ms=("ttft_ms", "mean")).reset_index()
    order = {str(b): k for k, b in enumerate(pd.cut(pd.Series(BUCKETS[1:]), BUCKETS, include_lowest=True))}
    return out.sort_values("bucket", key=lambda s: s.map(order)).reset_index(drop=True)
