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
from schedlab.policies.base import RequestState

#: Trace columns a policy reads through a job (:class:`EngineState`): the tenant, the
#: end-to-end target its deadline counts from, and a predictor's output length.
TENANT, E2E_TARGET, PREDICTED = "tenant", "slo_e2e_s", "predicted_output_tokens"


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


class EngineState(RequestState):
    """A run's requests as a policy reads them through its jobs (handle: the trace position),
    from ``engine``'s own arrays (as the last step left them) and its trace. A request the step
    being planned preempts (``preempting``) reads as vLLM's does once preempted: nothing
    computed or held, one preemption more (the engine writes it when it carries the step out)."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self.preempting: set[int] = set()
        self._columns: dict[str, np.ndarray] = {}

    def _column(self, name: str, fill, kind):
        """The trace's column ``name`` as ``kind`` (``fill`` where missing), read once."""
        if name not in self._columns:
            trace = self.engine.trace
            if name not in trace:
                self._columns[name] = np.full(len(trace), fill, dtype=object if kind is str else float)
            elif kind is str:
                column = trace[name]
                self._columns[name] = column.where(column.notna(), fill).astype(str).to_numpy()
            else:
                values = trace[name].to_numpy(float)
                self._columns[name] = np.where(np.isnan(values), fill, values)
        return self._columns[name]

    def generated_tokens(self, i: int) -> int:
        e = self.engine
        return int(e.seq[i] - e.prompt[i])

    def computed_tokens(self, i: int) -> int:
        return 0 if i in self.preempting else int(self.engine.computed[i])

    def preemptions(self, i: int) -> int:
        return int(self.engine.log.preemptions[i]) + (i in self.preempting)

    def kv_blocks(self, i: int) -> int:
        return 0 if i in self.preempting else int(self.engine.blocks[i])

    def first_token_s(self, i: int) -> float:
        return float(self.engine.log.first_tok[i])

    def finished(self, i: int) -> bool:
        return not np.isnan(self.engine.log.finish[i])

    def slo_class(self, i: int) -> str:
        return str(self.engine.slo_class[i])

    def tenant(self, i: int) -> str:
        return str(self._column(TENANT, "", str)[i])

    def deadline_s(self, i: int) -> float:
        return float(self.engine.arrival[i] + self._column(E2E_TARGET, np.inf, float)[i])

    def predicted_tokens(self, i: int) -> float:
        return float(self._column(PREDICTED, np.nan, float)[i])
