"""The appendix's Algorithm 2: prefill up to ``n`` waiting requests one after another (alone,
in tile-aligned chunks) while the KV cache holds them, then decode the cycle's requests with
a sliding set of at most ``tile_col`` (the earliest unfinished ones) until all are done."""

from __future__ import annotations

import numpy as np

from schedlab.batching.engine import NOT_STEADY, UNTIL_COMPLETION
from schedlab.batching.rad import TiledPrefill


class Algorithm2(TiledPrefill):
    name = "algorithm2"

    def __init__(self, n: int = 128, tile_row: int = 128, tile_col: int = 128, tile_red: int = 64) -> None:
        super().__init__(tile_row, tile_col, tile_red)
        self.n = n
        self.cycle: list[int] = []
        self.decoding_phase = False

    def requeue(self, i: int) -> None:
        if i in self.cycle:
            self.cycle.remove(i)
        super().requeue(i)

    def build(self, now: float):
        eng = self.engine
        if self._prefilling():
            return self._chunk()
        if not self.decoding_phase:
            q = self.queue
            if len(self.cycle) < self.n and len(q) and eng.fits(q.peek()):
                self.cycle.append(q.peek())
                return self._start()
            if not self.cycle:
                return eng.decoding()[:0], []
            self.decoding_phase = True
        cyc = np.asarray(self.cycle, np.int64)
        dec = cyc[eng.is_dec[cyc]][: self.tile_col]
        if dec.size == 0:  # the cycle is done
            self.cycle, self.decoding_phase = [], False
            return self.build(now)
        return dec, []

    def steady(self) -> int:
        return UNTIL_COMPLETION if self.decoding_phase and self.current is None else NOT_STEADY
