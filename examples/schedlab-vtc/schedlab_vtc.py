"""Virtual token counter fairness (VTC, Sheng et al., OSDI 2024), as a schedlab queue policy in a
package of its own.

Each tenant (the trace's ``tenant`` column; ``vllm_xargs`` ``tenant`` on a server) has a
counter of the service it has received: ``prompt_weight`` per prompt token when one of its
requests is admitted, ``output_weight`` per output token generated. The earliest waiting
request of the tenant with the smallest counter is admitted first. A request that arrives for
a tenant with nothing waiting lifts its counter to the smallest counter among the tenants that
have requests waiting (or, with none waiting, to the counter of the last tenant whose waiting
requests were all admitted), so a tenant cannot bank credit while it sends nothing. Under
memory pressure the engine's own victim is preempted (the newest admitted).
"""

from __future__ import annotations

from collections import Counter, defaultdict

from schedlab.policies import Job, KeyedPolicy
from schedlab.registry import LLM, QUEUE, register


@register("vtc", kind=QUEUE, modalities=(LLM,),
          summary="virtual token counters: the tenant served least so far goes first")
class VTC(KeyedPolicy):
    name = "vtc"
    dynamic = True
    victims_by_key = False

    def __init__(self, prompt_weight: float = 1.0, output_weight: float = 2.0) -> None:
        super().__init__()
        self.prompt_weight, self.output_weight = prompt_weight, output_weight
        self.counters: defaultdict[str, float] = defaultdict(float)
        self._waiting_of: Counter[str] = Counter()
        self._running: dict[int, list] = {}  # id(job) -> [job, output tokens counted]
        self._seen: set[int] = set()
        self._last_left = 0.0
        self._counted_at: float | None = None

    def _count_output(self) -> None:
        """Add the output tokens generated since the last count to their tenants' counters."""
        for key, entry in list(self._running.items()):
            job, counted = entry
            generated = job.generated_tokens
            self.counters[job.tenant] += self.output_weight * (generated - counted)
            entry[1] = generated
            if job.finished:
                del self._running[key]

    def push(self, job: Job) -> None:
        tenant, arrives = job.tenant, job.request_id not in self._seen  # (else: preempted, back again)
        self._seen.add(job.request_id)
        if arrives and not self._waiting_of[tenant]:
            self._count_output()
            backlogged = [self.counters[t] for t, n in self._waiting_of.items() if n]
            self.counters[tenant] = max(self.counters[tenant], min(backlogged) if backlogged else self._last_left)
        self._waiting_of[tenant] += 1
        super().push(job)

    def pop(self, now: float) -> Job:
        job = super().pop(now)
        tenant = job.tenant
        self._waiting_of[tenant] -= 1
        self.counters[tenant] += self.prompt_weight * job.prompt_tokens
        self._running.setdefault(id(job), [job, job.generated_tokens])
        if not self._waiting_of[tenant]:
            self._last_left = self.counters[tenant]
        return job

    def remove(self, job: Job) -> None:
        super().remove(job)
        self._waiting_of[job.tenant] -= 1

    def key(self, job: Job, now: float) -> float:
        if now != self._counted_at:  # no token is generated between two decisions at one time
            self._count_output()
            self._counted_at = now
        return self.counters[job.tenant]
