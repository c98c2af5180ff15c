"""Request-level batching (FasterTransformer style): take up to ``max_batch`` waiting requests
FCFS, prefill their whole prompts in one step, then decode them together until all finish;
only then admit more."""

from __future__ import annotations

from schedlab.engine.plan import Planner
from schedlab.engine.scheduler import NOT_STEADY, UNTIL_COMPLETION
from schedlab.builders.base import UNBOUNDED, Builder
from schedlab.registry import BATCH, register


@register("request-level", kind=BATCH, paper="C", summary='request-level batching: a batch runs to completion before the next is formed')
class RequestLevel(Builder):
    name = "request-level"

    def __init__(self, max_batch: int = 128) -> None:
        super().__init__("fcfs")
        self.max_batch = max_batch

    def schedule(self):
        e, q = self.engine, self.queue
        plan = Planner(e, self, UNBOUNDED)
        if e.running:
            plan.take_many(e.decoding())
            self.continue_prefills(plan)  # recompute of a preempted batch member
            return plan.plan()
        while len(plan.admitted) < self.max_batch and len(q) and plan.can_admit(q.peek()):
            i = q.pop()
            plan.admit(i, int(e.seq[i]))
        return plan.plan()

    def steady(self) -> int:
        return UNTIL_COMPLETION if self.engine.running else NOT_STEADY
