"""Calibrating a step-time model's efficiencies to measured batch times of prefill chunks.

A batch holding one prefill chunk of ``c`` tokens (no context, no decode) takes
``memory * intercept + compute * (per-token, staircase and attention terms)`` under
:meth:`StepTimeModel.scaled`, which is linear in the two factors (inverse achieved
efficiencies of the memory-bound and compute-bound terms). They are fitted by non-negative
least squares on relative errors, so each measured point weighs the same, each factor at least
1: a factor is the calibrated time over the roofline's at the hardware's peak, and no kernel runs
above the peak. A factor held at 1 is the model failing there (the record lists it in
``at_peak``), not a faster kernel.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import lsq_linear

from schedlab.errors import SchedlabError
from schedlab.engine.steptime import StepTimeModel


def chunk_time(model: StepTimeModel, chunk) -> np.ndarray:
    """Seconds of a batch that is one prefill chunk of ``chunk`` tokens from position 0."""
    c = np.asarray(chunk, dtype=float)
    return np.asarray(model(0, c, 0, 0, c * (c + 1) / 2), dtype=float)


#: The smallest factor on a roofline's time at the hardware's peak: the peak itself.
AT_PEAK = 1.0


def relative_factors(compute_part, memory_part, target) -> tuple[float, float]:
    """Factors ``(compute, memory)``, each at least :data:`AT_PEAK`, with ``compute *
    compute_part + memory * memory_part`` closest to ``target`` in relative error (each point
    weighs the same), by bounded linear least squares."""
    target = np.asarray(target, dtype=float)
    A = np.column_stack([compute_part, memory_part]) / target[:, None]
    compute, memory = lsq_linear(A, np.ones_like(target), bounds=(AT_PEAK, np.inf)).x
    return float(compute), float(memory)


def at_peak(factors: dict[str, float]) -> list[str]:
    """The names of ``factors`` held at the hardware's peak (:data:`AT_PEAK`)."""
    return [name for name, value in factors.items() if value <= AT_PEAK * (1 + 1e-9)]


def calibrate_chunks(base: StepTimeModel, chunks, times_s) -> tuple[StepTimeModel, dict]:
    """``base`` scaled so its chunk times match the measured ``times_s``; returns the model
    (its ``meta["calibration"]`` holds targets, factors and achieved times) and the record."""
    chunks = np.asarray(chunks, dtype=float)
    target = np.asarray(times_s, dtype=float)
    if chunks.size < 2 or chunks.size != target.size or (target <= 0).any() or (chunks < 1).any():
        raise SchedlabError("need at least two (chunk >= 1 token, time > 0) measured points")
    memory_part = chunk_time(base.scaled(0.0, 1.0), chunks)
    compute_part = chunk_time(base.scaled(1.0, 0.0), chunks)
    compute, memory = relative_factors(compute_part, memory_part, target)
    model = base.scaled(compute, memory)
    achieved = chunk_time(model, chunks)
    record = {
        "chunks": chunks.tolist(),
        "targets_s": target.tolist(),
        "compute": float(compute),
        "memory": float(memory),
        "at_peak": at_peak({"compute": compute, "memory": memory}),
        "achieved_s": achieved.tolist(),
        "max_rel_error": float(np.max(np.abs(achieved / target - 1))),
    }
    return base.scaled(compute, memory, calibration=record), record
