"""The appendix's Algorithm 2: prefill up to ``n`` waiting requests one after another (alone,
in tile-aligned chunks) while the KV cache holds them, then decode the cycle's requests with
a sliding set of at most ``tile_col`` (the earliest unfinished ones) until all are done."""

from __future__ import annotations

import numpy as np

from schedlab.engine import kernels
from schedlab.engine.scheduler import NOT_STEADY, UNTIL_COMPLETION
from schedlab.builders.rad import TiledPrefill
from schedlab.registry import BATCH, register


@register("algorithm2", kind=BATCH, paper="C", summary="the paper's Algorithm 2: RAD's cycles with decodes packed into the tiles")
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

    def schedule(self):
        e = self.engine
        plan = self._plan()
        if self._prefilling():
            return self._chunk(plan)
        if not self.decoding_phase:
            q = self.queue
            if len(self.cycle) < self.n and len(q) and plan.can_admit(q.peek()):
                self.cycle.append(q.peek())
                return self._start(plan)
            if not self.cycle:
                return plan.plan()
            self.decoding_phase = True
        cyc = np.asarray(self.cycle, np.int64)
        cyc = cyc[e.seq[cyc] < e.total[cyc]]  # unfinished
        dec = kernels.decoding(cyc, e.seq, e.computed, e.prompt)[: self.tile_col]
        if dec.size == 0:  # the cycle is done
            self.cycle, self.decoding_phase = [], False
            return self.schedule()
        plan.take_many(dec)
        return plan.plan()

    def steady(self) -> int:
        if self.decoding_phase and self.current is None and len(self.engine.running) <= self.tile_col:
            return UNTIL_COMPLETION
        return NOT_STEADY
