"""Calibrating a roofline step-time model to a paper's FCFS baseline.

A pure roofline is far faster than a real serving stack. Two documented numbers are fitted on
the FCFS baseline only, so everything else the model says about other policies, workloads and
models is a prediction:

1. ``factor``: every step cost is multiplied by it (the inverse of achieved efficiency), chosen
   so the FCFS saturation throughput on an overloaded trace equals the paper's;
2. ``frontend_s``: the fixed per-request delay before the scheduler sees a request (HTTP, audio
   decoding, feature extraction), chosen so the FCFS median TTFT at a light load equals the
   paper's.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.optimize import brentq

from schedlab.sim.engine import EngineConfig
from schedlab.sim.setup import run_sim
from schedlab.sim.steptime import StepTimeModel


def _fcfs(trace, model, engine, kappa, max_tokens) -> dict:
    return run_sim(trace, "fcfs", model, engine, kappa=kappa, max_tokens=max_tokens, identity={})[1]


def calibrate(
    base: StepTimeModel,
    engine: EngineConfig,
    *,
    overload_trace: pd.DataFrame,
    light_trace: pd.DataFrame,
    saturation_rps: float,
    light_p50_ttft_ms: float,
    kappa: dict[str, float],
    max_tokens: int,
) -> tuple[StepTimeModel, dict]:
    """Return the calibrated model and a record of targets, solutions and achieved values."""

    def throughput(log_factor: float) -> float:
        model = base.scaled(float(np.exp(log_factor)))
        return _fcfs(overload_trace, model, engine, kappa, max_tokens)["throughput_rps"]

    lo, hi = np.log(1e-2), np.log(1e3)
    log_factor = brentq(lambda x: np.log(throughput(x) / saturation_rps), lo, hi, xtol=1e-4)
    factor = float(np.exp(log_factor))
    scaled = base.scaled(factor)
    light = _fcfs(light_trace, scaled, engine, kappa, max_tokens)
    frontend_s = max(0.0, (light_p50_ttft_ms - light["p50_ttft_ms"]) / 1e3)
    record = {
        "targets": {"saturation_rps": saturation_rps, "light_p50_ttft_ms": light_p50_ttft_ms},
        "factor": factor,
        "frontend_s": frontend_s,
    }
    model = base.scaled(factor, frontend_s, calibration=record)
    overload = _fcfs(overload_trace, model, engine, kappa, max_tokens)
    light = _fcfs(light_trace, model, engine, kappa, max_tokens)
    record["achieved"] = {
        "saturation_rps": overload["throughput_rps"],
        "mean_step_ms_at_overload": overload["mean_step_ms"],
        "light_p50_ttft_ms": light["p50_ttft_ms"],
    }
    return base.scaled(factor, frontend_s, calibration=record), record
