"""Calibrating a roofline step-time model to a paper's FCFS baseline.

A pure roofline is far faster than a real serving stack. Three factors are fitted, on the FCFS
baseline only, so everything the model then says about other policies, workloads and models is
a prediction:

1. ``compute``: the factor on compute-bound costs (encoder pass, prefill), the inverse of the
   achieved FLOP efficiency;
2. ``memory``: the factor on memory-bound costs (each step's weight reads, each decode's KV),
   which sets the per-token share of a request's cost;
3. ``frontend_s``: the fixed per-request delay before the scheduler sees a request (HTTP, audio
   decoding, feature extraction).

:func:`calibrate` fits them jointly by least squares on the logarithm of simulated over reported
values: every FCFS cell of the paper's table (each rate's P50 TTFT, P50 and P90 E2EL) plus the
saturation throughput on an overloaded trace. The start is the two-number solution of
:func:`saturation_factor` and the light-load TTFT; the parameters' uncertainty comes from the
Jacobian at the optimum (covariance ``s^2 (J'J)^-1``, ``s^2`` the residual variance).
:func:`baseline_rows` is the only door from a reported table into a fit: it keeps the FCFS rows
and the fitted metrics, nothing of SJF, HRRN or any other treatment.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
from scipy.optimize import brentq, least_squares

from schedlab.engine import Arena
from schedlab.engine.steptime import StepTimeModel
from schedlab.errors import SchedlabError
from schedlab.simulate import run_summary

BASELINE_POLICY = "fcfs"
#: The reported cells a fit matches, per rate.
BASELINE_METRICS = ("p50_ttft_ms", "p50_e2el_ms", "p90_e2el_ms")
PARAMETERS = ("compute", "memory", "frontend_s")


def baseline_rows(reported: pd.DataFrame) -> pd.DataFrame:
    """The baseline (FCFS) rows of a reported table, indexed by rate, with the fitted metrics
    only: the one input of a fit taken from the paper's tables."""
    rows = reported[reported["policy"] == BASELINE_POLICY]
    if rows.empty:
        raise SchedlabError("the reported table has no FCFS rows to calibrate on")
    return rows.set_index("rate")[list(BASELINE_METRICS)].astype(float).sort_index()


def _fcfs(trace: pd.DataFrame, arena: Arena, model: StepTimeModel) -> dict:
    return run_summary(trace, BASELINE_POLICY, replace(arena, step_time=model), identity={})[1]


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


def _model(base: StepTimeModel, x: np.ndarray) -> StepTimeModel:
    compute, memory, frontend_s = np.exp(x)
    return base.scaled(float(compute), float(memory), float(frontend_s))


def simulate_baseline(arena: Arena, model: StepTimeModel, traces: dict[float, pd.DataFrame],
                      overload_trace: pd.DataFrame) -> tuple[pd.DataFrame, float]:
    """FCFS's fitted metrics at each rate's trace (indexed by rate), and its throughput on the
    overloaded trace."""
    rows = {rate: {m: _fcfs(tr, arena, model)[m] for m in BASELINE_METRICS} for rate, tr in traces.items()}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("rate"), _fcfs(overload_trace, arena, model)["throughput_rps"]


def calibrate(
    arena: Arena,
    *,
    baseline: pd.DataFrame,
    traces: dict[float, pd.DataFrame],
    overload_trace: pd.DataFrame,
    saturation_rps: float,
    diff_step: float = 0.03,
) -> tuple[StepTimeModel, dict]:
    """Fit ``compute``, ``memory`` and ``frontend_s`` to ``baseline`` (from :func:`baseline_rows`;
    one trace per rate in ``traces``) and the saturation throughput; return the calibrated model
    and a record of targets, estimates with standard errors, residuals and achieved values."""
    base = arena.step_time
    missing = set(baseline.index) - set(traces)
    if missing:
        raise SchedlabError(f"no trace for the reported rates {sorted(missing)}")
    rates = sorted(baseline.index)
    target = baseline.loc[rates, list(BASELINE_METRICS)].to_numpy(float)
    light = rates[0]

    compute0 = saturation_factor(arena, overload_trace, saturation_rps)
    ttft0 = _fcfs(traces[light], arena, base.scaled(compute0))["p50_ttft_ms"]
    frontend0 = max(1e-4, (baseline.loc[light, "p50_ttft_ms"] - ttft0) / 1e3)
    x0 = np.log([compute0, 1.0, frontend0])

    def residuals(x: np.ndarray) -> np.ndarray:
        sim, thr = simulate_baseline(arena, _model(base, x), {r: traces[r] for r in rates}, overload_trace)
        cells = np.log(sim.loc[rates, list(BASELINE_METRICS)].to_numpy(float) / target).ravel()
        return np.append(cells, np.log(thr / saturation_rps))

    fit = least_squares(residuals, x0, diff_step=diff_step, x_scale=1.0, bounds=(np.log([1e-2, 1e-2, 1e-5]), np.log([1e4, 1e2, 10.0])))
    dof = max(fit.fun.size - fit.x.size, 1)
    s2 = 2 * fit.cost / dof
    cov = s2 * np.linalg.pinv(fit.jac.T @ fit.jac)
    sd_log = np.sqrt(np.clip(np.diag(cov), 0, None))
    est = np.exp(fit.x)
    model = _model(base, fit.x)
    sim, thr = simulate_baseline(arena, model, {r: traces[r] for r in rates}, overload_trace)
    cells = [
        {"rate": float(r), "metric": m, "paper": float(baseline.loc[r, m]), "ours": float(sim.loc[r, m]),
         "error_pct": float((sim.loc[r, m] / baseline.loc[r, m] - 1) * 100)}
        for r in rates for m in BASELINE_METRICS
    ]
    record = {
        "method": "least squares on log(simulated / reported), FCFS rows and saturation only",
        "targets": {"saturation_rps": saturation_rps, "light_p50_ttft_ms": float(baseline.loc[light, "p50_ttft_ms"]),
                    "fcfs_rows": {str(r): baseline.loc[r].to_dict() for r in rates}},
        **{p: float(v) for p, v in zip(PARAMETERS, est)},
        "uncertainty": {p: {"estimate": float(v), "se": float(v * s), "se_log": float(s),
                            "ci95": [float(v * np.exp(-1.96 * s)), float(v * np.exp(1.96 * s))]}
                        for p, v, s in zip(PARAMETERS, est, sd_log)},
        "covariance_log": cov.tolist(),
        "start": {p: float(v) for p, v in zip(PARAMETERS, np.exp(x0))},
        "residual_sd_log": float(np.sqrt(s2)),
        "residuals": cells,
        "achieved": {
            "saturation_rps": float(thr),
            "light_p50_ttft_ms": float(sim.loc[light, "p50_ttft_ms"]),
            "light_p50_e2el_ms": float(sim.loc[light, "p50_e2el_ms"]),
            "mean_step_ms_at_overload": _fcfs(overload_trace, arena, model)["mean_step_ms"],
        },
        "evaluations": int(fit.nfev),
    }
    return base.scaled(*est, calibration=record), record


