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

import numpy as np
import pandas as pd
from scipy.optimize import brentq

from schedlab.errors import SchedlabError
from schedlab.sim.engine import EngineConfig
from schedlab.sim.setup import run_sim
from schedlab.sim.steptime import StepTimeModel


def _fcfs(trace, model, engine, kappa) -> dict:
    return run_sim(trace, "fcfs", model, engine, kappa=kappa, identity={})[1]


def saturation_factor(
    base: StepTimeModel,
    engine: EngineConfig,
    overload_trace: pd.DataFrame,
    saturation_rps: float,
    *,
    kappa: dict[str, float],
    memory: float = 1.0,
) -> float:
    """The factor on compute-bound costs at which FCFS delivers ``saturation_rps`` on the
    overloaded trace (Brent's method on its logarithm)."""

    def throughput(log_compute: float) -> float:
        model = base.scaled(float(np.exp(log_compute)), memory)
        return _fcfs(overload_trace, model, engine, kappa)["throughput_rps"]

    lo, hi = np.log(1e-2), np.log(1e4)
    fastest = throughput(lo)
    if fastest <= saturation_rps:
        raise SchedlabError(
            f"the overload trace delivers at most {fastest:.2f} req/s, not above the "
            f"{saturation_rps} req/s target: offer a higher overload rate or lower the memory factor"
        )
    return float(np.exp(brentq(lambda x: np.log(throughput(x) / saturation_rps), lo, hi, xtol=1e-4)))


def calibrate(
    base: StepTimeModel,
    engine: EngineConfig,
    *,
    overload_trace: pd.DataFrame,
    light_trace: pd.DataFrame,
    saturation_rps: float,
    light_p50_ttft_ms: float,
    kappa: dict[str, float],
    memory: float = 1.0,
) -> tuple[StepTimeModel, dict]:
    """Return the calibrated model and a record of targets, solutions and achieved values."""
    compute = saturation_factor(base, engine, overload_trace, saturation_rps, kappa=kappa, memory=memory)
    light = _fcfs(light_trace, base.scaled(compute, memory), engine, kappa)
    frontend_s = max(0.0, (light_p50_ttft_ms - light["p50_ttft_ms"]) / 1e3)
    record = {
        "targets": {"saturation_rps": saturation_rps, "light_p50_ttft_ms": light_p50_ttft_ms},
        "compute": compute,
        "memory": memory,
        "frontend_s": frontend_s,
    }
    model = base.scaled(compute, memory, frontend_s)
    overload = _fcfs(overload_trace, model, engine, kappa)
    light = _fcfs(light_trace, model, engine, kappa)
    record["achieved"] = {
        "saturation_rps": overload["throughput_rps"],
        "light_p50_ttft_ms": light["p50_ttft_ms"],
        "mean_step_ms_at_overload": overload["mean_step_ms"],
        "light_p50_e2el_ms": light["p50_e2el_ms"],
    }
    return base.scaled(compute, memory, frontend_s, calibration=record), record
