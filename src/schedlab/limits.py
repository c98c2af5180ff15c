"""What a command may take, checked before it starts on it: the memory of a large allocation,
and the requests a search or a study simulates.

**Memory** (:func:`check_allocation`): a large allocation's size is computed before it is made,
and refused above :data:`DEFAULT_SHARE` of the memory this machine has available
(``MemAvailable``), or the share ``SCHEDLAB_MEMORY_SHARE`` gives (a number in (0, 1]). A run's
requests are held to it before any is made (:func:`check_fits_in_memory`).

**Work** (:func:`check_work`): a search (a root finder's or a capacity search's runs) or a study
of many runs is refused when the requests it would simulate in all pass
:data:`~schedlab.contracts.MAX_SIMULATED_REQUESTS`, where a request counts once on each replica
of a cluster whose router reads every replica's state as it arrives.

A refusal is one line naming what needed the memory or the runs, the input that sized it, and
the limit.
"""

from __future__ import annotations

import os

from schedlab.contracts import MAX_REQUESTS, MAX_SIMULATED_REQUESTS
from schedlab.errors import SchedlabError

#: The share of the available memory one allocation may take, unless overridden.
DEFAULT_SHARE = 0.8
#: The variable that overrides :data:`DEFAULT_SHARE`.
SHARE_VARIABLE = "SCHEDLAB_MEMORY_SHARE"


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


def memory_share() -> float:
    """The share of the available memory an allocation may take (:data:`SHARE_VARIABLE`)."""
    text = os.environ.get(SHARE_VARIABLE)
    if text is None:
        return DEFAULT_SHARE
    try:
        share = float(text)
    except ValueError:
        share = float("nan")
    if not 0 < share <= 1:
        raise SchedlabError(f"{SHARE_VARIABLE} must be a number in (0, 1], got {text!r}")
    return share


def check_allocation(nbytes: float, what: str) -> None:
    """Refuse, before it is made, an allocation of ``nbytes`` for ``what`` (which says whose
    memory it is and which input sized it) above the limit (see the module docstring)."""
    free = available_memory()
    if free is None:
        return
    share = memory_share()
    if not nbytes <= share * free:  # NaN too
        raise SchedlabError(f"{what}: about {nbytes / 2**30:,.1f} GiB of memory needed, more than the "
                            f"{share * free / 2**30:,.1f} GiB allowed ({share:.0%} of the {free / 2**30:,.1f} GiB "
                            f"available; {SHARE_VARIABLE} sets the share)")


#: Memory one request takes through a run (its trace row, the engine's state, its results),
#: rounded up from `schedlab simulate`'s 0.6 KiB a request (peak RSS at 20,000 and 200,000
#: requests).
BYTES_PER_REQUEST = 1024


def check_fits_in_memory(n_requests: float, what: str | None = "the trace") -> None:
    """Refuse, in one line and before anything is allocated, a number of requests that no run
    may hold (:data:`~schedlab.contracts.MAX_REQUESTS`) or that this machine's memory cannot
    (:func:`check_allocation`); ``what`` (None: nothing) says whose requests they are."""
    where = f"{what}: " if what else ""
    if not n_requests <= MAX_REQUESTS:  # NaN and inf too
        raise SchedlabError(f"{where}{n_requests:.3g} requests, more than the {MAX_REQUESTS:.0e} a run may hold")
    check_allocation(n_requests * BYTES_PER_REQUEST, f"{where}{n_requests:,.0f} requests")


#: The runs a root finder takes to its tolerance, for a search's estimate (Brent's method takes 8
#: on the shipped EWSJF calibration; a harder bracket, more).
SEARCH_RUNS = 20


def check_work(requests: float, what: str) -> None:
    """Refuse, before its first run, a search or a study that would simulate ``requests`` in all
    (see the module docstring); ``what`` says which runs and which inputs sized them."""
    if not requests <= MAX_SIMULATED_REQUESTS:  # NaN too
        raise SchedlabError(f"{what} would simulate about {requests:.3g} requests, past the "
                            f"{MAX_SIMULATED_REQUESTS:.0e} one command may (hours of runs): take fewer or smaller runs")
