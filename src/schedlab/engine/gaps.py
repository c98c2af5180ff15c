"""Bounded-memory distribution of inter-token gaps (ITL/TBT) over a whole run.

Gaps fall into log-spaced bins (400 per decade from 1 us to 1000 s, so a percentile read
back is within 0.6% of the exact one) however many tokens a run generates. A histogram has
one row of bins per *slot* (a request class; the engine keeps one more for warm-up requests,
which are simulated but not measured). Gaps are staged in a fixed-size buffer with their slot
and binned in bulk, which keeps the per-step cost to a copy. A NaN gap (a request's first
token, which has no previous one) is skipped.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

_LO, _DECADES, _PER_DECADE = -6.0, 9, 400
_NBINS = _DECADES * _PER_DECADE
_BUFFER = 1 << 16


class GapHistogram:
    def __init__(self, n_slots: int = 1) -> None:
        self._counts = np.zeros((n_slots, _NBINS + 2), dtype=np.int64)  # [underflow, bins..., overflow]
        self._buf = np.empty(_BUFFER)
        self._weights = np.empty(_BUFFER, dtype=np.int64)
        self._slots = np.zeros(_BUFFER, dtype=np.int64)
        self._n = 0

    def _flush(self) -> None:
        n = self._n
        if n:
            gaps, weights, slots = self._buf[:n], self._weights[:n], self._slots[:n]
            known = ~np.isnan(gaps)
            with np.errstate(divide="ignore"):
                pos = (np.log10(np.maximum(gaps[known], 1e-300)) - _LO) * _PER_DECADE
            bins = np.clip(np.floor(pos).astype(np.int64) + 1, 0, _NBINS + 1)
            flat = slots[known] * (_NBINS + 2) + bins
            self._counts += np.bincount(flat, weights=weights[known], minlength=self._counts.size).astype(
                np.int64
            ).reshape(self._counts.shape)
            self._n = 0

    def staging(self, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """The staging buffer, its weights, its slots and its fill, with room for ``k`` more
        gaps; a writer that adds gaps there then commits the new fill."""
        if self._n + k > self._buf.size:
            self._flush()
            if k > self._buf.size:
                self._buf, self._weights = np.empty(k), np.empty(k, dtype=np.int64)
                self._slots = np.zeros(k, dtype=np.int64)
        return self._buf, self._weights, self._slots, self._n

    def commit(self, fill: int) -> None:
        """The staging buffer now holds ``fill`` gaps (see :meth:`staging`)."""
        self._n = fill

    def add_repeated(self, gaps: np.ndarray, times: int, slot: int = 0) -> None:
        """Add each gap of the 1-D float array ``gaps`` ``times`` times (one per request
        decoding in lock step) to ``slot``."""
        buf, weights, slots, n = self.staging(gaps.size)
        buf[n : n + gaps.size] = gaps
        weights[n : n + gaps.size] = times
        slots[n : n + gaps.size] = slot
        self.commit(n + gaps.size)

    def add(self, gaps: np.ndarray, slot: int = 0) -> None:
        self.add_repeated(gaps, 1, slot)

    def select(self, slots: Sequence[int]) -> "GapHistogram":
        """A one-slot histogram of the gaps of ``slots`` together."""
        self._flush()
        out = GapHistogram()
        out._counts[0] = self._counts[list(slots)].sum(axis=0)
        return out

    @classmethod
    def merged(cls, histograms: Sequence["GapHistogram"]) -> "GapHistogram":
        """A one-slot histogram of the gaps of all ``histograms`` together."""
        out = cls()
        for h in histograms:
            out._counts[0] += h.counts
        return out

    @classmethod
    def summed(cls, histograms: Sequence["GapHistogram"]) -> "GapHistogram":
        """The gaps of all ``histograms`` (each of the same slots) together, slot by slot."""
        out = cls(histograms[0]._counts.shape[0])
        for h in histograms:
            h._flush()
            out._counts += h._counts
        return out

    @property
    def counts(self) -> np.ndarray:
        """Bin counts over every slot."""
        self._flush()
        return self._counts.sum(axis=0)

    @property
    def total(self) -> int:
        return int(self.counts.sum())

    def quantile(self, q: float) -> float:
        """The q-quantile (0..1) at the geometric centre of its bin; NaN when empty."""
        counts = self.counts
        total = int(counts.sum())
        if total == 0:
            return float("nan")
        b = int(np.searchsorted(np.cumsum(counts), q * total, side="left"))
        b = min(max(b, 1), _NBINS)
        return float(10 ** (_LO + (b - 0.5) / _PER_DECADE))
