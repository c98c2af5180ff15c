"""The per-request state of a run, by trace position: what the trace fixes (arrival, prompt,
sequence length at completion, TBT target, SLO class), what the engine advances (``seq``:
prompt + tokens generated, ``computed``: tokens whose KV is written, ``blocks``: KV blocks
held) and the timing log. One engine holds its own; the replicas of a cluster share one, each
writing the rows of the requests routed to it (a request is only ever on one replica)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from schedlab.engine.arena import Arena
from schedlab.engine.log import RequestLog


class Requests:
    """The requests of ``trace`` (sorted by arrival), those arriving before ``warmup_s`` not
    measured."""

    def __init__(self, trace: pd.DataFrame, warmup_s: float = 0.0) -> None:
        self.trace = trace
        self.n = n = len(trace)
        self.arrival = trace["arrival_s"].to_numpy(float)
        self.prompt = trace["prompt_tokens"].to_numpy(np.int64)
        self.total = self.prompt + trace["output_tokens"].to_numpy(np.int64)  # sequence length when complete
        self.target = trace["tbt_target_s"].to_numpy(float) if "tbt_target_s" in trace else np.full(n, np.inf)
        self.slo_class = trace["slo_class"].astype(str).to_numpy() if "slo_class" in trace else np.full(n, "all")
        self.seq = self.prompt.copy()
        self.computed = np.zeros(n, np.int64)
        self.blocks = np.zeros(n, np.int64)
        self.log = RequestLog(trace, warmup_s)
        self._sizes: dict[int, tuple[Arena, np.ndarray]] = {}

    def sizes(self, arena: Arena) -> np.ndarray:
        """The job sizes ``arena`` estimates (computed once per arena)."""
        if id(arena) not in self._sizes:
            self._sizes[id(arena)] = (arena, arena.job_sizes(self.trace))
        return self._sizes[id(arena)][1]
