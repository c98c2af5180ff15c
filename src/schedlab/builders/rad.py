"""RAD, the throughput-optimal scheduler of the paper's theory, in cycles of at most ``n``
requests: if ``tile_col`` requests decode, or no prefill waits, or ``n`` requests started
this cycle, run one step of all decodes (an empty decode set ends the cycle); otherwise take
the next waiting request (FCFS) and run its whole prefill, alone, in chunks of
``LCM(tile_row, tile_col, tile_red)`` tokens. At most ``tile_col`` requests are active."""

from __future__ import annotations

import math

from schedlab.engine.plan import Planner
from schedlab.engine.scheduler import NOT_STEADY, UNTIL_ARRIVAL, UNTIL_COMPLETION
from schedlab.builders.base import UNBOUNDED, Builder
from schedlab.registry import BATCH, register


class TiledPrefill(Builder):
    """One request prefilled alone, chunk by chunk, in tile-aligned chunks."""

    def __init__(self, tile_row: int, tile_col: int, tile_red: int) -> None:
        super().__init__("fcfs")
        self.tile_col = tile_col
        self.chunk = math.lcm(tile_row, tile_col, tile_red)
        self.current: int | None = None

    def requeue(self, i: int) -> None:
        if i == self.current:
            self.current = None
        super().requeue(i)

    def _prefilling(self) -> bool:
        if self.current is not None and self.current not in self.engine.prefilling():
            self.current = None  # its prefill finished
        return self.current is not None

    def _plan(self) -> Planner:
        return Planner(self.engine, self, UNBOUNDED)

    def _chunk(self, plan: Planner):
        plan.take(self.current, min(self.chunk, self.engine.need(self.current)))
        return plan.plan()

    def _start(self, plan: Planner):
        i = self.queue.pop()
        plan.admit(i, min(self.chunk, int(self.engine.seq[i])))
        self.current = i
        return plan.plan()


@register("rad", kind=BATCH, paper="C", summary="RAD, the throughput-optimal scheduler, cycles of at most 128 tokens")
@register("rad-long-cycles", kind=BATCH, paper="C", params={"n": 4096}, summary="RAD with cycles of at most 4,096 tokens")
class RAD(TiledPrefill):
    name = "rad"

    def __init__(self, n: int = 128, tile_row: int = 128, tile_col: int = 128, tile_red: int = 64) -> None:
        super().__init__(tile_row, tile_col, tile_red)
        self.n = n
        self.started = 0

    def _decode_mode(self, dec, plan: Planner) -> bool:
        q = self.queue
        return (dec.size >= self.tile_col or self.started >= self.n or len(self.engine.running) >= self.tile_col
                or not len(q) or not plan.can_admit(q.peek()))

    def schedule(self):
        plan = self._plan()
        if self._prefilling():
            return self._chunk(plan)
        dec = self.engine.decoding()
        if dec.size == 0:
            self.started = 0  # an empty decode set ends the cycle
        if self._decode_mode(dec, plan):
            plan.take_many(dec)
            return plan.plan()
        self.started += 1
        return self._start(plan)

    def steady(self) -> int:
        if self._prefilling():
            return NOT_STEADY
        dec = self.engine.decoding()
        if dec.size == 0 or not self._decode_mode(dec, self._plan()):
            return NOT_STEADY
        return UNTIL_COMPLETION if len(self.queue) else UNTIL_ARRIVAL
