"""Seeded arrival processes shared by every policy.

Inter-arrival gaps are gamma-distributed with shape ``burstiness`` and mean ``1 / rate``
(``vllm bench serve``'s convention): burstiness 1 is a Poisson process, lower is burstier.
"""

from __future__ import annotations

import math
import os

import numpy as np

from schedlab.contracts import MAX_REQUESTS
from schedlab.errors import SchedlabError

#: Memory one request takes through a run (its trace row, the engine's state, its results),
#: rounded up from `schedlab simulate`'s 0.6 KiB a request (peak RSS at 20,000 and 200,000
#: requests).
BYTES_PER_REQUEST = 1024


def available_memory() -> int | None:
    """Bytes of memory available to a new allocation (``MemAvailable``; None where unknown)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return None


def check_fits_in_memory(n_requests: float, what: str | None = "the trace") -> None:
    """Refuse, in one line and before anything is allocated, a number of requests that no run
    may hold (:data:`~schedlab.contracts.MAX_REQUESTS`) or that this machine's memory cannot;
    ``what`` (None: nothing) says whose requests they are."""
    where = f"{what}: " if what else ""
    if not n_requests <= MAX_REQUESTS:  # NaN and inf too
        raise SchedlabError(f"{where}{n_requests:.3g} requests, more than the {MAX_REQUESTS:.0e} a run may hold")
    free = available_memory()
    need = n_requests * BYTES_PER_REQUEST
    if free is not None and need > free:
        raise SchedlabError(f"{where}{n_requests:,.0f} requests need about {need / 2**30:.1f} GiB of memory, "
                            f"more than the {free / 2**30:.1f} GiB available")


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
