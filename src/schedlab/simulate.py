"""One run of a waiting-queue policy on a simulation backend, and its summary."""

from __future__ import annotations

import time

import pandas as pd

from schedlab.contracts import SIM_BACKENDS
from schedlab.engine import Arena, ContinuousBatching, RunResult, run
from schedlab.errors import SchedlabError
from schedlab.metrics import summarize
from schedlab.policies import make_policy
from schedlab.workload.client import InFlightCap



def run_policy(
    trace: pd.DataFrame,
    policy: str,
    arena: Arena,
    *,
    identity: dict,
    backend: str = "sim",
    model: str | None = None,
    max_in_flight: int | None = None,
) -> tuple[RunResult, dict]:
    """Serve ``trace`` under ``policy`` with continuous batching in ``arena``, on schedlab's
    engine (``sim``) or on vLLM's scheduler (``vllm-sim``, which needs the ``model``); return
    the result and its summary. ``max_in_flight`` caps the requests in flight at the client
    (:class:`~schedlab.workload.client.InFlightCap`, ``sim`` only); latencies then count from
    when each request is sent."""
    if backend not in SIM_BACKENDS:
        raise SchedlabError(f"unknown simulation backend {backend!r}; choose sim or vllm-sim")
    if max_in_flight is not None and backend != "sim":
        raise SchedlabError("a cap on requests in flight runs on the sim backend only")
    if backend == "vllm-sim":
        from schedlab.backends.vllm_sim import run_vllm_sim  # imported before the clock starts
    t0 = time.perf_counter()
    scheduler = ContinuousBatching(make_policy(policy))  # fails early on an unknown name
    if max_in_flight is not None:
        scheduler = InFlightCap(scheduler, max_in_flight)
    if backend == "sim":
        result = run(trace, scheduler, arena)
        if max_in_flight is not None:
            sent = pd.Series(scheduler.sent_s, index=trace["request_id"].to_numpy())
            result.requests["arrival_s"] = sent.loc[result.requests["request_id"]].to_numpy()
    else:
        result = run_vllm_sim(trace, policy, arena, model=model)
    summary = summarize(result.requests, result.gaps, policy=policy, backend=backend, **identity)
    summary["sched_overhead_us_per_req"] = result.sched_overhead_s / max(len(trace), 1) * 1e6
    summary["mean_step_ms"] = result.busy_s / max(result.steps, 1) * 1e3
    summary["peak_kv_blocks"] = result.peak_kv_blocks
    summary["kv_capacity_blocks"] = result.kv_capacity_blocks
    summary["preemptions"] = int(result.requests["preemptions"].sum())
    summary["wall_s"] = time.perf_counter() - t0
    return result, summary
