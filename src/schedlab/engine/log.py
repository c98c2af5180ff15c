"""Per-request timing every backend records while it runs, and the results table it becomes."""

from __future__ import annotations

import copy

import numba
import numpy as np
import pandas as pd

from schedlab.engine.gaps import GapHistogram

#: Trace columns carried into the results table when present.
PASSTHROUGH = ("audio_duration_s", "language", "task")


class RequestLog:
    """Timestamps and token-gap statistics of every request of a trace, by trace position.

    Gaps are kept per request class (``slo_class``; one class ``all`` without it); requests
    arriving before ``warmup_s`` are logged but their gaps go to a slot no summary reads."""

    def __init__(self, trace: pd.DataFrame, warmup_s: float = 0.0) -> None:
        n = len(trace)
        self.trace = trace
        self.first_sched = np.full(n, np.nan)
        self.first_tok = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.last_tok = np.full(n, np.nan)
        self.max_gap = np.zeros(n)
        self.preemptions = np.zeros(n, dtype=np.int64)
        self.cached = np.zeros(n, dtype=np.int64)  # prompt tokens served by the prefix cache
        classes = trace["slo_class"].astype(str).to_numpy() if "slo_class" in trace else np.full(n, "all")
        self.class_names = sorted(set(classes.tolist())) or ["all"]
        self.measured = trace["arrival_s"].to_numpy(float) >= warmup_s
        # each request's gap slot: its class, or the last slot (warm-up, not measured)
        self.slot = np.where(self.measured, np.searchsorted(self.class_names, classes), len(self.class_names))
        self._gaps = GapHistogram(len(self.class_names) + 1)
        self._per_slot = np.zeros(len(self.class_names) + 1, dtype=np.int64)  # lockstep's scratch

    def sharing(self) -> "RequestLog":
        """A log that writes this one's per-request arrays, with token gaps of its own (a
        replica of a cluster: one table of requests, each replica's gaps apart)."""
        other = copy.copy(self)
        other._gaps = GapHistogram(len(self.class_names) + 1)
        return other

    def gather(self, logs: list["RequestLog"]) -> None:
        """This log's token gaps become those of ``logs`` together (logs sharing its arrays,
        each with gaps of its own: the servers of a routed replay)."""
        self._gaps = GapHistogram.summed([log._gaps for log in logs])

    @property
    def gaps(self) -> GapHistogram:
        """The measured requests' token gaps."""
        return self._gaps.select(range(len(self.class_names)))

    @property
    def class_gaps(self) -> dict[str, GapHistogram]:
        """The measured requests' token gaps per class."""
        return {name: self._gaps.select([k]) for k, name in enumerate(self.class_names)}

    def scheduled(self, idx, t: float) -> None:
        """First admission of each request in ``idx`` (later re-admissions are ignored)."""
        self.first_sched[idx] = np.fmin(self.first_sched[idx], t)

    def tokens(self, idx: np.ndarray, t: float) -> None:
        """Each request in the index array ``idx`` emitted one token at time ``t``."""
        buf, weights, slots, n = self._gaps.staging(idx.size)
        self._gaps.commit(
            _tokens(idx, t, self.first_tok, self.last_tok, self.max_gap, self.slot, buf, weights, slots, n)
        )

    def lockstep(self, idx: np.ndarray, ends: np.ndarray, dts: np.ndarray) -> None:
        """Every request in ``idx`` (each past its first token) emitted one token at each
        time of ``ends``, steps of durations ``dts`` run back to back."""
        n_slots = len(self.class_names) + 1
        buf, weights, slots, n = self._gaps.staging(idx.size + n_slots * (dts.size - 1))
        self._gaps.commit(_lockstep(idx, ends[0], ends[-1], dts, self.last_tok, self.max_gap, self.slot,
                                    self._per_slot, buf, weights, slots, n))

    def frame(self, output_s: float = 0.0) -> pd.DataFrame:
        """The per-request results table of the contract (see :mod:`schedlab.contracts`), each
        token ``output_s`` later than it was logged (the way out to the client)."""
        trace = self.trace
        output = trace["output_tokens"].to_numpy(np.int64)
        out = pd.DataFrame(
            {
                "request_id": trace["request_id"].to_numpy(np.int64),
                "arrival_s": trace["arrival_s"].to_numpy(float),
                "first_scheduled_s": self.first_sched,
                "first_token_s": self.first_tok + output_s,
                "finish_s": self.finish + output_s,
                "prompt_tokens": trace["prompt_tokens"].to_numpy(np.int64),
                "output_tokens": output,
                "preemptions": self.preemptions,
                "cached_tokens": self.cached,
                "class": trace["slo_class"].to_numpy() if "slo_class" in trace else "all",
                "max_gap_s": self.max_gap,
                # the gaps of a request telescope: their sum is last token - first token
                "mean_gap_s": np.where(output > 1, (self.last_tok - self.first_tok) / np.maximum(output - 1, 1), np.nan),
            }
        )
        out["measured"] = self.measured
        for col in PASSTHROUGH:
            if col in trace:
                out[col] = trace[col].to_numpy()
        return out


@numba.njit(cache=True, nogil=True)
def _tokens(idx, t, first_tok, last_tok, max_gap, slot, buf, weights, slots, n):
    """One token per request of ``idx`` at ``t``: gaps staged from ``buf[n]`` on (a first
    token has none); returns the new fill."""
    for r in idx:
        if np.isnan(last_tok[r]):
            first_tok[r] = t
        else:
            g = t - last_tok[r]
            buf[n], weights[n], slots[n] = g, 1, slot[r]
            n += 1
            if g > max_gap[r]:
                max_gap[r] = g
        last_tok[r] = t
    return n


@numba.njit(cache=True, nogil=True)
def _lockstep(idx, t_first, t_last, dts, last_tok, max_gap, slot, per_slot, buf, weights, slots, n):
    """A lock-step stretch of steps of durations ``dts``: each request's gap to its first
    token there (staged), its longest gap, its last token time; then the gaps between the
    stretch's steps, each staged once per slot with the slot's requests as its weight (the
    histogram counts them alike whatever the order). Returns the new fill."""
    longest_step = dts[1]
    for j in range(2, dts.size):
        if dts[j] > longest_step:
            longest_step = dts[j]
    per_slot[:] = 0
    for r in idx:
        g = t_first - last_tok[r]
        buf[n], weights[n], slots[n] = g, 1, slot[r]
        n += 1
        max_gap[r] = max(max_gap[r], g, longest_step)
        last_tok[r] = t_last
        per_slot[slot[r]] += 1
    for s in range(per_slot.size):
        if per_slot[s]:
            for j in range(1, dts.size):
                buf[n], weights[n], slots[n] = dts[j], per_slot[s], s
                n += 1
    return n
