"""Seeded arrival processes shared by every policy.

Inter-arrival gaps are gamma-distributed with shape ``burstiness`` and mean ``1 / rate``
(``vllm bench serve``'s convention): burstiness 1 is a Poisson process, lower is burstier.
"""

from __future__ import annotations

import math

import numpy as np

from schedlab.contracts import MAX_RUN_S
from schedlab.errors import SchedlabError
from schedlab.limits import check_fits_in_memory

def arrival_times(
    rate: float,
    *,
    rng: np.random.Generator,
    duration_s: float | None = None,
    n_requests: int | None = None,
    burstiness: float = 1.0,
) -> np.ndarray:
    """Arrival times from t=0 for ``duration_s`` seconds or for ``n_requests`` requests.

    ``rate = inf`` is a burst: ``n_requests`` arrivals all at t=0.
    """
    if not rate > 0:
        raise SchedlabError(f"rate must be positive, got {rate}")
    if not burstiness > 0:
        raise SchedlabError(f"burstiness must be positive, got {burstiness}")
    if (duration_s is None) == (n_requests is None):
        raise SchedlabError("give exactly one of duration_s and n_requests")
    if math.isinf(rate) and n_requests is None:
        raise SchedlabError("a burst (rate = inf) needs n_requests")
    expected = n_requests if n_requests is not None else rate * duration_s
    check_fits_in_memory(expected, f"{rate:g} req/s" + (f" for {duration_s:g} s" if duration_s is not None else ""))
    if math.isinf(rate):
        if n_requests is None:
            raise SchedlabError("a burst (rate = inf) needs n_requests")
        return np.zeros(n_requests)
    scale = 1.0 / (rate * burstiness)
    if n_requests == 0:
        return np.zeros(0)
    if n_requests is not None:
        if (n_requests - 1) / rate > MAX_RUN_S:
            raise SchedlabError(f"{n_requests:,} requests at {rate:g} req/s arrive over about {(n_requests - 1) / rate:.3g} s, "
                                f"past the {MAX_RUN_S:.0e} s a run may last: give at least {n_requests / MAX_RUN_S:.3g} req/s")
        gaps = rng.gamma(burstiness, scale, size=n_requests)
        return _within_a_run(np.cumsum(gaps) - gaps[0], rate, burstiness)
    times: list[np.ndarray] = []
    t = 0.0
    chunk = max(16, int(rate * duration_s * 1.2))
    while True:
        gaps = rng.gamma(burstiness, scale, size=chunk)
        ts = t + np.cumsum(gaps)
        if not times:
            ts -= gaps[0]
        times.append(ts[ts < duration_s])
        if ts[-1] >= duration_s:
            return np.concatenate(times)
        t = ts[-1]


def _within_a_run(times: np.ndarray, rate: float, burstiness: float) -> np.ndarray:
    """``times``, refused in one line when the last is not finite or past
    :data:`~schedlab.contracts.MAX_RUN_S` (a rate so low, or arrivals so bursty, that the trace
    outlasts any run)."""
    if times.size and not times[-1] <= MAX_RUN_S:
        raise SchedlabError(f"arrivals at {rate:g} req/s (burstiness {burstiness:g}) run to {times[-1]:.3g} s, past the "
                            f"{MAX_RUN_S:.0e} s a run may last: raise the rate or the burstiness, or take fewer requests")
    return times
