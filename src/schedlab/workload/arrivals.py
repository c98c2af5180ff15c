"""Seeded arrival processes shared by every policy.

Inter-arrival gaps are gamma-distributed with shape ``burstiness`` and mean ``1 / rate``
(``vllm bench serve``'s convention): burstiness 1 is a Poisson process, lower is burstier.
"""

from __future__ import annotations

import math

import numpy as np

from schedlab.errors import SchedlabError


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
    if math.isinf(rate):
        if n_requests is None:
            raise SchedlabError("a burst (rate = inf) needs n_requests")
        return np.zeros(n_requests)
    scale = 1.0 / (rate * burstiness)
    if n_requests == 0:
        return np.zeros(0)
    if n_requests is not None:
        gaps = rng.gamma(burstiness, scale, size=n_requests)
        return np.cumsum(gaps) - gaps[0]
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
