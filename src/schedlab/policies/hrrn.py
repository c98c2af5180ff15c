"""Highest response ratio next: ``R = (wait + size) / size``, evaluated at each pop.

``R - 1 = wait / size``, so the order is the same whatever unit ``size`` is expressed in
(tokens, or seconds of service via any constant per-token time): the unit choice the paper
leaves open does not change HRRN's decisions. We keep ``size`` in tokens (n_hat) and
``wait`` in seconds.
"""

from __future__ import annotations

from schedlab.policies.base import Job
from schedlab.policies.waiting import ArgminPolicy
from schedlab.registry import ASR, LLM, QUEUE, register


def response_ratio(wait_s, size):
    return (wait_s + size) / size


@register("hrrn", kind=QUEUE, modalities=(ASR, LLM), paper="A", summary='highest response ratio next: (wait + size) / size')
class HRRN(ArgminPolicy):
    """O(n) argmax over numpy arrays; ties go to the earliest arrival, then lowest id.

    Victim: the running job with the lowest current ratio (ties: the newest).
    """

    name = "hrrn"

    def _best(self, now: float) -> int:
        w = self._waiting
        return w.best(-response_ratio(now - w.arrival, w.size))

    def victim_key(self, job: Job, now: float) -> tuple:
        return (-response_ratio(now - job.arrival_s, job.size), job.arrival_s, job.request_id)
