"""Calibrating a roofline step-time model to a paper's FCFS baseline.

A pure roofline is far faster than a real serving stack. Three factors are fitted, on the FCFS
baseline only, so everything the model then says about other policies, workloads and models is
a prediction:

1. ``compute``: the factor on compute-bound costs (encoder pass, prefill), the inverse of the
   achieved FLOP efficiency;
2. ``memory``: the factor on memory-bound costs (each step's weight reads, each decode's KV),
   which sets the per-token share of a request's cost;
3. ``frontend_s``: the fixed per-request delay before the scheduler sees a request (HTTP, audio
   decoding, feature extraction);
4. optionally ``frontend_service_s``: the front end as a queue, one API process that holds each
   request that long, first come first served (:class:`~schedlab.engine.steptime.StepTimeModel`).

:func:`calibrate` fits them jointly by least squares on the logarithm of simulated over reported
values: every FCFS cell of the paper's table (each rate's P50 TTFT, P50 and P90 E2EL), the
saturation throughput on an overloaded trace and, given ``step_ms``, FCFS's mean step time on
that trace against the interval the paper gives for one decoder step at load (no penalty
inside it; outside, the log distance to its nearer end). Each simulated value is the **median over
trace seeds**: a rate's entry in ``traces`` (and ``overload_trace``) may be one trace or one
per seed, and the fit matches the median of each cell over them, not one draw of arrivals (the
paper's single run is itself a draw; the median is the typical run, robust to the occasional
heavy seed that past saturation doubles a latency, and it is the value every notebook reports
as ours). ``compute`` and ``memory`` stay at or above 1 (the hardware's peak); one held at 1 is
listed in the record's ``at_peak``: the model failing there. The start is the two-number
solution of :func:`saturation_factor` and the light-load TTFT, with ``memory`` at
:data:`MEMORY_START`; the parameters' uncertainty comes from the Jacobian at the optimum (covariance ``s^2 (J'J)^-1``, ``s^2`` the residual variance).
:func:`baseline_rows` is the only door from a reported table into a fit: it keeps the FCFS rows
and the fitted metrics, nothing of SJF, HRRN or any other treatment.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
from scipy.optimize import brentq, least_squares

from schedlab.engine import Arena
from schedlab.engine.steptime import COMPUTE_TERMS, OPTIONAL_TERMS, StepTimeModel
from schedlab.fit.chunk_times import AT_PEAK, at_peak
from schedlab.errors import SchedlabError
from schedlab.fit.roots import bracketed_root
from schedlab.limits import SEARCH_RUNS, check_work
from schedlab.simulate import run_summary

BASELINE_POLICY = "fcfs"
#: The reported cells a fit matches, per rate.
BASELINE_METRICS = ("p50_ttft_ms", "p50_e2el_ms", "p90_e2el_ms")
PARAMETERS = ("compute", "memory", "frontend_s")
#: The front-end station's service time, fitted when the calibration models the front end as a queue.
STATION = "frontend_service_s"
#: The station's first guesses (s). Its waits grow with the square of its service time at low
#: load, so a fit that starts at a few milliseconds sees almost no gradient: it starts from each
#: of these, and keeps the best.
STATION_STARTS_S = (0.005, 0.02, 0.05)


def interval_residual(value: float, low: float, high: float) -> float:
    """0 inside ``[low, high]``; outside, the log distance to the nearer end."""
    if value < low:
        return float(np.log(value / low))
    if value > high:
        return float(np.log(value / high))
    return 0.0


def baseline_rows(reported: pd.DataFrame) -> pd.DataFrame:
    """The baseline (FCFS) rows of a reported table, indexed by rate, with the fitted metrics
    only: the one input of a fit taken from the paper's tables."""
    rows = reported[reported["policy"] == BASELINE_POLICY]
    if rows.empty:
        raise SchedlabError("the reported table has no FCFS rows to calibrate on")
    return rows.set_index("rate")[list(BASELINE_METRICS)].astype(float).sort_index()


#: The memory factor's first guess: half the peak bandwidth.
MEMORY_START = 2.0
#: The statistic over trace seeds that a calibration matches to the paper's one run.
SEED_STATISTIC = "median"


def seeds_of(traces) -> list[pd.DataFrame]:
    """One trace, or a sequence of traces (one per seed), as a list."""
    return [traces] if isinstance(traces, pd.DataFrame) else list(traces)


def _fcfs(traces, arena: Arena, model: StepTimeModel, metrics) -> dict:
    """FCFS's ``metrics`` on ``traces`` (one trace or one per seed): each the median over seeds."""
    arena = replace(arena, step_time=model)
    runs = [run_summary(trace, BASELINE_POLICY, arena, identity={})[1] for trace in seeds_of(traces)]
    return {m: float(np.median([r[m] for r in runs])) for m in metrics}


