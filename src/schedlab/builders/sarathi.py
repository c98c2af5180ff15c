"""Sarathi-Serve: every step takes one decode of each decode-phase request, then fills the
token budget with prefill chunks (started prefills first, then new requests FCFS or SPF)."""

from __future__ import annotations

from schedlab.engine.plan import Planner
from schedlab.engine.scheduler import NOT_STEADY, UNTIL_ARRIVAL
from schedlab.builders.base import Builder
from schedlab.registry import BATCH, register


@register("sarathi-fcfs", kind=BATCH, paper="C", params={"order": "fcfs"}, summary="Sarathi-Serve, new requests in arrival order")
@register("sarathi-spf", kind=BATCH, paper="C", params={"order": "spf"}, summary="Sarathi-Serve, new requests by fewest prompt tokens")
class Sarathi(Builder):
    def __init__(self, budget: int = 512, max_active: int = 128, order: str = "fcfs") -> None:
        super().__init__(order)
        self.name = f"sarathi-{order}"
        self.budget, self.max_active = budget, max_active

    def schedule(self):
        plan = Planner(self.engine, self, self.budget)
        plan.take_many(self.engine.decoding()[: self.budget])
        self.continue_prefills(plan)
        self.admit_fitting(plan, self.max_active)
        return plan.plan()

    def steady(self) -> int:
        if len(self.queue) or len(self.engine.running) > self.budget:
            return NOT_STEADY
        return UNTIL_ARRIVAL
