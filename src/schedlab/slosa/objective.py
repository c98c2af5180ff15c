"""The G objective: requests on time per second of summed end-to-end latency.

Batches run one after another; a batch takes as long as its slowest member, and every request
waits for all earlier batches. ``e2e_i = wait_i + prefill_i(b) + decode_i(b)``,
``TTFT_i = wait_i + prefill_i(b)``, ``TPOT_i = decode_i(b) / o_i`` for a batch of size ``b``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from schedlab.slosa.problem import MappingProblem


@numba.njit(cache=True, nogil=True, inline="always")
def evaluate_from(order, sizes, m, execution, slack, j0, wait, total, met):
    """Finish an evaluation from batch ``j0``: ``wait/total/met[j]`` hold the state before
    batch ``j`` (entries up to ``j0`` are read, later ones written; index ``m`` is the
    result). See :attr:`MappingProblem.arrays` for ``execution`` and ``slack``."""
    pos = 0
    for j in range(j0):
        pos += sizes[j]
    w, t, k = wait[j0], total[j0], met[j0]
    for j in range(j0, m):
        b = sizes[j] - 1
        longest = 0.0
        for q in range(pos, pos + b + 1):
            i = order[q]
            ex = execution[i, b]
            t += w + ex
            if w <= slack[i, b]:
                k += 1
            if ex > longest:
                longest = ex
        w += longest
        pos += b + 1
        wait[j + 1], total[j + 1], met[j + 1] = w, t, k
    return k, t


@numba.njit(cache=True, nogil=True)
def evaluate_kernel(order, sizes, m, execution, slack):
    """(# on time, summed e2e) of ``order`` cut into batches ``sizes[:m]``."""
    wait, total, met = np.zeros(m + 1), np.zeros(m + 1), np.zeros(m + 1, dtype=np.int64)
    return evaluate_from(order, sizes, m, execution, slack, 0, wait, total, met)


@dataclass(frozen=True)
class Mapping:
    """A priority sequence of request positions cut into consecutive batches."""

    order: np.ndarray
    sizes: np.ndarray

    def __post_init__(self) -> None:
        object.__setattr__(self, "order", np.asarray(self.order, dtype=np.int64))
        object.__setattr__(self, "sizes", np.asarray(self.sizes, dtype=np.int64))

    def batches(self) -> list[list[int]]:
        cuts = np.cumsum(self.sizes)[:-1]
        return [b.tolist() for b in np.split(self.order, cuts)]

    def rank(self) -> np.ndarray:
        """Each request's batch index (its priority: lower runs first), by request position."""
        out = np.empty(len(self.order), dtype=np.int64)
        out[self.order] = np.repeat(np.arange(len(self.sizes)), self.sizes)
        return out


@dataclass(frozen=True)
class Score:
    met: int
    total_e2e_s: float
    n: int

    @property
    def g(self) -> float:
        """G = (# on time) / (sum of e2e), per second."""
        return self.met / self.total_e2e_s if self.total_e2e_s > 0 else 0.0

    @property
    def attainment(self) -> float:
        return self.met / self.n

    @property
    def mean_e2e_s(self) -> float:
        return self.total_e2e_s / self.n


def score(problem: MappingProblem, mapping: Mapping) -> Score:
    """G and its parts for ``mapping`` (checks that it is a legal mapping of ``problem``)."""
    check(problem, mapping)
    met, total = evaluate_kernel(mapping.order, mapping.sizes, len(mapping.sizes), *problem.arrays)
    return Score(int(met), float(total), problem.n)


def check(problem: MappingProblem, mapping: Mapping) -> None:
    """Every request exactly once; batch sizes in 1..max_batch summing to N."""
    if sorted(mapping.order.tolist()) != list(range(problem.n)):
        raise ValueError("mapping order is not a permutation of the requests")
    if mapping.sizes.sum() != problem.n or mapping.sizes.min() < 1 or mapping.sizes.max() > problem.max_batch:
        raise ValueError(f"illegal batch sizes {mapping.sizes.tolist()} (max {problem.max_batch})")
