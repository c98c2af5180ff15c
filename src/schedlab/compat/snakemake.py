"""schedlab's shims over Snakemake's internals (see :data:`schedlab.compat.WORKAROUNDS`).

**One pending wake-up.** Snakemake's scheduler kept from waking itself many times a second.

With its job rate limiter on (Snakemake's default, ``--max-jobs-per-timespan 100/1s``), every
scheduling pass that leaves a ready job waiting for cores starts a ``threading.Timer`` that
wakes the scheduler again one timespan later, and every job that ends wakes it too (snakemake
issue 3744). The wake-ups chain: each timer's pass starts the next timer, so once N jobs have
ended while others waited, N timers are alive and the scheduler passes N times a second (each
pass re-evaluates every ready job's params). Measured in a fresh ``make reproduce`` on two
cores: 98 timers alive, about 60 new threads a second and 3% of a core in the Snakemake
process while the first served engine, whose timing is the measurement, had the machine.

:func:`one_pending_wakeup` makes a pass start a timer only when none is pending: the scheduler
still looks again within the limiter's timespan, once.

**A killed run's lock released.** A run killed hard (SIGKILL, power loss) leaves Snakemake's
lock (``.snakemake/locks``) behind, and the next run refuses to start until ``snakemake
--unlock``. When no other Snakemake process has this working folder as its own (Linux
``/proc``: the command line and the working folder of every process), the lock is a dead run's,
and :func:`release_stale_lock` releases it, so the plain command resumes; while another
Snakemake runs here, the lock stays and Snakemake refuses as before.

**Job records read.** :func:`job_records`: what Snakemake keeps under ``.snakemake/metadata``
about the job that wrote each output file.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import sys
import threading
from pathlib import Path


def one_pending_wakeup() -> bool:
    """Patch Snakemake's job scheduler (in this process) to keep at most one pending wake-up
    timer per scheduler; True when the scheduler is patched (now or before), False when this
    Snakemake has no such method to patch."""
    try:
        from snakemake.scheduling.job_scheduler import JobScheduler
    except ImportError:
        return False
    if getattr(JobScheduler, "_one_pending_wakeup", False):
        return True
    if not hasattr(JobScheduler, "_schedule_reevalutation"):  # (Snakemake's spelling)
        return False
    lock = threading.Lock()

    def schedule_reevaluation(self, delay) -> None:
        with lock:
            if getattr(self, "_pending_wakeup", None) is not None:
                return

            def wake() -> None:
                with lock:
                    self._pending_wakeup = None
                self._open_jobs.release()

            self._pending_wakeup = timer = threading.Timer(delay, wake)
            timer.daemon = True
        timer.start()

    schedule_reevaluation.__wrapped__ = JobScheduler._schedule_reevalutation  # Snakemake's own (the canary's)
    JobScheduler._schedule_reevalutation = schedule_reevaluation
    JobScheduler._one_pending_wakeup = True
    return True


# -- the lock of a run that was killed --------------------------------------------------------
def _ancestry(pid: int | None = None) -> list[int]:
    """Process ``pid`` (default: this one) and the processes it descends from, nearest first
    (Linux ``/proc``; empty elsewhere)."""
    pids, pid = [], os.getpid() if pid is None else pid
    while pid > 1 and pid not in pids:
        pids.append(pid)
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            break
    return pids


def _ancestors() -> set[int]:
    """This process and the processes it descends from (``make``, a shell)."""
    return set(_ancestry())


def pipeline_process() -> int | None:
    """The Snakemake process this process runs under (its nearest ancestor that runs Snakemake:
    the run's main process, or on a cluster the job's own), or None outside a pipeline."""
    for pid in _ancestry()[1:]:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if _is_snakemake(argv):
            return pid
    return None


def _is_snakemake(argv: list[bytes]) -> bool:
    """Whether a command line runs Snakemake (``snakemake ...``, ``python .../snakemake ...``,
    ``python -m snakemake ...``)."""
    head = [os.path.basename(a) for a in argv[:2]]
    return b"snakemake" in head or any(a == b"-m" and b == b"snakemake" for a, b in zip(argv, argv[1:]))


def snakemakes_here(folder: str | os.PathLike = ".") -> list[int] | None:
    """Ids of the other Snakemake processes whose working folder is ``folder`` (one whose
    folder cannot be read, another user's, counts too); None where there is no ``/proc``."""
    proc = Path("/proc")
    if not (proc / "self" / "cmdline").exists():
        return None
    here, mine, found = os.path.realpath(folder), _ancestors(), []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) in mine:
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if not _is_snakemake(argv):
            continue
        try:
            cwd = os.readlink(entry / "cwd")
        except PermissionError:
            found.append(int(entry.name))
            continue
        except OSError:  # it has just ended
            continue
        if os.path.realpath(cwd) == here:
            found.append(int(entry.name))
    return found


