"""Priority mappers: the arrival-order baseline, exhaustive search, and simulated annealing.

Simulated annealing (the paper's mapper) starts from the better of arrival order and order by
predicted e2e (both with full batches), and stops at once if the latter meets every SLO (the
paper's early exit; with batching it is not always optimal, so it can be switched off). Moves,
chosen uniformly: *squeeze* a request into the previous batch, *delay* it to the next one
(opening a new last batch if needed), or *swap* two requests. A worse G is accepted with
probability ``exp(-(f - f_new) / T)`` where ``f`` is G in thousandths of the start point's G,
so temperatures read as fractions of G: a move that costs 1% of G is accepted with probability
0.98 at the default ``T0 = 500`` and 0.61 at ``T_min = 20``, one that costs 10% with 0.82 and
0.007. T decays by ``decay`` after ``iters`` moves until it falls below ``T_min``; the best
mapping seen is returned.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numba
import numpy as np

from schedlab.errors import SchedlabError
from schedlab.slosa.objective import Mapping, evaluate_from, evaluate_kernel
from schedlab.slosa.problem import MappingProblem

#: Units of f per unit of the start point's G (per mille).
F_SCALE = 1e3


@dataclass(frozen=True)
class AnnealConfig:
    t0: float = 500.0
    t_min: float = 20.0
    decay: float = 0.95
    iters: int = 100
    seed: int = 0
    early_exit: bool = True

    def __post_init__(self) -> None:
        if not (self.t0 > self.t_min > 0 and 0 < self.decay < 1 and self.iters >= 1):
            raise SchedlabError(f"need T0 > T_min > 0, 0 < decay < 1, iters >= 1; got {self}")


def full_batches(n: int, max_batch: int) -> np.ndarray:
    return np.array([max_batch] * (n // max_batch) + ([n % max_batch] if n % max_batch else []), dtype=np.int64)


def arrival_order(problem: MappingProblem) -> Mapping:
    """The FCFS baseline: arrival order, every batch at the maximum size."""
    return Mapping(np.arange(problem.n), full_batches(problem.n, problem.max_batch))


def by_predicted_e2e(problem: MappingProblem) -> Mapping:
    """Shortest predicted execution (at the maximum batch size) first, full batches."""
    b = problem.max_batch - 1
    ex = problem.prefill[:, b] + problem.decode[:, b]
    return Mapping(np.argsort(ex, kind="stable"), full_batches(problem.n, problem.max_batch))


@dataclass(frozen=True)
class SearchResult:
    mapping: Mapping
    g: float
    early_exit: bool = False
    evaluations: int = 0


def anneal(problem: MappingProblem, config: AnnealConfig = AnnealConfig()) -> SearchResult:
    """The paper's simulated-annealing mapper (see the module docstring)."""
    execution, slack = problem.arrays
    first = by_predicted_e2e(problem)
    by_e2e, m = first.order, len(first.sizes)
    sizes = _padded(first.sizes, problem.n)
    arrival = np.arange(problem.n)  # arrival_order(problem), with the same full batches
    met_e, total_e = evaluate_kernel(by_e2e, sizes, m, execution, slack)
    if config.early_exit and met_e == problem.n:
        return SearchResult(Mapping(by_e2e, sizes[:m]), met_e / total_e, early_exit=True, evaluations=1)
    met_a, total_a = evaluate_kernel(arrival, sizes, m, execution, slack)
    g_e, g_a = met_e / total_e, met_a / total_a
    start = by_e2e if g_e >= g_a else arrival
    ref = max(g_e, g_a) or 1.0 / max(total_e, total_a)  # nobody on time: scale by 1/sum(e2e)
    order, sizes, m, g_best, evals = _anneal_kernel(
        start.copy(), sizes, m, problem.max_batch, execution, slack,
        config.t0, config.t_min, config.decay, config.iters, config.seed, F_SCALE / ref,
    )
    return SearchResult(Mapping(order, sizes[:m]), float(g_best), evaluations=int(evals) + 2)


def warm_up() -> None:
    """Compile (or load from numba's cache) the search kernels, so timings exclude the JIT."""
    from schedlab.slosa.toys import toy_split

    problem, _ = toy_split()
    anneal(problem, AnnealConfig(t0=2.0, t_min=1.0, iters=1, early_exit=False))
    exhaustive(problem)


def _padded(sizes: np.ndarray, n: int) -> np.ndarray:
    out = np.zeros(n, dtype=np.int64)
    out[: len(sizes)] = sizes
    return out


@numba.njit(cache=True, nogil=True)
def _remove_batch(sizes, m, j):
    for k in range(j, m - 1):
        sizes[k] = sizes[k + 1]
    sizes[m - 1] = 0
    return m - 1


@numba.njit(cache=True, nogil=True, inline="always")
def _uniform(x):
    """One step of a xorshift64* generator: its next state, and a draw in [0, 1) from it."""
    x ^= x >> numba.uint64(12)
    x ^= x << numba.uint64(25)
    x ^= x >> numba.uint64(27)
    return x, ((x * numba.uint64(2685821657736338717)) >> numba.uint64(11)) * (1.0 / 9007199254740992.0)


