"""Least attained service, as a schedlab queue policy in a package of its own.

A request's attained service is the output tokens it has generated. The waiting request that
has attained the least is admitted first (a new arrival has attained none), and at every step
boundary a waiting request takes the place of a running one that has attained more, as a
preemptive LAS server would. Service is counted in quanta of ``quantum`` tokens: two requests
within a quantum of each other do not take turns at every token (each turn is a preemption, and
the preempted request's KV is recomputed when it runs again).
"""

from __future__ import annotations

from schedlab.policies import Job, KeyedPolicy
from schedlab.registry import ASR, LLM, QUEUE, register


@register("las", kind=QUEUE, modalities=(ASR, LLM),
          summary="least attained service: the fewest tokens generated first, preempting at step boundaries")
class LAS(KeyedPolicy):
    name = "las"
    preemptive = True

    def __init__(self, quantum: int = 16) -> None:
        super().__init__()
        self.quantum = quantum

    def key(self, job: Job, now: float | None) -> int:
        return job.generated_tokens // self.quantum
