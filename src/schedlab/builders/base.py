"""The batch builders' shared plumbing and the waiting queues they order new requests by.

A builder is a :class:`~schedlab.engine.scheduler.Scheduler`: each step it composes a plan of
decodes (one token each for running requests whose prompt is done) and prefill chunks (a
request's next uncomputed tokens), admitting new requests from its waiting queue; the engine
carries the plan out. Preempted requests wait again at the front of the queue.
"""

from __future__ import annotations

import heapq

from schedlab.engine.plan import Planner
from schedlab.engine.scheduler import Scheduler
from schedlab.errors import SchedlabError

ORDERS = ("fcfs", "spf")
#: The token budget of builders whose steps take whole prompts.
UNBOUNDED = 1 << 62


class WaitingQueue:
    """Waiting requests in FCFS (arrival; preempted ones first) or SPF (fewest tokens to
    prefill, then arrival) order; ``paying_first`` puts one class strictly ahead."""

    def __init__(self, order: str = "fcfs", paying_first: str | None = None) -> None:
        if order not in ORDERS:
            raise SchedlabError(f"unknown prefill order {order!r}; choose {' or '.join(ORDERS)}")
        self.order, self.paying_first = order, paying_first
        self._heap: list[tuple] = []
        self._requeued = 0
        self._dropped: set[int] = set()

    def bind(self, engine) -> None:
        self.engine = engine

    def _key(self, i: int, front: bool) -> tuple:
        e = self.engine
        rank = int(self.paying_first is not None and e.slo_class[i] != self.paying_first)
        if self.order == "spf":
            first = int(e.seq[i])  # a waiting request prefills its whole sequence
        else:
            self._requeued -= front
            first = self._requeued if front else i
        return (rank, first, i)

    def push(self, i: int, front: bool = False) -> None:
        heapq.heappush(self._heap, (*self._key(i, front), i))

    def drop(self, i: int) -> None:
        """Forget waiting request ``i`` (an aborted request)."""
        self._dropped.add(i)

    def _clean(self) -> None:
        while self._heap and self._heap[0][-1] in self._dropped:
            self._dropped.discard(heapq.heappop(self._heap)[-1])

    def peek(self) -> int:
        self._clean()
        return self._heap[0][-1]

    def pop(self) -> int:
        self._clean()
        return heapq.heappop(self._heap)[-1]

    def __len__(self) -> int:
        return len(self._heap) - len(self._dropped)


class Builder(Scheduler):
    """One waiting queue: arrivals pushed, preempted requests pushed in front."""

    name = "builder"

    def __init__(self, order: str = "fcfs", paying_first: str | None = None) -> None:
        self.queue = WaitingQueue(order, paying_first)

    def bind(self, engine) -> None:
        super().bind(engine)
        self.queue.bind(engine)

    def arrive(self, i: int) -> None:
        self.queue.push(i)

    def requeue(self, i: int) -> None:
        self.queue.push(i, front=True)

    def n_waiting(self) -> int:
        return len(self.queue)

    def drop(self, i: int) -> None:
        """Forget waiting request ``i`` (an aborted request)."""
        self.queue.drop(i)

    # -- helpers --------------------------------------------------------------------------
    def admit_fitting(self, plan: Planner, max_running: int, max_chunk: int | None = None) -> None:
        """Admit waiting requests in queue order while the token budget, the running cap and
        the KV cache allow, each with a first chunk of at most ``max_chunk`` (default: the
        budget left)."""
        q, seq = self.queue, self.engine.seq
        while plan.budget > 0 and len(q) and plan.n_running < max_running and plan.can_admit(q.peek()):
            i = q.pop()
            plan.admit(i, min(int(seq[i]), plan.budget, max_chunk or plan.budget))

    def continue_prefills(self, plan: Planner) -> None:
        """Next chunks of started prefills, in admission order, within the budget."""
        e = self.engine
        for i in e.prefilling():
            if plan.budget <= 0:
                break
            plan.take(i, min(e.need(i), plan.budget))