def _lifelines_here(folder: str | os.PathLike = ".") -> list[int]:
    """Ids of the served engines' lifelines (:mod:`schedlab.backends.served.lifeline`) working in
    ``folder``: the servers of a run still stopping after it was killed."""
    here, found = os.path.realpath(folder), []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if b"schedlab.backends.served.lifeline" not in argv[:3] or os.path.realpath(os.readlink(entry / "cwd")) != here:
                continue
        except OSError:
            continue
        found.append(int(entry.name))
    return found


def one_line_when_held(folder: str | os.PathLike = ".") -> bool:
    """Make Snakemake's refusal to lock ``folder`` while another run works on the same files
    one line naming that run (``schedlab: error: ...``, exit status 2), instead of its
    ``LockException``, whose advice (``--unlock``) is wrong while that run lives; True when
    Snakemake is patched (now or before), False when it has no such method."""
    try:
        from snakemake.persistence import PersistenceBase as Persistence
    except ImportError:
        return False
    original = getattr(Persistence, "lock", None)
    if original is None or not hasattr(Persistence, "locked"):
        return False
    if getattr(original, "schedlab_one_line", False):
        return True

    def lock(self):
        if self.locked:
            others = snakemakes_here(folder) or []
            who = f" (process {', '.join(map(str, others))})" if others else ""
            print(f"schedlab: error: this folder cannot be locked: another Snakemake run{who} works on some of the "
                  "same files here; wait for it to end, or stop it (unlocking is for a run that was killed, not one "
                  "that runs)", file=sys.stderr, flush=True)
            raise SystemExit(2)
        return original(self)

    lock.schedlab_one_line = True
    lock.__wrapped__ = original
    Persistence.lock = lock
    return True


def release_stale_lock(workflow=None, folder: str | os.PathLike = ".") -> bool:
    """Remove Snakemake's lock in ``folder`` when it is a dead run's (see the module
    docstring); True when it was released. Only the main Snakemake process does this (not a
    job's own Snakemake on a cluster), and only with the file-based lock. While another run
    holds the lock, Snakemake's refusal is one line (:func:`one_line_when_held`); while the
    servers of a killed run are still stopping, this run ends in one line before any job
    (it would start a second server beside one of theirs)."""
    if workflow is not None:
        if not getattr(workflow, "is_main_process", True):
            return False
        settings = getattr(workflow, "workflow_settings", None)
        backend = getattr(getattr(settings, "persistence_backend", None), "name", "FILE")
        if backend != "FILE":
            return False
        one_line_when_held(folder)
    locks = Path(folder) / ".snakemake" / "locks"
    try:
        if not any(locks.iterdir()):
            return False
    except OSError:  # no lock
        return False
    others = snakemakes_here(folder)
    if others is None or others:
        return False
    lifelines = _lifelines_here(folder)
    if lifelines:
        print(f"schedlab: error: the servers of a run that was killed are still stopping here (lifeline process "
              f"{', '.join(map(str, lifelines))}); run again when they have ended, in seconds", file=sys.stderr)
        raise SystemExit(2)
    shutil.rmtree(locks, ignore_errors=True)
    print("Released the lock of a Snakemake run that is no longer running (no other Snakemake works in this "
          "folder); jobs it left incomplete run again.", file=sys.stderr)
    return True


# -- job records ----------------------------------------------------------------------------
def job_records(workdir: str | os.PathLike = ".") -> list[tuple[str, dict]]:
    """``(output path, record)`` for every record Snakemake keeps under ``.snakemake/metadata``
    (one per output file, named by its base64-encoded path; a record holds the job's ``rule``,
    ``job_hash``, ``starttime`` and ``endtime``); unreadable ones left out."""
    folder = Path(workdir) / ".snakemake" / "metadata"
    found = []
    for root, _, files in os.walk(folder):
        for f in files:
            encoded = os.path.relpath(os.path.join(root, f), folder).replace(os.sep, "")
            try:
                path = base64.urlsafe_b64decode(encoded).decode()
                record = json.loads(Path(root, f).read_text())
            except (ValueError, OSError):
                continue
            found.append((path, record))
    return found
