"""Highest response ratio next: ``R = (wait + size) / size``, evaluated at each pop.

``R - 1 = wait / size``, so the order is the same whatever unit ``size`` is expressed in
(tokens, or seconds of service via any constant per-token time): the unit choice the paper
leaves open does not change HRRN's decisions. We keep ``size`` in tokens (n_hat) and
``wait`` in seconds.
"""

from __future__ import annotations

from schedlab.policies.base import Job, Policy
from schedlab.policies.waiting import WaitingArrays


def response_ratio(wait_s, size):
    return (wait_s + size) / size


class HRRN(Policy):
    """O(n) argmax over numpy arrays; ties go to the earliest arrival, then lowest id.

    Victim: the running job with the lowest current ratio (ties: the newest).
    """

    name = "hrrn"

    def __init__(self, capacity: int = 1024) -> None:
        self._waiting = WaitingArrays(capacity)

    def push(self, job: Job) -> None:
        self._waiting.push(job)

    def _best(self, now: float) -> int:
        w = self._waiting
        return w.best(-response_ratio(now - w.arrival, w.size))

    def peek(self, now: float) -> Job:
        return self._waiting.jobs[self._best(now)]

    def pop(self, now: float) -> Job:
        return self._waiting.take(self._best(now))

    def remove(self, job: Job) -> None:
        self._waiting.discard(job)

    def __iter__(self):
        return iter(self._waiting)

    def __len__(self) -> int:
        return len(self._waiting)

    def victim_key(self, job: Job, now: float) -> tuple:
        return (-response_ratio(now - job.arrival_s, job.size), job.arrival_s, job.request_id)
