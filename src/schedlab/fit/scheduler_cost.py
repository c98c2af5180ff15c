"""vLLM's scheduler's own CPU cost per step, measured, as a term of the step time.

Between two forward passes vLLM's engine core runs ``schedule()`` (admissions, the KV cache
manager's allocations, the step's composition) and ``update_from_output()`` (each request's new
token, stop checks, the outputs sent to the API server): Python on the host's CPU, the same
beside a GPU as here. With synchronous scheduling, as vLLM ran by default until its releases of
late 2025 (``async_scheduling``, in ``vllm/config/vllm.py``, now on by default), that work is
serial with the GPU's pass and adds to every step; with asynchronous scheduling it overlaps the
next pass. :func:`measure_scheduler_cost` drives vLLM's scheduler on a virtual clock
(``vllm-sim``) over a trace and reads this thread's CPU time in each call (less inflated than
wall time by other processes, not immune: the pipeline's rule takes the whole machine); :func:`fit_scheduler_cost` fits the time per step
against the requests it scheduled by OLS: a fixed cost per step and a cost per scheduled
request. :meth:`~schedlab.engine.steptime.StepTimeModel.with_host_cost` adds them to a
step-time model (the per-request cost on each decode, the requests a step holds)."""

from __future__ import annotations

import pandas as pd

from schedlab.errors import SchedlabError
from schedlab.fit.line import line_fit

#: The table's columns: one row per step.
COLUMNS = ("n_scheduled", "n_decode", "n_prefill_tokens", "schedule_ms", "update_ms", "total_ms")


def measure_scheduler_cost(trace: pd.DataFrame, scheduler: str, arena, *, model: str) -> pd.DataFrame:
    """One row per step of ``trace`` through vLLM's scheduler running ``scheduler`` on
    ``arena``: the step's requests and the CPU time (ms) of ``schedule()`` and
    ``update_from_output()``."""
    from schedlab.backends.vllm_sim.run import run_vllm_sim

    costs: list = []
    run_vllm_sim(trace, scheduler, arena, model=model, host_costs=costs)
    table = pd.DataFrame(costs, columns=["n_scheduled", "n_decode", "n_prefill_tokens", "schedule_ms", "update_ms"])
    table[["schedule_ms", "update_ms"]] *= 1e3
    return table.assign(total_ms=table["schedule_ms"] + table["update_ms"])


def fit_scheduler_cost(table: pd.DataFrame) -> dict:
    """OLS of the scheduler's CPU time per step (ms) on the requests it scheduled, with 95 %
    intervals; each part's median beside it."""
    if len(table) < 3 or table["n_scheduled"].nunique() < 2:
        raise SchedlabError("the scheduler's cost needs steps of two batch sizes at least")
    return {
        **line_fit(table["n_scheduled"], table["total_ms"], "fixed_ms", "per_request_ms"),
        "steps": int(len(table)), "largest_batch": int(table["n_scheduled"].max()),
        "schedule_ms_median": float(table["schedule_ms"].median()), "update_ms_median": float(table["update_ms"].median()),
    }

