"""The batch-builder interface and the waiting queues builders order new requests by.

A builder is bound to an engine (:class:`schedlab.batching.engine.BatchEngine`), receives
arrivals (``arrive``) and preempted requests (``requeue``), and each iteration returns
``(decodes, chunks)``: an index array of decode-phase requests and a list of
``(request, tokens)`` prefill chunks, admitting new requests through ``engine.admit``.
``steady`` tells the engine when the next batches are fixed (every decode-phase request
decodes, nothing else), so it may run them in closed form.
"""

from __future__ import annotations

import heapq

import numpy as np

from schedlab.batching.engine import NOT_STEADY
from schedlab.errors import SchedlabError

ORDERS = ("fcfs", "spf")


class WaitingQueue:
    """Waiting requests in FCFS (arrival; preempted ones first) or SPF (fewest tokens to
    prefill, then arrival) order; ``paying_first`` puts one class strictly ahead."""

    def __init__(self, order: str = "fcfs", paying_first: str | None = None) -> None:
        if order not in ORDERS:
            raise SchedlabError(f"unknown prefill order {order!r}; choose {' or '.join(ORDERS)}")
        self.order, self.paying_first = order, paying_first
        self._heap: list[tuple] = []
        self._requeued = 0

    def bind(self, engine) -> None:
        self.engine = engine
        classes = engine.trace["slo_class"].astype(str).to_numpy() if "slo_class" in engine.trace else None
        self._rank = (np.zeros(len(engine.arrival), np.int64) if self.paying_first is None or classes is None
                      else (classes != self.paying_first).astype(np.int64))

    def _key(self, i: int, front: bool) -> tuple:
        if self.order == "spf":
            first = self.engine.need(i)
        else:
            self._requeued -= front
            first = self._requeued if front else i
        return (int(self._rank[i]), first, i)

    def push(self, i: int, front: bool = False) -> None:
        heapq.heappush(self._heap, (*self._key(i, front), i))

    def peek(self) -> int:
        return self._heap[0][-1]

    def pop(self) -> int:
        return heapq.heappop(self._heap)[-1]

    def __len__(self) -> int:
        return len(self._heap)


class Builder:
    """Shared plumbing: one waiting queue, arrivals pushed, preempted requests pushed in front."""

    name = "builder"

    def __init__(self, order: str = "fcfs", paying_first: str | None = None) -> None:
        self.queue = WaitingQueue(order, paying_first)

    def bind(self, engine) -> None:
        self.engine = engine
        self.queue.bind(engine)

    def arrive(self, i: int) -> None:
        self.queue.push(i)

    def requeue(self, i: int) -> None:
        self.queue.push(i, front=True)

    def n_waiting(self) -> int:
        return len(self.queue)

    def steady(self) -> int:
        return NOT_STEADY

    def build(self, now: float):
        raise NotImplementedError

    # -- helpers --------------------------------------------------------------------------
    def admit_fitting(self, budget: int, max_active: int, chunks: list, max_chunk: int | None = None) -> int:
        """Admit waiting requests in queue order while the token budget, the active cap and
        the KV cache allow, each with a first chunk of at most ``max_chunk`` (default: the
        budget left); returns the budget left."""
        eng, q = self.engine, self.queue
        while budget > 0 and len(q) and eng.n_active < max_active and eng.fits(q.peek()):
            i = q.pop()
            eng.admit(i)
            c = min(eng.need(i), budget, max_chunk or budget)
            chunks.append((i, c))
            budget -= c
        return budget

    def continue_prefills(self, budget: int, chunks: list) -> int:
        """Next chunks of started prefills, in admission order, within ``budget``."""
        eng = self.engine
        for i in eng.prefilling:
            if budget <= 0:
                break
            c = min(eng.need(i), budget)
            chunks.append((i, c))
            budget -= c
        return budget
