"""Per-request timing a backend records while it runs, and the results table it becomes."""

from __future__ import annotations

import numba
import numpy as np
import pandas as pd

from schedlab.sim.gaps import GapHistogram

#: Trace columns carried into the results table when present.
PASSTHROUGH = ("audio_duration_s", "language", "task")


class RequestLog:
    """Timestamps and token-gap statistics of every request of a trace, by trace position."""

    def __init__(self, trace: pd.DataFrame) -> None:
        n = len(trace)
        self.trace = trace
        self.first_sched = np.full(n, np.nan)
        self.first_tok = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.last_tok = np.full(n, np.nan)
        self.max_gap = np.zeros(n)
        self.preemptions = np.zeros(n, dtype=np.int64)
        self.gaps = GapHistogram()

    def scheduled(self, idx, t: float) -> None:
        """First admission of each request in ``idx`` (later re-admissions are ignored)."""
        self.first_sched[idx] = np.fmin(self.first_sched[idx], t)

    def tokens(self, idx: np.ndarray, t: float) -> None:
        """Each request in the index array ``idx`` emitted one token at time ``t``."""
        buf, weights, n = self.gaps.staging(idx.size)
        self.gaps.commit(_tokens(idx, t, self.first_tok, self.last_tok, self.max_gap, buf, weights, n))

    def lockstep(self, idx: np.ndarray, ends: np.ndarray, dts: np.ndarray) -> None:
        """Every request in ``idx`` (each past its first token) emitted one token at each
        time of ``ends``, steps of durations ``dts`` run back to back."""
        buf, weights, n = self.gaps.staging(idx.size)
        self.gaps.commit(_lockstep(idx, ends[0], ends[-1], dts[1:].max(), self.last_tok, self.max_gap, buf, weights, n))
        self.gaps.add_repeated(dts[1:], idx.size)

    def frame(self) -> pd.DataFrame:
        """The per-request results table of the contract (see :mod:`schedlab.contracts`)."""
        trace = self.trace
        output = trace["output_tokens"].to_numpy(np.int64)
        out = pd.DataFrame(
            {
                "request_id": trace["request_id"].to_numpy(np.int64),
                "arrival_s": trace["arrival_s"].to_numpy(float),
                "first_scheduled_s": self.first_sched,
                "first_token_s": self.first_tok,
                "finish_s": self.finish,
                "prompt_tokens": trace["prompt_tokens"].to_numpy(np.int64),
                "output_tokens": output,
                "preemptions": self.preemptions,
                "class": trace["slo_class"].to_numpy() if "slo_class" in trace else "all",
                "max_gap_s": self.max_gap,
                # the gaps of a request telescope: their sum is last token - first token
                "mean_gap_s": np.where(output > 1, (self.last_tok - self.first_tok) / np.maximum(output - 1, 1), np.nan),
            }
        )
        for col in PASSTHROUGH:
            if col in trace:
                out[col] = trace[col].to_numpy()
        return out


@numba.njit(cache=True, nogil=True)
def _tokens(idx, t, first_tok, last_tok, max_gap, buf, weights, n):
    """One token per request of ``idx`` at ``t``: gaps staged from ``buf[n]`` on (a first
    token has none); returns the new fill."""
    for r in idx:
        if np.isnan(last_tok[r]):
            first_tok[r] = t
        else:
            g = t - last_tok[r]
            buf[n], weights[n] = g, 1
            n += 1
            if g > max_gap[r]:
                max_gap[r] = g
        last_tok[r] = t
    return n


@numba.njit(cache=True, nogil=True)
def _lockstep(idx, t_first, t_last, longest_step, last_tok, max_gap, buf, weights, n):
    """The per-request part of a lock-step stretch: each request's gap to its first token
    there (staged), its longest gap, its last token time; returns the new fill."""
    for r in idx:
        g = t_first - last_tok[r]
        buf[n], weights[n] = g, 1
        n += 1
        max_gap[r] = max(max_gap[r], g, longest_step)
        last_tok[r] = t_last
    return n
