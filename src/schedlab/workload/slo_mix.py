"""Paper D's workload: pending sets of an even mix of chat and code requests.

Lengths are drawn from the chat and code pools (see :mod:`schedlab.data.conversations`),
keeping requests whose prompt plus output stays under ``max_total`` tokens (the paper: 2k,
where its latency regressions hold). Every request is pending at the decision (arrival 0).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from schedlab.errors import SchedlabError

MAX_TOTAL = 2000


def eligible(pool: pd.DataFrame, max_total: int = MAX_TOTAL) -> pd.DataFrame:
    """Pool rows whose prompt + output is under ``max_total`` tokens."""
    keep = pool[(pool["prompt_tokens"] + pool["output_tokens"]) < max_total]
    if keep.empty:
        raise SchedlabError(f"no request of the pool is under {max_total} tokens")
    return keep.reset_index(drop=True)


def slo_mix_trace(
    chat: pd.DataFrame, code: pd.DataFrame, n: int, rng: np.random.Generator, max_total: int = MAX_TOTAL
) -> pd.DataFrame:
    """``n`` requests, alternately chat and code (chat first), lengths drawn with replacement."""
    if n < 1:
        raise SchedlabError(f"need at least one request, got {n}")
    pools = {"chat": eligible(chat, max_total), "code": eligible(code, max_total)}
    tasks = np.where(np.arange(n) % 2 == 0, "chat", "code")
    rows = [pools[t].iloc[int(rng.integers(len(pools[t])))] for t in tasks]
    return pd.DataFrame(
        {
            "request_id": np.arange(n),
            "arrival_s": np.zeros(n),
            "prompt_tokens": np.array([r["prompt_tokens"] for r in rows], dtype=np.int64),
            "output_tokens": np.array([r["output_tokens"] for r in rows], dtype=np.int64),
            "task": tasks,
            "slo_class": tasks,
        }
    )