def implied_saturation(arena: Arena, model: StepTimeModel, rows: pd.DataFrame, traces: dict[float, pd.DataFrame],
                       overload_trace: pd.DataFrame) -> list[dict]:
    """For each reported baseline row of ``rows`` (indexed by rate, ``p50_e2el_ms``), the speed
    the calibrated ``model`` would need to match that row's median E2E latency alone: its
    compute costs scaled (Brent's method) until FCFS's median on the rate's trace is the
    reported one, and the saturation throughput FCFS then reaches on the overloaded trace.
    Rows past saturation that imply different engines show why one fit cannot match them all."""
    out = []
    for rate, row in rows.iterrows():
        target = float(row["p50_e2el_ms"])

        def gap(log_scale: float) -> float:
            return np.log(_fcfs(traces[rate], arena, model.scaled(float(np.exp(log_scale))))["p50_e2el_ms"] / target)

        lo, hi = np.log(0.25), np.log(4.0)
        if gap(lo) > 0 or gap(hi) < 0:
            continue  # not within a factor of 4 of the fit's speed
        scale = float(np.exp(brentq(gap, lo, hi, xtol=1e-3)))
        out.append({"rate": float(rate), "paper_p50_e2el_ms": target, "compute_scale": scale,
                    "saturation_rps": float(_fcfs(overload_trace, arena, model.scaled(scale))["throughput_rps"])})
    return out


def bound_study(arena: Arena, bounds: dict[str, tuple[dict[float, pd.DataFrame], int | None]],
                policies=("fcfs", "sjf", "hrrn")) -> pd.DataFrame:
    """Every policy on each way of bounding a run: ``bounds`` maps a label to (trace per rate,
    cap on requests in flight or None). One row per (bound, rate, policy), the fitted metrics
    and throughput."""
    rows = []
    for label, (traces, cap) in bounds.items():
        for rate, trace in traces.items():
            for policy in policies:
                s = run_summary(trace, policy, arena, identity={}, max_in_flight=cap)[1]
                rows.append({"bound": label, "rate": float(rate), "policy": policy, "requests": len(trace),
                             **{m: s[m] for m in (*BASELINE_METRICS, "throughput_rps")}})
    return pd.DataFrame(rows)


def sensitivity(arena: Arena, record: dict, trace: pd.DataFrame, *, treatment: str = "sjf",
                metric: str = "p50_e2el_ms", steps=(-2.0, -1.0, 0.0, 1.0, 2.0)) -> pd.DataFrame:
    """``treatment``'s change vs FCFS (%) in ``metric`` on ``trace`` as each fitted parameter
    moves ``steps`` standard errors (in log units) from its estimate, the others held: which
    conclusions survive the calibration's uncertainty. ``arena`` holds the uncalibrated model."""
    x_hat = np.log([record[p] for p in PARAMETERS])
    se = np.array([record["uncertainty"][p]["se_log"] for p in PARAMETERS])
    raw = arena.step_time
    rows = []
    for k, name in enumerate(PARAMETERS):
        for step in steps:
            x = x_hat.copy()
            x[k] += step * se[k]
            model = _model(raw, x)
            f, t = (run_summary(trace, p, replace(arena, step_time=model), identity={})[1][metric] for p in (BASELINE_POLICY, treatment))
            rows.append({"parameter": name, "step_se": step, "value": float(np.exp(x[k])),
                         "change_pct": (t / f - 1) * 100, "fcfs": f, treatment: t})
    return pd.DataFrame(rows)
