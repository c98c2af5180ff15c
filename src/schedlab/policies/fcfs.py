"""First come, first served: the engine's default order."""

from __future__ import annotations

from collections import deque

from schedlab.policies.base import Job, Policy
from schedlab.registry import ASR, LLM, QUEUE, register


@register("fcfs", kind=QUEUE, modalities=(ASR, LLM), paper="A", summary='first come, first served')
class FCFS(Policy):
    """Admit by arrival; a preempted job re-enters at the front, as in vLLM."""

    name = "fcfs"

    def __init__(self) -> None:
        self._q: deque[Job] = deque()

    def push(self, job: Job) -> None:
        # Arrivals come in arrival order; a re-queued (preempted) job is older than every
        # waiting one, so it goes to the front. Anything else is inserted in order.
        q = self._q
        key = (job.arrival_s, job.request_id)
        if not q or key >= (q[-1].arrival_s, q[-1].request_id):
            q.append(job)
        elif key <= (q[0].arrival_s, q[0].request_id):
            q.appendleft(job)
        else:
            i = next(i for i, j in enumerate(q) if key < (j.arrival_s, j.request_id))
            q.insert(i, job)

    def peek(self, now: float) -> Job:
        return self._q[0]

    def pop(self, now: float) -> Job:
        return self._q.popleft()

    def remove(self, job: Job) -> None:
        self._q.remove(job)

    def __iter__(self):
        return iter(self._q)

    def __len__(self) -> int:
        return len(self._q)
