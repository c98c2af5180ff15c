"""Synthetic requests with uniformly random prompt and output lengths."""

from __future__ import annotations

import numpy as np
import pandas as pd


def random_lengths_trace(
    arrivals: np.ndarray, *, rng: np.random.Generator, prompt: tuple[int, int], output: tuple[int, int]
) -> pd.DataFrame:
    """A trace at ``arrivals`` whose lengths are drawn uniformly from the half-open ranges
    ``prompt`` and ``output`` (prompts first, then outputs, from ``rng``)."""
    n = len(arrivals)
    return pd.DataFrame(
        {
            "request_id": np.arange(n),
            "arrival_s": np.asarray(arrivals, float),
            "prompt_tokens": rng.integers(*prompt, n),
            "output_tokens": rng.integers(*output, n),
        }
    )
