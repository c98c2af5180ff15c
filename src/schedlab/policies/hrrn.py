"""Highest response ratio next: ``R = (wait + size) / size``, evaluated at each pop.

``R - 1 = wait / size``, so the order is the same whatever unit ``size`` is expressed in
(tokens, or seconds of service via any constant per-token time): the unit choice the paper
leaves open does not change HRRN's decisions. We keep ``size`` in tokens (n_hat) and
``wait`` in seconds.
"""

from __future__ import annotations

import numpy as np

from schedlab.policies.base import Job, Policy


def response_ratio(wait_s, size):
    return (wait_s + size) / size


class HRRN(Policy):
    """O(n) argmax over numpy arrays; ties go to the earliest arrival, then lowest id.

    Victim: the running job with the lowest current ratio (ties: the newest).
    """

    name = "hrrn"

    def __init__(self, capacity: int = 1024) -> None:
        self._arrival = np.empty(capacity)
        self._size = np.empty(capacity)
        self._rid = np.empty(capacity, dtype=np.int64)
        self._jobs: list[Job] = []

    def push(self, job: Job) -> None:
        n = len(self._jobs)
        if n == len(self._arrival):
            for name in ("_arrival", "_size", "_rid"):
                old = getattr(self, name)
                grown = np.empty(2 * n, dtype=old.dtype)
                grown[:n] = old
                setattr(self, name, grown)
        self._arrival[n] = job.arrival_s
        self._size[n] = job.size
        self._rid[n] = job.request_id
        self._jobs.append(job)

    def _best(self, now: float) -> int:
        n = len(self._jobs)
        arrival, size = self._arrival[:n], self._size[:n]
        ratio = response_ratio(now - arrival, size)
        ties = np.flatnonzero(ratio == ratio.max())
        if len(ties) == 1:
            return int(ties[0])
        order = np.lexsort((self._rid[ties], arrival[ties]))
        return int(ties[order[0]])

    def peek(self, now: float) -> Job:
        return self._jobs[self._best(now)]

    def pop(self, now: float) -> Job:
        return self._take(self._best(now))

    def remove(self, job: Job) -> None:
        self._take(next(i for i, j in enumerate(self._jobs) if j is job))

    def _take(self, i: int) -> Job:
        """Remove the job at slot ``i`` (the last slot fills the gap)."""
        last = len(self._jobs) - 1
        job = self._jobs[i]
        self._arrival[i] = self._arrival[last]
        self._size[i] = self._size[last]
        self._rid[i] = self._rid[last]
        self._jobs[i] = self._jobs[last]
        self._jobs.pop()
        return job

    def __iter__(self):
        return iter(list(self._jobs))

    def __len__(self) -> int:
        return len(self._jobs)

    def victim_key(self, job: Job, now: float) -> tuple:
        return (-response_ratio(now - job.arrival_s, job.size), job.arrival_s, job.request_id)
