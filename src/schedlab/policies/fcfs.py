"""First come, first served: the engine's default order."""

from __future__ import annotations

from schedlab.policies.base import Job
from schedlab.policies.keyed import KeyedPolicy
from schedlab.registry import ASR, LLM, QUEUE, register


@register("fcfs", kind=QUEUE, modalities=(ASR, LLM), paper="A", summary='first come, first served')
class FCFS(KeyedPolicy):
    """Admit by arrival (a preempted job, older than those that came after it, goes before
    them, as in vLLM); the victim is the engine's, the newest admitted."""

    name = "fcfs"
    victims_by_key = False

    def key(self, job: Job, now: float | None) -> float:
        return job.arrival_s
