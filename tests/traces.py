"""Synthetic traces the engine, paper C and vLLM tests share."""

from __future__ import annotations

import numpy as np
import pandas as pd


def two_class_trace(n: int = 300, rate: float = 4.0, seed: int = 0, share: float = 0.3, *, prompt=(1, 3000),
                    output=(1, 200), targets=(0.1, 0.5), shuffled_ids: bool = False) -> pd.DataFrame:
    """Poisson LLM requests of two classes (paper C's shape): ``paying`` with probability
    ``share`` and the first TBT target, else ``free``; ids shuffled and non-contiguous if asked."""
    rng = np.random.default_rng(seed)
    paying = rng.random(n) < share
    ids = 1000 + rng.permutation(n) * 3 if shuffled_ids else np.arange(n)
    return pd.DataFrame({
        "request_id": ids,
        "arrival_s": np.cumsum(rng.exponential(1 / rate, n)),
        "prompt_tokens": rng.integers(*prompt, n),
        "output_tokens": rng.integers(*output, n),
        "slo_class": np.where(paying, "paying", "free"),
        "tbt_target_s": np.where(paying, *targets),
    })
