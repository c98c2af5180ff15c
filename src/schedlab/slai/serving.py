"""Calibrating paper C's engine model on its baseline's serving capacity.

Isolated prefill-chunk timings (:mod:`schedlab.fit.chunk_times`) miss what a serving system
adds to every batch: scheduling, sampling, detokenisation, CPU-GPU synchronisation. One fixed
per-batch overhead, added to the model's intercept, is fitted so that the baseline (Sarathi-Serve
with FCFS) sits at the edge of the capacity criterion (median TTFT 0.5 s with every class on
its P99 TBT target) at the paper's capacity: Brent's method on ``log(median TTFT / 0.5 s)``
at that rate. The baseline never reads a request's class, so its runs at every paying share
are the same run: the fit solves on the first share and checks the others at the result. The
paper's capacity is read off a figure to about ``precision_rps``; the overheads that put it
that much lower and higher bound the estimate. No other scheduler's number enters.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from schedlab.engine.steptime import StepTimeModel
from schedlab.errors import SchedlabError
from schedlab.fit.roots import bracketed_root
from schedlab.slai.run import CAPACITY_TTFT_MS
from schedlab.slai.studies import Setup

BASELINE_SCHEDULER = "sarathi-fcfs"
MAX_OVERHEAD_S = 0.5


def with_overhead(model: StepTimeModel, overhead_s: float, **meta) -> StepTimeModel:
    """``model`` with ``overhead_s`` more per batch."""
    return replace(model, intercept=model.intercept + overhead_s, meta={**model.meta, **meta})


def serving_overhead(setup: Setup, *, capacity_rps: float, shares, precision_rps: float = 0.05,
                     seed: int = 0) -> tuple[StepTimeModel, dict]:
    """Fit the per-batch overhead that puts the baseline's capacity at ``capacity_rps`` over
    ``shares``; return the model (its ``meta["calibration"]["serving"]`` holds the record) and
    the record."""
    base = setup.arena.step_time

    def run(overhead_s: float, share: float, rate: float) -> dict:
        arena = replace(setup.arena, step_time=with_overhead(base, overhead_s))
        return replace(setup, arena=arena).run(BASELINE_SCHEDULER, rate, share, seed)[1]

    def solve(rate: float) -> float:
        gap = lambda ov: float(np.log(run(ov, shares[0], rate)["p50_ttft_ms"] / CAPACITY_TTFT_MS))
        if gap(0.0) >= 0:
            return 0.0  # the chunk-timed model is already at or past the edge

        def unreachable(at_none: float, at_most: float) -> str:
            if not np.isfinite(at_none) or not np.isfinite(at_most):
                return (f"no median TTFT at {rate:g} req/s (no request measured after the warm-up): lengthen "
                        "--duration-s or raise --capacity-rps")
            return (f"even {MAX_OVERHEAD_S} s per batch keeps the median TTFT at {rate} req/s under "
                    f"{CAPACITY_TTFT_MS:g} ms: the runs are too short to load the engine")

        # 0.1 ms: the interval spans ms
        return bracketed_root(gap, 0.0, MAX_OVERHEAD_S, xtol=1e-4, unreachable=unreachable)

    overhead_s = solve(capacity_rps)
    interval = [solve(capacity_rps + precision_rps), solve(capacity_rps - precision_rps)]
    at = {p: run(overhead_s, p, capacity_rps) for p in shares}
    ttft = [s["p50_ttft_ms"] for s in at.values()]
    if not np.allclose(ttft, ttft[0], rtol=1e-9):
        raise SchedlabError(f"{BASELINE_SCHEDULER}'s median TTFT differs between paying shares ({ttft}): "
                            "it reads the classes, so one share cannot stand for all")
    record = {
        "method": "Brent's method on log(median TTFT / 0.5 s) of Sarathi-Serve (FCFS) at the paper's capacity",
        "baseline": BASELINE_SCHEDULER,
        "capacity_rps": capacity_rps,
        "precision_rps": precision_rps,
        "shares": list(shares),
        "overhead_s": overhead_s,
        "overhead_interval_s": interval,
        "achieved": [{"share": p, "p50_ttft_ms": s["p50_ttft_ms"], "tbt_ok": bool(s["tbt_ok"]),
                      "mean_batch_ms": s["mean_batch_ms"]} for p, s in at.items()],
    }
    calibration = {**base.meta.get("calibration", {}), "serving": record}
    return with_overhead(base, overhead_s, calibration=calibration), record


def capacity_sensitivity(setup: Setup, record: dict, *, treatment: str = "slai-spf-dynamic", share: float = 0.05,
                         rates=(0.4, 0.8, 1.2, 1.6, 2.0), iterations: int = 3) -> pd.DataFrame:
    """The baseline's and ``treatment``'s serving capacity at ``share``, and the treatment's gain
    (%), with the serving overhead at the low end of its interval, its estimate and the high end
    (``setup`` holds the model before the overhead): a prediction, run beside the fit."""
    from schedlab.slai.studies import capacity

    base = setup.arena.step_time
    lo, hi = record["overhead_interval_s"]
    rows = []
    for label, overhead_s in (("low", lo), ("fitted", record["overhead_s"]), ("high", hi)):
        s = replace(setup, arena=replace(setup.arena, step_time=with_overhead(base, overhead_s)))
        grid = pd.DataFrame([s.run(name, r, share, 0)[1] for name in (BASELINE_SCHEDULER, treatment) for r in rates])
        cap = capacity(s, grid, iterations=iterations).set_index("scheduler")["capacity_rps"]
        rows.append({"overhead": label, "overhead_s": overhead_s, "share": share, BASELINE_SCHEDULER: cap[BASELINE_SCHEDULER],
                     treatment: cap[treatment], "gain_pct": (cap[treatment] / cap[BASELINE_SCHEDULER] - 1) * 100})
    return pd.DataFrame(rows)
