"""Calibrating a roofline step-time model to a paper's FCFS baseline.

A pure roofline is far faster than a real serving stack. Documented numbers are fitted on the
FCFS baseline only, so everything the model then says about other policies, workloads, rates
and models is a prediction:

1. ``compute``: the factor on compute-bound costs (encoder pass, new-request prefill), the
   inverse of achieved FLOP efficiency, chosen so FCFS saturates at the paper's throughput on
   an overloaded trace;
2. ``frontend_s``: the fixed per-request delay before the scheduler sees a request (HTTP, audio
   decoding, feature extraction), chosen so FCFS's median TTFT at a light load is the paper's.

The factor on memory-bound costs (weights and KV reads of decode steps) is an input, 1.0 by
default: decoding at the bandwidth roofline.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
from scipy.optimize import brentq

from schedlab.engine import Arena
from schedlab.engine.steptime import StepTimeModel
from schedlab.errors import SchedlabError
from schedlab.simulate import run_policy


def _fcfs(trace: pd.DataFrame, arena: Arena, model: StepTimeModel) -> dict:
    return run_policy(trace, "fcfs", replace(arena, step_time=model), identity={})[1]


def saturation_factor(arena: Arena, overload_trace: pd.DataFrame, saturation_rps: float, *, memory: float = 1.0) -> float:
    """The factor on the arena's compute-bound costs at which FCFS delivers ``saturation_rps``
    on the overloaded trace (Brent's method on its logarithm)."""

    def throughput(log_compute: float) -> float:
        model = arena.step_time.scaled(float(np.exp(log_compute)), memory)
        return _fcfs(overload_trace, arena, model)["throughput_rps"]

    lo, hi = np.log(1e-2), np.log(1e4)
    fastest = throughput(lo)
    if fastest <= saturation_rps:
        raise SchedlabError(
            f"the overload trace delivers at most {fastest:.2f} req/s, not above the "
            f"{saturation_rps} req/s target: offer a higher overload rate or lower the memory factor"
        )
    return float(np.exp(brentq(lambda x: np.log(throughput(x) / saturation_rps), lo, hi, xtol=1e-4)))


def calibrate(
    arena: Arena,
    *,
    overload_trace: pd.DataFrame,
    light_trace: pd.DataFrame,
    saturation_rps: float,
    light_p50_ttft_ms: float,
    memory: float = 1.0,
) -> tuple[StepTimeModel, dict]:
    """Calibrate the arena's step-time model; return it and a record of targets, solutions
    and achieved values."""
    base = arena.step_time
    compute = saturation_factor(arena, overload_trace, saturation_rps, memory=memory)
    light = _fcfs(light_trace, arena, base.scaled(compute, memory))
    frontend_s = max(0.0, (light_p50_ttft_ms - light["p50_ttft_ms"]) / 1e3)
    record = {
        "targets": {"saturation_rps": saturation_rps, "light_p50_ttft_ms": light_p50_ttft_ms},
        "compute": compute,
        "memory": memory,
        "frontend_s": frontend_s,
    }
    model = base.scaled(compute, memory, frontend_s)
    overload = _fcfs(overload_trace, arena, model)
    light = _fcfs(light_trace, arena, model)
    record["achieved"] = {
        "saturation_rps": overload["throughput_rps"],
        "light_p50_ttft_ms": light["p50_ttft_ms"],
        "mean_step_ms_at_overload": overload["mean_step_ms"],
        "light_p50_e2el_ms": light["p50_e2el_ms"],
    }
    return base.scaled(compute, memory, frontend_s, calibration=record), record