@numba.njit(cache=True, nogil=True, inline="always")
def _batch_of(sizes, p):
    j, start = 0, 0
    while start + sizes[j] <= p:
        start += sizes[j]
        j += 1
    return j, start


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _anneal_kernel(order, sizes, m, B, execution, slack, t0, t_min, decay, iters, seed, scale):
    """Moves are applied in place and undone when rejected (``saved`` holds the batch sizes);
    a move only re-evaluates the batches from the first one it touches (prefix state in
    ``wait/total/met``, trial values in the ``t_`` copies)."""
    rng = numba.uint64(seed * 0x9E3779B97F4A7C15 + 0x2545F4914F6CDD1D)
    n = order.shape[0]
    wait, total, met = np.zeros(n + 1), np.zeros(n + 1), np.zeros(n + 1, dtype=np.int64)
    k, t = evaluate_from(order, sizes, m, execution, slack, 0, wait, total, met)
    t_wait, t_total, t_met = wait.copy(), total.copy(), met.copy()
    f = k / t * scale
    best_o, best_s, best_m, best_f = order.copy(), sizes.copy(), m, f
    saved = sizes.copy()
    evals = 0
    T = t0
    while T >= t_min:
        for _ in range(iters):
            rng, u = _uniform(rng)
            move = int(u * 3)
            rng, u = _uniform(rng)
            p = int(u * n)
            old_m = m
            j, start = _batch_of(sizes, p)
            if move == 2:  # swap two requests
                rng, u = _uniform(rng)
                q = int(u * n)
                jq, _s = _batch_of(sizes, q)
                if jq == j:  # same batch: G unchanged, the move is a no-op
                    continue
                j0 = min(j, jq)
            elif move == 0:  # squeeze into the previous batch
                if j == 0 or sizes[j - 1] >= B:
                    continue
                q = start
                j0 = j - 1
            else:  # delay to the next batch (a new last batch if p's batch is the last)
                if j == m - 1 and sizes[j] == 1:
                    continue
                if j < m - 1 and sizes[j + 1] >= B:
                    continue
                q = start + sizes[j] - 1
                j0 = j
            if move != 2:
                to = j - 1 if move == 0 else j + 1
                for i in range(m):
                    saved[i] = sizes[i]
                if to == m:
                    sizes[m] = 0
                    m += 1
                sizes[to] += 1
                sizes[j] -= 1
                if sizes[j] == 0:
                    m = _remove_batch(sizes, m, j)
            order[p], order[q] = order[q], order[p]
            t_wait[j0], t_total[j0], t_met[j0] = wait[j0], total[j0], met[j0]
            k, t = evaluate_from(order, sizes, m, execution, slack, j0, t_wait, t_total, t_met)
            evals += 1
            f_new = k / t * scale
            accept = f_new >= f
            if not accept:
                rng, u = _uniform(rng)
                accept = u < math.exp((f_new - f) / T)
            if accept:
                f = f_new
                for i in range(j0 + 1, m + 1):
                    wait[i], total[i], met[i] = t_wait[i], t_total[i], t_met[i]
                if f > best_f:
                    best_o[:] = order
                    best_s[:] = sizes
                    best_m, best_f = m, f
            else:
                order[p], order[q] = order[q], order[p]
                if move != 2:
                    for i in range(old_m):
                        sizes[i] = saved[i]
                    for i in range(old_m, m):
                        sizes[i] = 0
                    m = old_m
        T *= decay
    return best_o, best_s, best_m, best_f / scale, evals


def compositions(n: int, max_batch: int) -> np.ndarray:
    """Every split of ``n`` into consecutive batches of 1..max_batch, as zero-padded rows."""
    rows = []
    for cuts in itertools.product((0, 1), repeat=max(n - 1, 0)):
        sizes, run = [], 1
        for c in cuts:
            if c:
                sizes.append(run)
                run = 1
            else:
                run += 1
        sizes.append(run)
        if max(sizes) <= max_batch:
            rows.append(sizes + [0] * (n - len(sizes)))
    return np.array(rows, dtype=np.int64)


#: Largest N the exhaustive search accepts (N! * 2^(N-1) evaluations).
EXHAUSTIVE_MAX_N = 10


def exhaustive(problem: MappingProblem) -> SearchResult:
    """The optimum over all permutations x all batch splits."""
    if problem.n > EXHAUSTIVE_MAX_N:
        raise SchedlabError(f"exhaustive search is limited to N <= {EXHAUSTIVE_MAX_N}, got {problem.n}")
    comps = compositions(problem.n, problem.max_batch)
    order, sizes, g, evals = _exhaustive_kernel(problem.n, comps, *problem.arrays)
    m = int(np.count_nonzero(sizes))
    return SearchResult(Mapping(order, sizes[:m]), float(g), evaluations=int(evals))


@numba.njit(cache=True, nogil=True)
def _exhaustive_kernel(n, comps, execution, slack):
    """Heap's algorithm over permutations; every composition for each."""
    perm = np.arange(n)
    c = np.zeros(n, dtype=np.int64)
    counts = np.empty(comps.shape[0], dtype=np.int64)
    for k in range(comps.shape[0]):
        counts[k] = np.count_nonzero(comps[k])
    best_g, best_o, best_s = -1.0, perm.copy(), comps[0].copy()
    wait, total, met_ = np.zeros(n + 1), np.zeros(n + 1), np.zeros(n + 1, dtype=np.int64)
    evals = 0
    i = 0
    first = True
    while True:
        if not first:
            while i < n and c[i] >= i:
                c[i] = 0
                i += 1
            if i >= n:
                break
            if i % 2 == 0:
                perm[0], perm[i] = perm[i], perm[0]
            else:
                perm[c[i]], perm[i] = perm[i], perm[c[i]]
            c[i] += 1
            i = 0
        first = False
        for k in range(comps.shape[0]):
            met, tot = evaluate_from(perm, comps[k], counts[k], execution, slack, 0, wait, total, met_)
            evals += 1
            g = met / tot
            if g > best_g:
                best_g = g
                best_o[:] = perm
                best_s[:] = comps[k]
    return best_o, best_s, best_g, evals
