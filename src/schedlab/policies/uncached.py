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

from schedlab.policies.base import Job, Policy
from schedlab.registry import LLM, QUEUE, register


@register("sjf-uncached", kind=QUEUE, modalities=(LLM,),
          summary="shortest job first by the prompt tokens the prefix cache does not hold (the work left)")
class SJFUncached(Policy):
    """A waiting list scanned at each decision (O(n) lookups): the order moves with the cache.
    ``peek`` and ``pop`` at the same ``now`` agree (nothing changes the cache between them).
    Victim: the engine's rule (the newest admitted)."""

    name = "sjf-uncached"
    reads_cache = True

    def __init__(self) -> None:
        self._jobs: list[Job] = []
        self._best: Job | None = None

    def push(self, job: Job) -> None:
        self._jobs.append(job)
        self._best = None

    def _choose(self) -> Job:
        return min(self._jobs, key=lambda j: (j.work(), j.arrival_s, j.request_id))

    def peek(self, now: float) -> Job:
        self._best = self._choose()
        return self._best

    def pop(self, now: float) -> Job:
        job = self._best if self._best is not None else self._choose()
        self._best = None
        self._jobs.remove(job)
        return job

    def remove(self, job: Job) -> None:
        self._jobs = [j for j in self._jobs if j is not job]
        self._best = None

    def __iter__(self):
        return iter(list(self._jobs))

    def __len__(self) -> int:
        return len(self._jobs)
