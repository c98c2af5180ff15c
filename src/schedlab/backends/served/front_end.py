"""Where a served replay's requests spent their time outside the scheduler: the client's send
lag, the HTTP and API server's response, the way in to the scheduler and to the engine core
(per-request bounds and Turnbull's estimate of their median), and the way out."""

from __future__ import annotations

import numpy as np
import pandas as pd


def way_to_core(requests: pd.DataFrame, steps: pd.DataFrame, wall_t0: float) -> tuple[np.ndarray, np.ndarray]:
    """Bounds on each request's way in to the engine core, in s: its time from arrival to the
    scheduler (``admitted_s - arrival_s``, :func:`~schedlab.backends.steps.tables.request_timeline`) less its wait for the
    step the core was running. Under synchronous scheduling (vLLM's CPU engine) the core adds
    new requests only between steps, so a request that reaches it mid-step waits for that step
    to end before the scheduler sees it; a simulator makes a request wait for the step in
    progress itself, so its way in must not hold that wait again. The moment a request reached
    the core is not logged. Where the engine was idle as it arrived (the last step scheduled
    before it reached the scheduler had ended) it is that moment, and both bounds are its way
    to the scheduler; otherwise it lies between the start of that step (or the arrival,
    whichever came later) and the moment it reached the scheduler. :func:`interval_median`
    gives the median request's way from these bounds. ``steps``: the replay's step table
    (wall-clock ``t_schedule``, ``t_update``); ``wall_t0``: the wall-clock time of the
    client's zero."""
    steps = steps.sort_values("t_schedule")
    start = steps["t_schedule"].to_numpy(float) - wall_t0
    end = steps["t_update"].to_numpy(float) - wall_t0
    arrival = requests["arrival_s"].to_numpy(float)
    upper = requests["admitted_s"].to_numpy(float) - arrival
    if not len(start):
        return upper, upper
    k = np.searchsorted(start, upper + arrival, side="left") - 1  # the last step scheduled before it was added
    before = np.clip(k, 0, None)
    busy = (k >= 0) & (end[before] > arrival)
    return np.where(busy, np.maximum(0.0, start[before] - arrival), upper), upper


def interval_median(lower: np.ndarray, upper: np.ndarray, iterations: int = 1000) -> float:
    """The median of a quantity seen only as intervals ``[lower, upper]`` (exact where the two
    are equal; rows with a NaN left out): Turnbull's nonparametric maximum-likelihood estimate
    of its distribution, by self-consistency iterations. The estimate puts its mass on the
    innermost intervals (an interval's lower end followed by an upper end, all ends sorted); each
    observation covers a run of them, so an iteration costs O(observations + innermost intervals)
    in time and memory. Where a mass lies in an innermost interval is not identified: half of it
    goes to each end. Where every interval holds the same value, that value, however wide."""
    seen = np.isfinite(lower) & np.isfinite(upper)
    lower, upper = np.asarray(lower, float)[seen], np.asarray(upper, float)[seen]
    n = len(lower)
    if not n:
        return float("nan")
    ends = np.concatenate([lower, upper])
    is_upper = np.repeat([False, True], n)
    order = np.lexsort((is_upper, ends))  # at a tie a lower end first: closed intervals
    ends, is_upper = ends[order], is_upper[order]
    first = np.flatnonzero(~is_upper[:-1] & is_upper[1:])
    q, p = ends[first], ends[first + 1]
    # Observation i covers innermost intervals a[i] .. b[i] - 1: those with lower[i] <= q, p <= upper[i].
    a, b = np.searchsorted(q, lower, "left"), np.searchsorted(p, upper, "right")
    m = len(q)
    mass = np.full(m, 1.0 / m)
    for _ in range(iterations):
        held = np.concatenate([[0.0], np.cumsum(mass)])
        share = 1.0 / (held[b] - held[a])
        cover = np.cumsum(np.bincount(a, share, m + 1) - np.bincount(b, share, m + 1))[:m]
        nxt = mass * cover / n
        if np.abs(nxt - mass).max() < 1e-10:
            break
        mass = nxt
    points = np.concatenate([q, p])
    weights = np.concatenate([np.where(q < p, nxt / 2, nxt), np.where(q < p, nxt / 2, 0.0)])
    order = np.argsort(points, kind="stable")
    return float(points[order][np.searchsorted(np.cumsum(weights[order]), 0.5 - 1e-9)])


def front_end_timing(requests: pd.DataFrame, steps: pd.DataFrame | None = None,
                     wall_t0: float | None = None) -> dict[str, float]:
    """Where a served replay's requests spent their time outside the scheduler, in ms: the
    client's lag sending them after their arrival (``send_lag``, from ``sent_s``); the time from
    sending to the start of the server's answer (``response``, from ``response_s``: the HTTP
    server and the API server's handler, before vLLM hands a request to its engine); with the
    scheduler's times (:func:`~schedlab.backends.steps.tables.request_timeline`), the way in, arrival to the scheduler
    (``front_in``), and the way out, the engine's last token to the client's (``way_out``);
    with the replay's ``steps`` and ``wall_t0`` too, the way in to the engine core
    (``to_core``, :func:`way_to_core`: its median only). Median and largest of each, and the
    means of the ways in and out."""
    out = {}
    parts = {"send_lag": ("arrival_s", "sent_s"), "response": ("sent_s", "response_s"),
             "front_in": ("arrival_s", "admitted_s"), "way_out": ("engine_finish_s", "finish_s")}
    for name, (start, end) in parts.items():
        if {start, end} <= set(requests) and requests[end].notna().any():
            ms = (requests[end] - requests[start]) * 1e3
            out |= {f"{name}_p50_ms": float(ms.median()), f"{name}_max_ms": float(ms.max())}
            if name in ("front_in", "way_out"):
                out[f"{name}_mean_ms"] = float(ms.mean())
    if steps is not None and len(steps) and wall_t0 is not None and "admitted_s" in requests \
            and requests["admitted_s"].notna().any():
        lower, upper = way_to_core(requests, steps, wall_t0)
        out["to_core_p50_ms"] = interval_median(lower, upper) * 1e3
    return out