def saturation_factor(arena: Arena, overload_trace, saturation_rps: float, *, memory: float = 1.0) -> float:
    """The factor on the arena's compute-bound costs at which FCFS delivers ``saturation_rps``
    on the overloaded trace (one, or one per seed: the median over them), by Brent's method on
    its logarithm."""

    def throughput(log_compute: float) -> float:
        model = arena.step_time.scaled(float(np.exp(log_compute)), memory)
        return _fcfs(overload_trace, arena, model, ("throughput_rps",))["throughput_rps"]

    lo, hi = np.log(AT_PEAK), np.log(1e4)
    requests = sum(len(trace) for trace in seeds_of(overload_trace))
    check_work(requests * SEARCH_RUNS, f"the saturation search (about {SEARCH_RUNS} runs of the overload traces' "
               f"{requests:,} requests, --n-requests)")
    if not any(getattr(arena.step_time, t) > 0 for t in COMPUTE_TERMS + OPTIONAL_TERMS):
        raise SchedlabError(f"the base step-time model (--base) has no compute-bound cost ({', '.join(COMPUTE_TERMS)}"
                            f" are 0): there is nothing to scale to the {saturation_rps:g} req/s saturation target")

    def unreachable(at_fastest: float, at_slowest: float) -> str:
        fastest, slowest = saturation_rps * np.exp(at_fastest), saturation_rps * np.exp(at_slowest)
        if not (np.isfinite(at_fastest) and np.isfinite(at_slowest)):
            return (f"FCFS serves the overload trace at {fastest:.3g} req/s at the hardware's peak FLOP/s and at "
                    f"{slowest:.3g} req/s with compute costs 10^4x: the step-time model's steps take no time to scale")
        if fastest <= saturation_rps:
            return (f"at the hardware's peak FLOP/s the overload trace delivers at most {fastest:.2f} req/s, not above "
                    f"the {saturation_rps} req/s target: offer a higher overload rate or lower the memory factor")
        return (f"the {saturation_rps:g} req/s saturation target is below the {slowest:.3g} req/s FCFS keeps with "
                f"compute costs 10^4 times the model's: targets from {slowest:.3g} to {fastest:.3g} req/s can be fitted")

    return float(np.exp(bracketed_root(lambda x: np.log(throughput(x) / saturation_rps), lo, hi, xtol=1e-4,
                                       unreachable=unreachable)))


def _model(base: StepTimeModel, x: np.ndarray, service_s: float = 0.0) -> StepTimeModel:
    """``base`` scaled by the fitted log parameters ``x``; a fourth is the station's service
    time, else ``service_s`` (a measured one, held fixed)."""
    values = np.exp(x)
    compute, memory, frontend_s = values[:3]
    service = float(values[3]) if values.size > 3 else service_s
    return base.scaled(float(compute), float(memory), float(frontend_s), service)


def simulate_baseline(arena: Arena, model: StepTimeModel, traces: dict, overload_trace) -> tuple[pd.DataFrame, float, float]:
    """FCFS's fitted metrics at each rate (indexed by rate), its throughput on the overloaded
    trace and its mean step time there (ms), each the median over the seeds' traces."""
    rows = {rate: _fcfs(tr, arena, model, BASELINE_METRICS) for rate, tr in traces.items()}
    over = _fcfs(overload_trace, arena, model, ("throughput_rps", "mean_step_ms"))
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("rate"), over["throughput_rps"], over["mean_step_ms"]


def request_work(model: StepTimeModel, duration_s: float, kappa: float) -> dict[str, float]:
    """Where a clip's work sits in ``model``: its encoder pass (with the 4-token prompt's
    prefill) and its decode steps' per-token costs (``n_hat`` tokens over a growing context),
    in ms, beside the per-step cost every step pays whatever it holds."""
    tokens = max(1, int(np.floor(duration_s * kappa)))
    ctx = 4 * tokens + tokens * (tokens - 1) / 2
    return {"encoder_ms": (model.n_encoder + 4 * model.n_prefill_tokens) * 1e3,
            "decode_ms": (model.n_decode * tokens + model.ctx_tokens * ctx) * 1e3,
            "step_fixed_ms": model.intercept * 1e3, "tokens": tokens}


