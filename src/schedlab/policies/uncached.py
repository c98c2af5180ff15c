"""Shortest job first by the work an admission would do now: the prompt tokens its prefix cache
does not hold.

On an engine with vLLM's prefix cache (:mod:`schedlab.engine.prefix`), a request whose prompt
opens with a cached prefix (a shared system prompt, a document asked before, a conversation's
earlier turns) computes only the rest: its prefill costs the uncached tokens, not the prompt's
length. This policy orders the waiting requests by that (:meth:`Job.work
<schedlab.policies.base.Job.work>`), asked afresh at every decision, since the cache changes
every step; ties go to the earlier arrival. Without a cache it is SJF by prompt length.
"""

from __future__ import annotations

from schedlab.policies.base import Job
from schedlab.policies.keyed import KeyedPolicy
from schedlab.registry import LLM, QUEUE, register


@register("sjf-uncached", kind=QUEUE, modalities=(LLM,),
          summary="shortest job first by the prompt tokens the prefix cache does not hold (the work left)")
class SJFUncached(KeyedPolicy):
    """Every waiting job's lookup at each decision (O(n)): the order moves with the cache.
    Victim: the engine's rule (the newest admitted)."""

    name = "sjf-uncached"
    reads_cache = True
    dynamic = True
    victims_by_key = False

    def key(self, job: Job, now: float) -> int:
        return job.work()
