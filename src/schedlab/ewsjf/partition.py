"""Refine-and-Prune: prompt-length queues learned from a window of traffic.

A partition is a list of :class:`Band` s, sorted, each a half-open ``[lo, hi)`` interval of
prompt lengths, disjoint from the next (gaps between bands are allowed: the dispatcher's
bubble rules cover them). Three stages on a window of N lengths, O(N log N) for the sort:

1. 1-D k-means (k = 3) on the sorted lengths: clusters are contiguous runs of the sorted data;
2. inside each cluster, split recursively at the largest gap between consecutive distinct
   lengths while it exceeds ``alpha`` times the cluster's mean gap and the cluster is at least
   ``min_width`` tokens wide;
3. while there are more than ``max_queues`` bands, merge the adjacent pair of lowest utility
   ``U = (rho_i + rho_{i+1}) / (|mean_{i+1} - mean_i| + eps)`` (rho: the band's share of the
   window): pairs carrying little traffic for their spread go first, busy bands stay apart.

:func:`adjust` is the online light adjustment between full runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from schedlab.errors import SchedlabError

#: Stage 3's epsilon (tokens): keeps U finite for bands with equal means.
EPS = 1.0


@dataclass(frozen=True)
class Band:
    """Prompt lengths ``lo <= L < hi``; ``count`` and ``mean`` of the window's lengths in it."""

    lo: int
    hi: int
    count: int
    mean: float


def _lengths(lengths) -> np.ndarray:
    x = np.sort(np.asarray(lengths, dtype=np.int64))
    if x.size == 0:
        raise SchedlabError("cannot partition an empty window of prompt lengths")
    if x[0] < 0:
        raise SchedlabError("prompt lengths must be non-negative")
    return x


def _band(x: np.ndarray) -> Band:
    return Band(int(x[0]), int(x[-1]) + 1, int(x.size), float(x.mean()))


def kmeans_cuts(x: np.ndarray, k: int, iters: int = 100) -> list[int]:
    """Indices that cut sorted ``x`` into at most ``k`` 1-D k-means clusters (Lloyd's
    algorithm from quantile centres; deterministic). Empty clusters are dropped."""
    centres = np.unique(np.quantile(x, (np.arange(k) + 0.5) / k))
    cuts = np.zeros(0, dtype=np.int64)
    for _ in range(iters):
        cuts = np.searchsorted(x, (centres[:-1] + centres[1:]) / 2.0, side="right")
        parts = [p for p in np.split(x, cuts) if p.size]
        new = np.array([p.mean() for p in parts])
        if new.size == centres.size and np.allclose(new, centres):
            break
        centres = new
    return sorted({int(c) for c in cuts if 0 < c < x.size})


def kmeans_bands(lengths, k: int) -> list[Band]:
    """Bands of a plain k-means partition (the queue-count baselines)."""
    x = _lengths(lengths)
    return [_band(p) for p in np.split(x, kmeans_cuts(x, k))]


def refine(x: np.ndarray, alpha: float, min_width: int) -> list[np.ndarray]:
    """Stage 2 on one sorted cluster: split at large gaps until none is left."""
    out, stack = [], [x]
    while stack:
        part = stack.pop()
        values = np.unique(part)
        if values.size < 3 or values[-1] - values[0] < min_width:
            out.append(part)
            continue
        gaps = np.diff(values)
        i = int(np.argmax(gaps))
        if gaps[i] <= alpha * gaps.mean():
            out.append(part)
            continue
        cut = int(np.searchsorted(part, values[i + 1], side="left"))
        stack += [part[cut:], part[:cut]]
    return sorted(out, key=lambda p: int(p[0]))


def prune(bands: list[Band], max_queues: int, total: int | None = None) -> list[Band]:
    """Stage 3: merge adjacent bands of lowest utility until at most ``max_queues`` remain."""
    if max_queues < 1:
        raise SchedlabError(f"max_queues must be >= 1, got {max_queues}")
    bands = list(bands)
    total = total or sum(b.count for b in bands)
    while len(bands) > max_queues:
        rho = np.array([b.count for b in bands], dtype=float) / total
        means = np.array([b.mean for b in bands])
        utility = (rho[:-1] + rho[1:]) / (np.abs(np.diff(means)) + EPS)
        i = int(np.argmin(utility))
        a, b = bands[i], bands[i + 1]
        n = a.count + b.count
        bands[i : i + 2] = [Band(a.lo, b.hi, n, (a.mean * a.count + b.mean * b.count) / n)]
    return bands


def refine_and_prune(lengths, *, alpha: float = 2.0, max_queues: int = 32, min_width: int = 16, k: int = 3) -> list[Band]:
    """The full strategic partition of a window of prompt lengths."""
    if not alpha > 1.0:
        raise SchedlabError(f"alpha must be > 1, got {alpha}")
    x = _lengths(lengths)
    refined = [p for cluster in np.split(x, kmeans_cuts(x, k)) for p in refine(cluster, alpha, min_width)]
    bands = prune([_band(p) for p in refined], max_queues, total=x.size)
    check(bands, max_queues)
    return bands


def adjust(bands: list[Band], recent, rate: float = 0.25) -> list[Band]:
    """Light online adjustment from a short window of recent lengths.

    Each recent length is credited to the band holding it, or in a gap to the nearer
    neighbour; each credited band's edges move a fraction ``rate`` toward the min and max of
    its recent lengths and its mean likewise. A forward pass keeps the bands ordered and
    disjoint. The number of bands is unchanged.
    """
    if not bands:
        return []
    x = np.sort(np.asarray(recent, dtype=np.int64))
    lo = np.array([b.lo for b in bands], dtype=float)
    hi = np.array([b.hi for b in bands], dtype=float)
    # Nearest band: inside one, or the closer edge across a gap.
    i = np.clip(np.searchsorted(lo, x, side="right") - 1, 0, len(bands) - 1)
    outside = x >= hi[i]
    nxt = np.minimum(i + 1, len(bands) - 1)
    closer_next = outside & (nxt != i) & ((lo[nxt] - x) < (x - hi[i] + 1))
    owner = np.where(closer_next, nxt, i)
    out, prev_hi = [], None
    for j, b in enumerate(bands):
        mine = x[owner == j]
        new_lo, new_hi, mean = float(b.lo), float(b.hi), b.mean
        if mine.size:
            new_lo += rate * (mine[0] - new_lo)
            new_hi += rate * (mine[-1] + 1 - new_hi)
            mean += rate * (float(mine.mean()) - mean)
        lo_j = int(round(new_lo)) if prev_hi is None else max(int(round(new_lo)), prev_hi)
        hi_j = max(int(round(new_hi)), lo_j + 1)
        out.append(Band(lo_j, hi_j, b.count, mean))
        prev_hi = hi_j
    return out


def check(bands: list[Band], max_queues: int | None = None) -> None:
    """Raise unless ``bands`` are non-empty intervals, sorted and disjoint (and few enough)."""
    for a, b in zip(bands, bands[1:]):
        if a.hi > b.lo:
            raise SchedlabError(f"bands overlap or are unsorted: [{a.lo}, {a.hi}) and [{b.lo}, {b.hi})")
    if any(b.lo >= b.hi for b in bands):
        raise SchedlabError("a band is empty")
    if max_queues is not None and len(bands) > max_queues:
        raise SchedlabError(f"{len(bands)} bands exceed max_queues={max_queues}")