def calibrate(
    arena: Arena,
    *,
    baseline: pd.DataFrame,
    traces: dict[float, pd.DataFrame],
    overload_trace: pd.DataFrame,
    saturation_rps: float,
    step_ms: tuple[float, float] | None = None,
    station: bool = False,
    station_service_s: float | None = None,
    diff_step: float = 0.03,
) -> tuple[StepTimeModel, dict]:
    """Fit ``compute``, ``memory`` and ``frontend_s`` (and with ``station`` the front end's
    service time; with ``station_service_s`` the front end is that queue with a measured service
    time, held fixed, not fitted) to ``baseline`` (from :func:`baseline_rows`; for each rate in ``traces`` one
    trace or one per seed, all seeds the same in number), the saturation throughput and, given
    ``step_ms``, the step-time interval, each simulated value the median over seeds; return the
    calibrated model and a record of targets, seeds, estimates with standard errors, residuals
    and achieved values."""
    base = arena.step_time
    missing = set(baseline.index) - set(traces)
    if missing:
        raise SchedlabError(f"no trace for the reported rates {sorted(missing)}")
    rates = sorted(baseline.index)
    target = baseline.loc[rates, list(BASELINE_METRICS)].to_numpy(float)
    light = rates[0]

    compute0 = saturation_factor(arena, overload_trace, saturation_rps)
    ttft0 = _fcfs(traces[light], arena, base.scaled(compute0), ("p50_ttft_ms",))["p50_ttft_ms"]
    frontend0 = max(1e-4, (baseline.loc[light, "p50_ttft_ms"] - ttft0) / 1e3)
    if step_ms is not None and not 0 < step_ms[0] <= step_ms[1]:
        raise SchedlabError(f"the step-time interval must be 0 < low <= high ms, got {list(step_ms)}")
    if station and station_service_s is not None:
        raise SchedlabError("the station's service time is either fitted or measured, not both")
    if station_service_s is not None and not station_service_s > 0:
        raise SchedlabError(f"a measured station service time must be positive, got {station_service_s}")
    fixed = station_service_s or 0.0
    names = PARAMETERS + ((STATION,) if station else ())
    # memory starts inside its bounds, at half the peak bandwidth: from a start on the bound
    # the trust region's steps in that coordinate scale with the distance to it, and the fit
    # barely leaves it.
    starts = [np.log([compute0, MEMORY_START, frontend0] + ([s] if station else [])) for s in (STATION_STARTS_S if station else [0])]
    # compute and memory at least 1: a factor is the time over the roofline's at the hardware's
    # peak, and no kernel runs above the peak; a factor held at 1 is the model failing there
    # (the record's ``at_peak``), not a faster kernel.
    low, high = [AT_PEAK, AT_PEAK, 1e-5] + ([1e-4] if station else []), [1e4, 1e2, 10.0] + ([1.0] if station else [])

    def residuals(x: np.ndarray) -> np.ndarray:
        sim, thr, step = simulate_baseline(arena, _model(base, x, fixed), {r: traces[r] for r in rates}, overload_trace)
        cells = np.log(sim.loc[rates, list(BASELINE_METRICS)].to_numpy(float) / target).ravel()
        extra = [np.log(thr / saturation_rps)] + ([interval_residual(step, *step_ms)] if step_ms else [])
        return np.append(cells, extra)

    try:
        fits = [least_squares(residuals, x0, diff_step=diff_step, x_scale=1.0, bounds=(np.log(low), np.log(high)))
                for x0 in starts]
    except ValueError as e:  # scipy's "Residuals are not finite in the initial point"
        raise SchedlabError(f"the fit cannot start ({e}): FCFS's simulated latencies at the reported rates "
                            f"{rates} must be positive numbers, with the saturation target of {saturation_rps:g} "
                            "req/s reached") from None
    best = int(np.argmin([f.cost for f in fits]))
    fit, x0 = fits[best], starts[best]
    dof = max(fit.fun.size - fit.x.size, 1)
    s2 = 2 * fit.cost / dof
    cov = s2 * np.linalg.pinv(fit.jac.T @ fit.jac)
    sd_log = np.sqrt(np.clip(np.diag(cov), 0, None))
    est = np.exp(fit.x)
    model = _model(base, fit.x, fixed)
    sim, thr, step = simulate_baseline(arena, model, {r: traces[r] for r in rates}, overload_trace)
    cells = [
        {"rate": float(r), "metric": m, "paper": float(baseline.loc[r, m]), "ours": float(sim.loc[r, m]),
         "error_pct": float((sim.loc[r, m] / baseline.loc[r, m] - 1) * 100)}
        for r in rates for m in BASELINE_METRICS
    ]
    extra = [{"metric": "saturation_rps", "paper": saturation_rps, "ours": float(thr),
              "residual_log": float(np.log(thr / saturation_rps))}]
    if step_ms:
        extra.append({"metric": "mean_step_ms_at_overload", "paper": list(step_ms), "ours": float(step),
                      "residual_log": interval_residual(step, *step_ms)})
    record = {
        "method": "least squares on log(simulated / reported), FCFS rows, saturation"
                  + (" and the step time at load (an interval)" if step_ms else "") + " only",
        "seeds": len(seeds_of(overload_trace)),
        "seed_statistic": SEED_STATISTIC,
        "targets": {"saturation_rps": saturation_rps, "light_p50_ttft_ms": float(baseline.loc[light, "p50_ttft_ms"]),
                    "fcfs_rows": {str(r): baseline.loc[r].to_dict() for r in rates},
                    **({"step_ms_at_load": list(step_ms)} if step_ms else {})},
        **{p: float(v) for p, v in zip(names, est)},
        **({} if station else {STATION: fixed}),
        **({"station_measured": True} if station_service_s is not None else {}),
        "uncertainty": {p: {"estimate": float(v), "se": float(v * s), "se_log": float(s),
                            "ci95": [float(v * np.exp(-1.96 * s)), float(v * np.exp(1.96 * s))]}
                        for p, v, s in zip(names, est, sd_log)},
        "at_peak": at_peak({p: float(v) for p, v in zip(names[:2], est[:2])}),
        "covariance_log": cov.tolist(),
        "start": {p: float(v) for p, v in zip(names, np.exp(x0))},
        "residual_sd_log": float(np.sqrt(s2)),
        "cost": float(fit.cost),
        "residuals": cells,
        "other_residuals": extra,
        "achieved": {
            "saturation_rps": float(thr),
            "light_p50_ttft_ms": float(sim.loc[light, "p50_ttft_ms"]),
            "light_p50_e2el_ms": float(sim.loc[light, "p50_e2el_ms"]),
            "mean_step_ms_at_overload": float(step),
        },
        "evaluations": int(sum(f.nfev for f in fits)),
        **({"station_starts": [{"start_s": float(np.exp(x[3])), "service_s": float(np.exp(f.x[3])), "cost": float(f.cost)}
                               for x, f in zip(starts, fits)]} if station else {}),
    }
    return model.scaled(calibration=record), record


