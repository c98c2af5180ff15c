"""FastServe's skip-join multi-level feedback queue, as a schedlab queue policy in a package of
its own.

Level ``k`` (0 first) has a quantum of ``quantum * ratio**k`` output tokens. A request joins the
first level whose quantum covers its first iteration, its prefill, counted as
``prompt_tokens / prefill_tokens_per_token`` tokens of decoding (skip-join: a long prompt starts
lower). It is demoted a level each time its attained service (output tokens generated) uses up
the quantum of the level it is in, down to the last level. The waiting request of the highest
level is admitted first (ties: the earlier arrival), and at every step boundary a waiting
request takes the place of a running one at a lower level, as FastServe's iteration-level
scheduler does (the preempted request's KV is recomputed when it runs again).
"""

from __future__ import annotations

from schedlab.policies import Job, KeyedPolicy
from schedlab.registry import ASR, LLM, QUEUE, register


@register("mlfq", kind=QUEUE, modalities=(ASR, LLM),
          summary="FastServe's skip-join MLFQ: the first level by prompt length, demoted as output is generated")
class SkipJoinMLFQ(KeyedPolicy):
    name = "mlfq"
    preemptive = True

    def __init__(self, levels: int = 4, quantum: int = 16, ratio: int = 2, prefill_tokens_per_token: int = 64) -> None:
        super().__init__()
        self.quanta = [quantum * ratio**k for k in range(levels)]
        self.prefill_tokens_per_token = prefill_tokens_per_token

    def joined(self, job: Job) -> int:
        """The level a request joins: the first whose quantum covers its prefill."""
        first = job.prompt_tokens / self.prefill_tokens_per_token
        return next((k for k, q in enumerate(self.quanta) if q >= first), len(self.quanta) - 1)

    def level(self, job: Job) -> int:
        """The level its attained service has brought it to."""
        k, left = self.joined(job), job.generated_tokens
        while k < len(self.quanta) - 1 and left >= self.quanta[k]:
            left -= self.quanta[k]
            k += 1
        return k

    def key(self, job: Job, now: float | None) -> int:
        return self.level(job)
