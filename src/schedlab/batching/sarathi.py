"""Sarathi-Serve: every batch takes one decode of each decode-phase request, then fills the
token budget with prefill chunks (started prefills first, then new requests FCFS or SPF)."""

from __future__ import annotations

from schedlab.batching.base import Builder
from schedlab.batching.engine import NOT_STEADY, UNTIL_ARRIVAL


class Sarathi(Builder):
    def __init__(self, budget: int = 512, max_active: int = 128, order: str = "fcfs") -> None:
        super().__init__(order)
        self.name = f"sarathi-{order}"
        self.budget, self.max_active = budget, max_active

    def build(self, now: float):
        dec = self.engine.decoding()[: self.budget]
        chunks: list = []
        budget = self.continue_prefills(self.budget - len(dec), chunks)
        self.admit_fitting(budget, self.max_active, chunks)
        return dec, chunks

    def steady(self) -> int:
        eng = self.engine
        if len(self.queue) or eng.prefilling or eng.n_active > self.budget:
            return NOT_STEADY
        return UNTIL_ARRIVAL
