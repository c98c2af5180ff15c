"""Run summaries (the flat JSON contract) from per-request results."""

from __future__ import annotations

import numpy as np
import pandas as pd

from schedlab.engine.gaps import GapHistogram


def _pct(x: np.ndarray, q: float) -> float:
    x = x[np.isfinite(x)]
    return float(np.percentile(x, q)) if x.size else float("nan")


def latency_columns(requests: pd.DataFrame) -> pd.DataFrame:
    """TTFT, E2EL and TPOT per request, in milliseconds."""
    ttft = (requests["first_token_s"] - requests["arrival_s"]) * 1e3
    e2el = (requests["finish_s"] - requests["arrival_s"]) * 1e3
    out = requests["output_tokens"]
    tpot = ((requests["finish_s"] - requests["first_token_s"]) * 1e3 / (out - 1)).where(out > 1)
    return pd.DataFrame({"ttft_ms": ttft, "e2el_ms": e2el, "tpot_ms": tpot})


def summarize(requests: pd.DataFrame, gaps: GapHistogram, **identity) -> dict:
    """Percentiles of TTFT/E2EL/TPOT/ITL (P25 too for TTFT and E2EL), throughput, and the run's identity keys.

    Throughput is completed requests (and output tokens) over the span from the first
    arrival to the last completion. The prefix cache's figures count first admissions, as
    vLLM's ``prefix_cache_queries`` and ``prefix_cache_hits`` counters do: the prompt tokens
    of the requests admitted, those found cached (``cached_tokens``), and their ratio
    (``prefix_cache_hit_rate``; 0 without a cache).
    """
    lat = latency_columns(requests)
    done = requests["finish_s"].notna()
    span = float(requests["finish_s"].max() - requests["arrival_s"].min()) if done.any() else 0.0
    summary = dict(identity)
    summary["arrived"] = int(len(requests))
    summary["completed"] = int(done.sum())
    for col in ("ttft_ms", "e2el_ms", "tpot_ms"):
        x = lat[col].to_numpy(float)
        for q in (25, 50, 90, 99) if col != "tpot_ms" else (50, 90, 99):
            summary[f"p{q}_{col}"] = _pct(x, q)
    for q in (50, 90, 99):
        summary[f"p{q}_itl_ms"] = gaps.quantile(q / 100) * 1e3
    summary["throughput_rps"] = summary["completed"] / span if span > 0 else float("nan")
    summary["throughput_tok_s"] = (
        float(requests.loc[done, "output_tokens"].sum()) / span if span > 0 else float("nan")
    )
    if "cached_tokens" in requests:
        # a finished request was admitted (a served replay's client never sees admissions)
        admitted = requests["first_scheduled_s"].notna() | done
        queries = int(requests.loc[admitted, "prompt_tokens"].sum())
        hits = int(requests.loc[admitted, "cached_tokens"].sum())
        summary["prefix_cache_queries"] = queries
        summary["cached_tokens"] = hits
        summary["prefix_cache_hit_rate"] = hits / queries if queries else 0.0
    return summary
