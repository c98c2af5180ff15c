"""One mapping decision: the pending requests, their predicted latencies per batch size, and
their SLOs, as flat arrays the search kernels read."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pandas as pd

from schedlab.errors import SchedlabError
from schedlab.fit.latency_predictor import LatencyPredictor

#: SLO kinds: a code task is on time if e2e <= its target; a chat task if TTFT and TPOT are.
E2E, TTFT_TPOT = 0, 1
#: The paper's targets.
CHAT_SLO = {"ttft_s": 10.0, "tpot_s": 0.050}
CODE_SLO = {"e2e_s": 30.0}


@dataclass(frozen=True)
class MappingProblem:
    """``prefill[i, b-1]`` and ``decode[i, b-1]`` are request ``i``'s predicted prefill and
    decode times in a batch of ``b`` (seconds); ``output`` the output length they assume."""

    prefill: np.ndarray
    decode: np.ndarray
    output: np.ndarray
    kind: np.ndarray
    slo_e2e: np.ndarray
    slo_ttft: np.ndarray
    slo_tpot: np.ndarray
    max_batch: int

    @property
    def n(self) -> int:
        return len(self.output)

    @classmethod
    def build(
        cls,
        requests: pd.DataFrame,
        predictor: LatencyPredictor,
        max_batch: int,
        output_tokens: np.ndarray | None = None,
    ) -> "MappingProblem":
        """From a table with ``prompt_tokens``, ``output_tokens`` and ``task`` (``chat`` or
        ``code``); ``output_tokens`` overrides the lengths the prediction assumes (estimates)."""
        if max_batch < 1:
            raise SchedlabError(f"max batch size must be >= 1, got {max_batch}")
        unknown = set(requests["task"]) - {"chat", "code"}
        if unknown:
            raise SchedlabError(f"unknown task types {sorted(unknown)}; expected chat or code")
        o = np.asarray(requests["output_tokens"] if output_tokens is None else output_tokens, dtype=float)
        chat = (requests["task"] == "chat").to_numpy()
        inf = np.full(len(o), np.inf)
        return cls.predicted(
            predictor, requests["prompt_tokens"].to_numpy(float), o, max_batch, code=~chat,
            slo_e2e=np.where(chat, inf, CODE_SLO["e2e_s"]),
            slo_ttft=np.where(chat, CHAT_SLO["ttft_s"], inf),
            slo_tpot=np.where(chat, CHAT_SLO["tpot_s"], inf),
        )

    @classmethod
    def predicted(cls, predictor: LatencyPredictor, prompt: np.ndarray, output: np.ndarray, max_batch: int, *,
                  code: np.ndarray, slo_e2e: np.ndarray, slo_ttft: np.ndarray, slo_tpot: np.ndarray) -> "MappingProblem":
        """The predictor's prefill and decode times of requests with ``prompt`` and ``output``
        tokens (at least 1) at every batch size, with their SLO kind (``code``: e2e target)
        and targets."""
        l = np.asarray(prompt, float)[:, None]
        o = np.maximum(np.asarray(output, float), 1.0)
        b = np.arange(1, max_batch + 1, dtype=float)[None, :]
        return cls(
            prefill=np.ascontiguousarray(np.broadcast_to(predictor.ttft(b, l), (len(o), max_batch)), dtype=float),
            decode=np.ascontiguousarray(predictor.decode_time(b, l, o[:, None]), dtype=float),
            output=o,
            kind=np.where(code, E2E, TTFT_TPOT).astype(np.int64),
            slo_e2e=slo_e2e,
            slo_ttft=slo_ttft,
            slo_tpot=slo_tpot,
            max_batch=max_batch,
        )

    @cached_property
    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """What the search kernels read (computed once per problem): ``exec[i, b-1]``, request ``i``'s execution time in a
        batch of ``b``, and ``slack[i, b-1]``, the longest wait that keeps it on time there
        (``-inf`` when no wait can: a chat request whose TPOT misses at that batch size)."""
        execution = self.prefill + self.decode
        tpot_ok = self.decode / self.output[:, None] <= self.slo_tpot[:, None]
        chat_slack = np.where(tpot_ok, self.slo_ttft[:, None] - self.prefill, -np.inf)
        code_slack = self.slo_e2e[:, None] - execution
        slack = np.where((self.kind == E2E)[:, None], code_slack, chat_slack)
        return np.ascontiguousarray(execution), np.ascontiguousarray(slack)