def aic(record: dict) -> float:
    """Akaike's information criterion of a fit from its record (Gaussian log residuals): ``n
    ln(RSS / n) + 2 k``, over its ``n`` residuals and ``k`` parameters; of two fits of the same
    targets, the lower is the better trade of fit against parameters."""
    n = len(record["residuals"]) + len(record["other_residuals"])
    k = len(record["uncertainty"])
    return float(n * np.log(2 * record["cost"] / n) + 2 * k)


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
            scaled = model.scaled(float(np.exp(log_scale)))
            return np.log(_fcfs(traces[rate], arena, scaled, ("p50_e2el_ms",))["p50_e2el_ms"] / target)

        lo, hi = np.log(0.25), np.log(4.0)
        if not gap(lo) <= 0 <= gap(hi):
            continue  # not within a factor of 4 of the fit's speed (or no median to match)
        scale = float(np.exp(brentq(gap, lo, hi, xtol=1e-3)))
        out.append({"rate": float(rate), "paper_p50_e2el_ms": target, "compute_scale": scale,
                    "saturation_rps": _fcfs(overload_trace, arena, model.scaled(scale), ("throughput_rps",))["throughput_rps"]})
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


def sensitivity(arena: Arena, record: dict, trace, *, treatment: str = "sjf",
                metric: str = "p50_e2el_ms", steps=(-2.0, -1.0, 0.0, 1.0, 2.0)) -> pd.DataFrame:
    """``treatment``'s change vs FCFS (%) in ``metric`` on ``trace`` (one, or one per seed: the
    median of the seeds' changes) as each fitted parameter moves ``steps`` standard errors (in
    log units) from its estimate, the others held: which conclusions survive the calibration's
    uncertainty. ``arena`` holds the uncalibrated model."""
    names = [p for p in (*PARAMETERS, STATION) if p in record["uncertainty"]]
    x_hat = np.log([record[p] for p in names])
    se = np.array([record["uncertainty"][p]["se_log"] for p in names])
    raw = arena.step_time
    rows = []
    for k, name in enumerate(names):
        for step in steps:
            x = x_hat.copy()
            x[k] += step * se[k]
            calibrated = replace(arena, step_time=_model(raw, x))
            runs = [[run_summary(t, p, calibrated, identity={})[1][metric] for p in (BASELINE_POLICY, treatment)]
                    for t in seeds_of(trace)]
            f, t = (float(np.median(v)) for v in zip(*runs))
            change = float(np.median([(b / a - 1) * 100 for a, b in runs]))
            rows.append({"parameter": name, "step_se": step, "value": float(np.exp(x[k])),
                         "change_pct": change, "fcfs": f, treatment: t})
    return pd.DataFrame(rows)
