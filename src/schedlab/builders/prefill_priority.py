"""Prefill priority, vLLM v0's scheduler without chunked prefill: whenever waiting requests fit
in memory, run a prefill-only step of whole prompts (FCFS, up to the token and sequence
limits); otherwise decode every running request."""

from __future__ import annotations

from schedlab.engine.plan import Planner
from schedlab.engine.scheduler import NOT_STEADY, UNTIL_ARRIVAL
from schedlab.errors import SchedlabError
from schedlab.builders.base import Builder
from schedlab.registry import BATCH, Context, register


class PrefillPriority(Builder):
    name = "prefill-priority"

    def __init__(self, max_tokens: int = 8192, max_active: int = 256) -> None:
        super().__init__("fcfs")
        self.max_tokens, self.max_active = max_tokens, max_active

    def bind(self, engine) -> None:
        super().bind(engine)
        longest = int(engine.total.max(initial=0))
        if longest > self.max_tokens:
            raise SchedlabError(f"{self.name}: a {longest}-token sequence exceeds max_tokens={self.max_tokens}")

    def schedule(self):
        e, q = self.engine, self.queue
        plan = Planner(e, self, self.max_tokens)
        while (len(q) and plan.n_running < self.max_active and int(e.seq[q.peek()]) <= plan.budget
               and plan.can_admit(q.peek())):
            i = q.pop()
            plan.admit(i, int(e.seq[i]))
        if not plan.admitted:
            plan.take_many(e.decoding())
        return plan.plan()

    def steady(self) -> int:
        return NOT_STEADY if len(self.queue) else UNTIL_ARRIVAL


@register("prefill-priority", kind=BATCH, paper="C",
          summary="prefill priority without chunked prefill (vLLM v0's scheduler)")
def prefill_priority(context: Context) -> PrefillPriority:
    """A step must hold the longest prompt: on an arena that rejects requests longer than the
    model's context, the token limit is that context, as vLLM sets it."""
    arena = context.arena
    if arena is not None and arena.max_tokens:
        return PrefillPriority(max_tokens=max(PrefillPriority().max_tokens, arena.max_tokens))
    return PrefillPriority()
