"""What the host did while a served replay ran, read from Linux's ``/proc``: CPU time of a
process group and of the whole machine, the hypervisor's steal, a thread's wait for a core, its
major page faults, and the pressure stall figures. A replay that other processes interfered
with does not measure the engine (:mod:`schedlab.backends.served.quality`)."""

from __future__ import annotations

import os
import resource
from pathlib import Path


def process_group_cpu_s(pgid: int) -> float:
    """User + system CPU seconds of the live processes of group ``pgid`` (Linux ``/proc``)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:  # fields after the name: state ppid pgrp ...
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / tick


def _cpu_line() -> list[int]:
    return [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]


def machine_busy_cpu_s() -> float:
    """CPU seconds every core of the machine has spent busy since boot (``/proc/stat``)."""
    fields = _cpu_line()
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def machine_steal_s() -> float:
    """CPU seconds since boot that a hypervisor gave this machine's cores to others while they
    had work (``/proc/stat``'s steal): every process stalls then, the engine and client alike."""
    return _cpu_line()[7] / os.sysconf("SC_CLK_TCK")


def thread_waited_s() -> float:
    """Seconds the calling thread has spent ready to run but waiting for a core
    (``/proc/thread-self/schedstat``); NaN where the kernel does not keep it."""
    try:
        return int(Path("/proc/thread-self/schedstat").read_text().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return float("nan")


def major_faults() -> int:
    """Page faults of this process that had to read from disk, since it started."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_majflt


#: Linux's pressure stall information: the time, since boot, during which some task waited for
#: a core (``cpu``), for IO (``io``) or for memory (``memory``).
PRESSURE = ("cpu", "io", "memory")


def machine_stall_s() -> dict[str, float]:
    """Seconds since boot during which at least one task on the machine waited for a core, for
    IO and for memory (``/proc/pressure``, "some"; NaN where the kernel does not keep them)."""
    out = {}
    for kind in PRESSURE:
        try:
            some = Path(f"/proc/pressure/{kind}").read_text().split("\n", 1)[0]
            out[kind] = int(some.rsplit("total=", 1)[1]) / 1e6
        except (OSError, IndexError, ValueError):
            out[kind] = float("nan")
    return out
