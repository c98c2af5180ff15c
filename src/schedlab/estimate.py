"""Job-size estimates the policies order by (paper A: n_hat from audio duration)."""

from __future__ import annotations

import numpy as np
import pandas as pd


def job_sizes(trace: pd.DataFrame, kappa: dict[str, float], max_tokens: int) -> np.ndarray:
    """``n_hat = max(1, int(duration_s * kappa[language]))`` per request.

    Requests without an audio duration, or in a language with no fitted kappa, fall back to
    ``max_tokens``, as the paper's engine does.
    """
    n = len(trace)
    sizes = np.full(n, float(max_tokens))
    if "audio_duration_s" not in trace:
        return sizes
    dur = trace["audio_duration_s"].to_numpy(float)
    lang = trace["language"].to_numpy() if "language" in trace else np.full(n, "en")
    k = np.array([kappa.get(l, np.nan) for l in lang], dtype=float)
    known = np.isfinite(dur) & np.isfinite(k)
    sizes[known] = np.maximum(1, np.floor(dur[known] * k[known]))
    return sizes
