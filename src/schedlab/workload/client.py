"""How a benchmark client bounds a run: a fixed number of requests, or a cap on requests in flight.

``vllm bench serve`` sends ``--num-prompts`` requests (1,000 by default) at the arrival
process's times; with ``--max-concurrency`` a request waits at the client until fewer than
that many are in flight, and its latencies count from when it is sent. A fixed count is a
trace of that many arrivals (:func:`schedlab.workload.arrivals.arrival_times`); the cap is
:class:`InFlightCap`, a scheduler wrapper that holds arrivals at the client.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from schedlab.errors import SchedlabError
from schedlab.engine.scheduler import NOT_STEADY, Scheduler


class InFlightCap(Scheduler):
    """Forward arrivals to ``inner`` only while fewer than ``cap`` requests are in flight.

    A held request reaches the scheduler when a slot frees; ``sent_s``, the time its latencies
    count from, is that moment minus the step-time model's front-end delay, so every request's
    latency includes the front end once."""

    def __init__(self, inner: Scheduler, cap: int) -> None:
        if cap < 1:
            raise ValueError(f"the in-flight cap must be at least 1, got {cap}")
        self.inner, self.cap = inner, cap
        self.name = inner.name

    @property
    def overhead_s(self) -> float:
        return self.inner.overhead_s

    def bind(self, engine) -> None:
        if engine.step_time.frontend_service_s:
            raise SchedlabError("a cap on requests in flight is not modelled with a front-end station "
                                "(its queue would order requests by when the client sends them)")
        super().bind(engine)
        self.inner.bind(engine)
        self.held: deque[int] = deque()
        self.forwarded = 0
        self.sent_s = np.full(engine.n, np.nan)

    def _release(self) -> None:
        e = self.engine
        while self.held and self.forwarded - e.done < self.cap:
            i = self.held.popleft()
            self.sent_s[i] = max(e.now, e.visible[i]) - e.step_time.frontend_s
            self.inner.arrive(i)
            self.forwarded += 1

    def arrive(self, i: int) -> None:
        self.held.append(i)
        self._release()

    def requeue(self, i: int) -> None:
        self.inner.requeue(i)

    def n_waiting(self) -> int:
        return self.inner.n_waiting() + len(self.held)

    def steady(self) -> int:
        self._release()
        return self.inner.steady() if not self.held or self.forwarded - self.engine.done >= self.cap else NOT_STEADY

    def schedule(self):
        self._release()
        return self.inner.schedule()

    def victim(self, running: list[int]) -> int:
        return self.inner.victim(running)

    def describe(self) -> str:
        return self.inner.describe()
