"""The dispatcher: route a request to the queue whose band holds its prompt length.

A length in the gap between queues ``Q_i`` and ``Q_{i+1}`` joins ``Q_i`` if
``L <= 1.10 * Q_i.hi``, else ``Q_{i+1}`` if ``L >= 0.90 * Q_{i+1}.lo``, else a temporary
*bubble* queue centred on ``L`` of width ``min(bubble_width, gap)``, clipped to the
neighbours' bounds (below the first or above the last queue, the missing neighbour is the
bound 0 or no bound). Queues that stay empty for more than ``idle_limit`` tactical decisions
are removed. Every waiting job is in exactly one queue.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_right
from collections import deque
from typing import Iterator

from schedlab.ewsjf.partition import Band
from schedlab.ewsjf.score import Weights
from schedlab.policies.base import Job

UP, DOWN = 1.10, 0.90


class Queue:
    """One band's FIFO (arrival order; a preempted job re-enters at its place)."""

    def __init__(self, lo: int, hi: float, mean: float, bubble: bool = False) -> None:
        self.lo, self.hi, self.mean, self.bubble = lo, hi, mean, bubble
        #: The FIFO itself (read directly by the tactical loop).
        self.fifo: deque[Job] = deque()
        self.idle = 0
        self.w = (1.0, 1.0, 1.0)

    def push(self, job: Job) -> None:
        # Arrivals come in arrival order; a re-queued (preempted) job is older than every
        # waiting one, so it goes to the front. Anything else is inserted in order.
        q = self.fifo
        key = (job.arrival_s, job.request_id)
        if not q or key >= (q[-1].arrival_s, q[-1].request_id):
            q.append(job)
        elif key <= (q[0].arrival_s, q[0].request_id):
            q.appendleft(job)
        else:
            i = next(i for i, j in enumerate(q) if key < (j.arrival_s, j.request_id))
            q.insert(i, job)

    def head(self) -> Job:
        return self.fifo[0]

    def pop(self, now: float) -> Job:
        return self.fifo.popleft()

    def remove(self, job: Job) -> None:
        self.fifo.remove(job)

    def __iter__(self) -> Iterator[Job]:
        return iter(self.fifo)

    def __len__(self) -> int:
        return len(self.fifo)


class Dispatcher:
    """Queues in length order, the routing rules, and idle-queue removal."""

    def __init__(self, bands: list[Band], weights: Weights, *, bubble_width: int = 64, idle_limit: int = 10_000) -> None:
        self.weights, self.bubble_width, self.idle_limit = weights, bubble_width, idle_limit
        self.queues: list[Queue] = []
        self.bubbles_made = 0
        #: The most queues any tactical decision saw.
        self.peak = 0
        self._where: dict[int, Queue] = {}
        self._set(bands)

    def _set(self, bands: list[Band]) -> None:
        self.queues = [Queue(b.lo, b.hi, b.mean) for b in bands]
        self._los = [q.lo for q in self.queues]
        self.reweigh(self.weights)

    def reweigh(self, weights: Weights) -> None:
        self.weights = weights
        for q in self.queues:
            q.w = weights.at(q.mean)

    # -- routing --------------------------------------------------------------------------
    def route(self, length: int) -> Queue:
        """The queue a prompt of ``length`` tokens joins (a new bubble queue if need be)."""
        i = bisect_right(self._los, length) - 1
        qs = self.queues
        if i >= 0 and length < qs[i].hi:
            return qs[i]
        left = qs[i] if i >= 0 else None
        right = qs[i + 1] if i + 1 < len(qs) else None
        if left is not None and length <= UP * left.hi:
            return left
        if right is not None and length >= DOWN * right.lo:
            return right
        lo_bound = 0 if left is None else left.hi  # (a Queue is falsy when empty: test for None)
        hi_bound = math.inf if right is None else right.lo
        return self._bubble(length, i + 1, lo_bound, hi_bound)

    def _bubble(self, length: int, pos: int, lo_bound: float, hi_bound: float) -> Queue:
        width = min(self.bubble_width, hi_bound - lo_bound)
        lo = length - width // 2
        lo = max(lo, lo_bound)
        hi = min(lo + width, hi_bound)
        lo = hi - width
        q = Queue(int(lo), hi, float(length), bubble=True)
        q.w = self.weights.at(q.mean)
        self.queues.insert(pos, q)
        self._los.insert(pos, q.lo)
        self.bubbles_made += 1
        return q

    def push(self, job: Job) -> Queue:
        q = self.route(job.prompt_tokens)
        q.push(job)
        self._where[id(job)] = q
        return q

    def taken(self, job: Job) -> None:
        """Forget a job that left its queue."""
        del self._where[id(job)]

    def remove(self, job: Job) -> None:
        self._where.pop(id(job)).remove(job)

    # -- strategic changes ----------------------------------------------------------------
    def rebuild(self, bands: list[Band]) -> None:
        """New bands; waiting jobs are re-routed in arrival order (each queue stays FIFO)."""
        old = [q.fifo for q in self.queues if q.fifo]
        self._set(bands)
        self._where.clear()
        for job in heapq.merge(*old, key=lambda j: (j.arrival_s, j.request_id)):
            self.push(job)

    def reshape(self, bands: list[Band]) -> None:
        """New bounds for the current queues, one band each in order (jobs stay where they are)."""
        for q, b in zip(self.queues, bands, strict=True):
            q.lo, q.hi, q.mean = b.lo, b.hi, b.mean
            q.w = self.weights.at(q.mean)
        self._los = [q.lo for q in self.queues]

    def drop_idle(self) -> None:
        """Count an idle decision for every empty queue; remove those past the limit."""
        self.peak = max(self.peak, len(self.queues))
        stale = False
        for q in self.queues:
            if q.fifo:
                q.idle = 0
            else:
                q.idle += 1
                stale = stale or q.idle > self.idle_limit
        if stale:
            self.queues = [q for q in self.queues if q.idle <= self.idle_limit]
            self._los = [q.lo for q in self.queues]

    def bands(self) -> list[Band]:
        return [Band(q.lo, q.hi, len(q), q.mean) for q in self.queues]

    def __iter__(self) -> Iterator[Job]:
        for q in self.queues:
            yield from q
