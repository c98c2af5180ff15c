"""Request-level batching (FasterTransformer style): take up to ``max_batch`` waiting requests
FCFS, prefill their whole prompts in one batch, then decode them together until all finish;
only then admit more."""

from __future__ import annotations

from schedlab.batching.base import Builder
from schedlab.batching.engine import NOT_STEADY, UNTIL_COMPLETION


class RequestLevel(Builder):
    name = "request-level"

    def __init__(self, max_batch: int = 128) -> None:
        super().__init__("fcfs")
        self.max_batch = max_batch

    def build(self, now: float):
        eng = self.engine
        if eng.n_active:
            return eng.decoding(), []
        chunks: list = []
        while len(chunks) < self.max_batch and len(self.queue) and eng.fits(self.queue.peek()):
            i = self.queue.pop()
            eng.admit(i)
            chunks.append((i, eng.need(i)))
        return eng.decoding(), chunks

    def steady(self) -> int:
        eng = self.engine
        return UNTIL_COMPLETION if eng.n_active and not eng.prefilling else NOT_STEADY
