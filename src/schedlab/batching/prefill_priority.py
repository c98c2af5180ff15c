"""vLLM-style prefill priority (vLLM's scheduler without chunked prefill): whenever waiting
requests fit in memory, run a prefill-only batch of whole prompts (FCFS, up to the token and
sequence limits); otherwise decode every running request."""

from __future__ import annotations

from schedlab.batching.base import Builder
from schedlab.batching.engine import NOT_STEADY, UNTIL_ARRIVAL
from schedlab.errors import SchedlabError


class PrefillPriority(Builder):
    name = "vllm"

    def __init__(self, max_tokens: int = 8192, max_active: int = 256) -> None:
        super().__init__("fcfs")
        self.max_tokens, self.max_active = max_tokens, max_active

    def bind(self, engine) -> None:
        super().bind(engine)
        longest = int((engine.prompt + engine.output).max(initial=0))
        if longest > self.max_tokens:
            raise SchedlabError(f"vllm: a {longest}-token sequence exceeds max_tokens={self.max_tokens}")

    def build(self, now: float):
        eng, q = self.engine, self.queue
        chunks: list = []
        budget = self.max_tokens
        while len(q) and eng.n_active < self.max_active and eng.need(q.peek()) <= budget and eng.fits(q.peek()):
            i = q.pop()
            eng.admit(i)
            chunks.append((i, eng.need(i)))
            budget -= eng.need(i)
        if chunks:
            return eng.decoding()[:0], chunks
        return eng.decoding(), chunks

    def steady(self) -> int:
        return NOT_STEADY if len(self.queue) else UNTIL_ARRIVAL
