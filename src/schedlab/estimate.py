"""Job-size estimates the policies order by (paper A: n_hat from audio duration)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd


def size_estimate(hint: dict, kappa: dict[str, float], max_tokens: int) -> float:
    """The job size a policy orders by, from what a client sends (:func:`size_hints`).

    A ``priority`` (lower first; paper D's batch index) is the size itself. Otherwise
    ``n_hat = max(1, int(audio_duration_s * kappa[language]))``; a request without an audio
    duration, or in a language with no fitted kappa, falls back to its ``max_tokens``, as the
    paper's engine does.
    """
    if "priority" in hint:
        return float(hint["priority"])
    duration_s, k = hint.get("audio_duration_s"), kappa.get(hint.get("language", "en"))
    if duration_s is None or k is None or not math.isfinite(duration_s):
        return float(max_tokens)
    return float(max(1, math.floor(duration_s * k)))


def size_hints(trace: pd.DataFrame) -> list[dict]:
    """Per request, what a client sends for :func:`size_estimate` (vLLM's ``extra_args``):
    its language, its audio duration when it has one, and its priority when the trace sets
    one."""
    n = len(trace)
    dur = trace["audio_duration_s"].to_numpy(float) if "audio_duration_s" in trace else np.full(n, np.nan)
    lang = trace["language"].to_numpy() if "language" in trace else np.full(n, "en")
    prio = trace["priority"].to_numpy(float) if "priority" in trace else np.full(n, np.nan)
    return [
        {
            "language": str(l),
            **({"audio_duration_s": float(d)} if math.isfinite(d) else {}),
            **({"priority": float(p)} if math.isfinite(p) else {}),
        }
        for d, l, p in zip(dur, lang, prio)
    ]


def job_sizes(trace: pd.DataFrame, kappa: dict[str, float]) -> np.ndarray:
    """:func:`size_estimate` for every request of a trace, from the same hints a vLLM client
    sends; its ``max_tokens`` is its forced output length (what vLLM's scheduler sees)."""
    max_tokens = trace["output_tokens"].to_numpy(np.int64)
    return np.array(
        [
            size_estimate(h, kappa, m)
            for h, m in zip(size_hints(trace), max_tokens)
        ],
        dtype=float,
    )
