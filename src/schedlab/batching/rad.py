"""RAD, the throughput-optimal scheduler of the paper's theory, in cycles of at most ``n``
requests: if ``tile_col`` requests decode, or no prefill waits, or ``n`` requests started
this cycle, run one batch of all decodes (an empty decode set ends the cycle); otherwise take
the next waiting request (FCFS) and run its whole prefill, alone, in chunks of
``LCM(tile_row, tile_col, tile_red)`` tokens. At most ``tile_col`` requests are active."""

from __future__ import annotations

import math

from schedlab.batching.base import Builder
from schedlab.batching.engine import NOT_STEADY, UNTIL_ARRIVAL, UNTIL_COMPLETION


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
        if self.current is not None and self.current not in self.engine.prefilling:
            self.current = None  # its prefill finished
        return self.current is not None

    def _chunk(self):
        eng = self.engine
        return eng.decoding()[:0], [(self.current, min(self.chunk, eng.need(self.current)))]

    def _start(self):
        i = self.queue.pop()
        self.engine.admit(i)
        self.current = i
        return self._chunk()


class RAD(TiledPrefill):
    name = "rad"

    def __init__(self, n: int = 128, tile_row: int = 128, tile_col: int = 128, tile_red: int = 64) -> None:
        super().__init__(tile_row, tile_col, tile_red)
        self.n = n
        self.started = 0

    def _decode_mode(self, dec) -> bool:
        eng = self.engine
        return (dec.size >= self.tile_col or self.started >= self.n or eng.n_active >= self.tile_col
                or not len(self.queue) or not eng.fits(self.queue.peek()))

    def build(self, now: float):
        if self._prefilling():
            return self._chunk()
        dec = self.engine.decoding()
        if dec.size == 0:
            self.started = 0  # an empty decode set ends the cycle
        if self._decode_mode(dec):
            return dec, []
        self.started += 1
        return self._start()

    def steady(self) -> int:
        if self._prefilling():
            return NOT_STEADY
        dec = self.engine.decoding()
        if dec.size == 0 or not self._decode_mode(dec):
            return NOT_STEADY
        return UNTIL_COMPLETION if len(self.queue) else UNTIL_ARRIVAL
