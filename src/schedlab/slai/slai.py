"""SLAI, the SLO-aware scheduler. A decode-phase request whose previous token ended at ``e``
has the last schedulable time ``e + TBT_target - offset * t_bar`` (``t_bar``: the running mean
step time). Each step takes (1) the critical decodes (last schedulable time passed), earliest
first; (2) prefill work, started prefills first, then new requests in FCFS or SPF order (paying
users strictly first with ``paying_first``), within the token budget and the active cap; (3)
while budget remains and the step has fewer decodes than the decode limit, the other decodes,
earliest first. The offset is fixed, or ``dynamic``: 5 while KV use is under 96%, else 10."""

from __future__ import annotations

import numpy as np

from schedlab.engine.plan import Planner
from schedlab.engine.scheduler import NOT_STEADY, UNTIL_ARRIVAL
from schedlab.builders.base import Builder
from schedlab.registry import BATCH, register

#: The SLO class served strictly first by the ``-priority`` variant.
PAYING = "paying"
DYNAMIC_LOW, DYNAMIC_HIGH, DYNAMIC_THRESHOLD = 5.0, 10.0, 0.96


def dynamic_offset(kv_frac: float) -> float:
    return DYNAMIC_LOW if kv_frac < DYNAMIC_THRESHOLD else DYNAMIC_HIGH


@register("slai-fcfs-fixed10", kind=BATCH, paper="C", params={"order": "fcfs", "offset": 10.0},
          summary="SLAI, new requests in arrival order, offset fixed at 10")
@register("slai-spf-fixed10", kind=BATCH, paper="C", params={"order": "spf", "offset": 10.0},
          summary="SLAI, shortest prompt first, offset fixed at 10")
@register("slai-spf-fixed5", kind=BATCH, paper="C", params={"order": "spf", "offset": 5.0},
          summary="SLAI, shortest prompt first, offset fixed at 5")
@register("slai-spf-dynamic", kind=BATCH, paper="C", params={"order": "spf", "offset": None},
          summary="SLAI, shortest prompt first, offset 5 or 10 by KV use")
@register("slai-spf-priority-dynamic", kind=BATCH, paper="C", params={"order": "spf", "offset": None, "paying_first": PAYING},
          summary="SLAI, paying users first, then shortest prompt, dynamic offset")
class SLAI(Builder):
    def __init__(self, budget: int = 512, max_active: int = 128, decode_limit: int = 128,
                 offset: float | None = 10.0, order: str = "spf", paying_first: str | None = None) -> None:
        super().__init__(order, paying_first)
        self.budget, self.max_active, self.decode_limit, self.offset = budget, max_active, decode_limit, offset
        tag = "dynamic" if offset is None else f"fixed{offset:g}"
        self.name = f"slai-{order}{'-priority' if paying_first else ''}-{tag}"

    def current_offset(self) -> float:
        return dynamic_offset(self.engine.kv_frac) if self.offset is None else self.offset

    def deadlines(self, dec: np.ndarray) -> np.ndarray:
        e = self.engine
        return e.last_tok[dec] + e.target[dec] - self.current_offset() * e.mean_step_s

    def schedule(self):
        e = self.engine
        dec = e.decoding()
        if dec.size:
            deadline = self.deadlines(dec)
            order = np.argsort(deadline, kind="stable")
            dec = dec[order]
            n_crit = int(np.searchsorted(deadline[order], e.now, side="right"))
        else:
            n_crit = 0
        take = min(n_crit, self.decode_limit, self.budget)
        plan = Planner(e, self, self.budget)
        plan.take_many(dec[:take])
        self.continue_prefills(plan)
        self.admit_fitting(plan, self.max_active)
        more = max(0, min(plan.budget, self.decode_limit - take))
        plan.take_many(dec[take : take + more])
        return plan.plan()

    def steady(self) -> int:
        if len(self.queue) or len(self.engine.running) > min(self.decode_limit, self.budget):
            return NOT_STEADY
        return UNTIL_ARRIVAL
