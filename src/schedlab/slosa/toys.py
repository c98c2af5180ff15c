"""The paper's three toy illustrations as tiny mapping problems with hand-set times (seconds).

1. ``order``: an SLO-aware order beats size order. A long request with a tight e2e target and
   a short one with a loose target: shortest-first makes the long one late.
2. ``split``: splitting a batch helps. Two chat requests whose TPOT misses its target in a
   batch of two but not alone.
3. ``defer``: deferring an unattainable strict SLO raises G. A request that cannot meet its
   target even alone should go last instead of delaying two that can.
"""

from __future__ import annotations

import numpy as np

from schedlab.slosa.objective import Mapping
from schedlab.slosa.problem import E2E, TTFT_TPOT, MappingProblem


def _problem(prefill, decode, output, kind, slo_e2e, slo_ttft=None, slo_tpot=None) -> MappingProblem:
    prefill, decode = np.atleast_2d(prefill).astype(float), np.atleast_2d(decode).astype(float)
    n = prefill.shape[0]
    inf = np.full(n, np.inf)
    return MappingProblem(
        prefill=prefill, decode=decode, output=np.asarray(output, float), kind=np.asarray(kind, np.int64),
        slo_e2e=np.asarray(slo_e2e, float), slo_ttft=inf if slo_ttft is None else np.asarray(slo_ttft, float),
        slo_tpot=inf if slo_tpot is None else np.asarray(slo_tpot, float), max_batch=prefill.shape[1],
    )


def toy_order() -> tuple[MappingProblem, dict[str, Mapping]]:
    """A: 4 s, e2e target 4.5 s; B: 1 s, target 6 s. Size order B, A: G = 1/6; A, B: G = 2/9."""
    p = _problem([[0.0], [0.0]], [[4.0], [1.0]], [100, 25], [E2E, E2E], [4.5, 6.0])
    return p, {"size order": Mapping([1, 0], [1, 1]), "SLO-aware": Mapping([0, 1], [1, 1])}


def toy_split() -> tuple[MappingProblem, dict[str, Mapping]]:
    """Two chat requests, 40 tokens each: 2 s alone (TPOT 45 ms), 3 s together (TPOT 70 ms,
    over the 50 ms target). Batched: G = 0 / 6; split: G = 2 / (2 + 4) = 1/3."""
    prefill = [[0.2, 0.2], [0.2, 0.2]]
    decode = [[1.8, 2.8], [1.8, 2.8]]
    inf = [np.inf, np.inf]
    p = _problem(prefill, decode, [40, 40], [TTFT_TPOT, TTFT_TPOT], inf, [10.0, 10.0], [0.05, 0.05])
    return p, {"one batch": Mapping([0, 1], [2]), "split": Mapping([0, 1], [1, 1])}


def toy_defer() -> tuple[MappingProblem, dict[str, Mapping]]:
    """A, B: 1 s, targets 2 s and 3 s; C: 3 s with a 1 s target (unattainable). Most urgent
    first (C, A, B): G = 0 / 12; C deferred (A, B, C): G = 2 / (1 + 2 + 5) = 1/4."""
    p = _problem([[0.0], [0.0], [0.0]], [[1.0], [1.0], [3.0]], [20, 20, 60], [E2E, E2E, E2E], [2.0, 3.0, 1.0])
    return p, {"most urgent first": Mapping([2, 0, 1], [1, 1, 1]), "deferred": Mapping([0, 1, 2], [1, 1, 1])}


TOYS = {"order": toy_order, "split": toy_split, "defer": toy_defer}
