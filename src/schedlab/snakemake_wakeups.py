"""Snakemake's scheduler kept from waking itself many times a second.

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
"""

from __future__ import annotations

import threading


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

    JobScheduler._schedule_reevalutation = schedule_reevaluation
    JobScheduler._one_pending_wakeup = True
    return True
