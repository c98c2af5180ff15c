"""Highest response ratio next: ``R = (wait + size) / size``, evaluated at each pop.

``R - 1 = wait / size``, so the order is the same whatever unit ``size`` is expressed in
(tokens, or seconds of service via any constant per-token time): the unit choice the paper
leaves open does not change HRRN's decisions. We keep ``size`` in tokens (n_hat) and
``wait`` in seconds.
"""

from __future__ import annotations

from schedlab.policies.base import Job
from schedlab.policies.keyed import KeyedPolicy
from schedlab.registry import ASR, LLM, QUEUE, register


def response_ratio(wait_s, size):
    return (wait_s + size) / size


@register("hrrn", kind=QUEUE, modalities=(ASR, LLM), paper="A", summary='highest response ratio next: (wait + size) / size')
class HRRN(KeyedPolicy):
    """The highest ratio first, computed over every waiting job at once (numpy); ties go to
    the earliest arrival, then lowest id. Victim: the running job with the lowest current
    ratio (ties: the newest)."""

    name = "hrrn"
    dynamic = vectorised = True

    def key(self, job: Job, now: float):
        return -response_ratio(now - job.arrival_s, job.size)
