"""Job-size estimates the policies order by (paper A: n_hat from audio duration)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd


def size_estimate(duration_s: float | None, language: str, kappa: dict[str, float], max_tokens: int) -> float:
    """``n_hat = max(1, int(duration_s * kappa[language]))``.

    A request without an audio duration, or in a language with no fitted kappa, falls back to
    its ``max_tokens``, as the paper's engine does.
    """
    k = kappa.get(language)
    if duration_s is None or k is None or not math.isfinite(duration_s):
        return float(max_tokens)
    return float(max(1, math.floor(duration_s * k)))


def size_hints(trace: pd.DataFrame) -> list[dict]:
    """Per request, what a client sends for :func:`size_estimate` (vLLM's ``extra_args``):
    its language, and its audio duration when it has one."""
    n = len(trace)
    dur = trace["audio_duration_s"].to_numpy(float) if "audio_duration_s" in trace else np.full(n, np.nan)
    lang = trace["language"].to_numpy() if "language" in trace else np.full(n, "en")
    return [
        {"language": str(l), **({"audio_duration_s": float(d)} if math.isfinite(d) else {})}
        for d, l in zip(dur, lang)
    ]


def job_sizes(trace: pd.DataFrame, kappa: dict[str, float]) -> np.ndarray:
    """:func:`size_estimate` for every request of a trace, from the same hints a vLLM client
    sends; its ``max_tokens`` is its forced output length (what vLLM's scheduler sees)."""
    max_tokens = trace["output_tokens"].to_numpy(np.int64)
    return np.array(
        [
            size_estimate(h.get("audio_duration_s"), h["language"], kappa, m)
            for h, m in zip(size_hints(trace), max_tokens)
        ],
        dtype=float,
    )
