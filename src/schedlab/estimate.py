"""Job-size estimates the policies order by (paper A: n_hat from audio duration).

The duration behind n_hat is the clip's raw length (``audio_duration_s``) or, with
``duration="vad"``, its speech-active time from a voice-activity detector
(``speech_duration_s``, see :mod:`schedlab.data.vad`), which leading or trailing silence
does not inflate.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from schedlab.errors import SchedlabError

#: Where a request's duration comes from: the raw clip length or its speech-active time.
DURATION_SOURCES = ("raw", "vad")


def size_estimate(hint: dict, kappa: dict[str, float], max_tokens: int) -> float:
    """The job size a policy orders by, from what a client sends (:func:`size_hints`; a
    server checks it first with :func:`schedlab.validation.hints.checked_hint`).

    A ``priority`` (lower first; paper D's batch index) is the size itself. Otherwise
    ``n_hat = max(1, int(duration * kappa[language]))``, where the duration is the hint's
    ``speech_duration_s`` when it sends one, else its ``audio_duration_s``; a request without
    either, or in a language with no fitted kappa, falls back to its ``max_tokens``, as the
    paper's engine does.
    """
    if "priority" in hint:
        return float(hint["priority"])
    duration_s = hint.get("speech_duration_s", hint.get("audio_duration_s"))
    k = kappa.get(hint.get("language", "en"))
    if duration_s is None or k is None or not math.isfinite(duration_s):
        return float(max_tokens)
    return float(max(1, math.floor(duration_s * k)))


def size_hints(trace: pd.DataFrame, duration: str = "raw") -> list[dict]:
    """Per request, what a client sends (vLLM's ``extra_args``): for :func:`size_estimate`, its
    language, its audio duration when it has one, and its priority when the trace sets one;
    for SLO-aware schedulers, its ``slo_class`` and ``tbt_target_s`` when the trace has them;
    for a policy that reads them (:mod:`schedlab.validation.request_fields`), its ``tenant``,
    its end-to-end target ``e2e_target_s`` (the trace's ``slo_e2e_s``) and its
    ``predicted_output_tokens`` when the trace has them.
    With ``duration="vad"`` the trace must have ``speech_duration_s``, which the hint then
    carries too (a request whose value is missing keeps only its raw duration)."""
    n = len(trace)
    if duration not in DURATION_SOURCES:
        raise SchedlabError(f"unknown duration source {duration!r}; choose raw or vad")
    if duration == "vad" and "speech_duration_s" not in trace:
        raise SchedlabError("duration source 'vad' needs a speech_duration_s column in the trace")
    dur = trace["audio_duration_s"].to_numpy(float) if "audio_duration_s" in trace else np.full(n, np.nan)
    speech = trace["speech_duration_s"].to_numpy(float) if duration == "vad" else np.full(n, np.nan)
    lang = trace["language"].to_numpy() if "language" in trace else np.full(n, "en")
    prio = trace["priority"].to_numpy(float) if "priority" in trace else np.full(n, np.nan)
    cls = trace["slo_class"].astype(str).to_numpy() if "slo_class" in trace else np.full(n, None)
    tbt = trace["tbt_target_s"].to_numpy(float) if "tbt_target_s" in trace else np.full(n, np.nan)
    tenant = (trace["tenant"].where(trace["tenant"].notna(), "").astype(str).to_numpy() if "tenant" in trace
              else np.full(n, None))
    e2e = trace["slo_e2e_s"].to_numpy(float) if "slo_e2e_s" in trace else np.full(n, np.nan)
    predicted = (trace["predicted_output_tokens"].to_numpy(float) if "predicted_output_tokens" in trace
                 else np.full(n, np.nan))
    return [
        {
            "language": str(l),
            **({"audio_duration_s": float(d)} if math.isfinite(d) else {}),
            **({"speech_duration_s": float(v)} if math.isfinite(v) else {}),
            **({"priority": float(p)} if math.isfinite(p) else {}),
            **({"slo_class": c} if c is not None else {}),
            **({"tbt_target_s": float(t)} if math.isfinite(t) else {}),
            **({"tenant": u} if u is not None else {}),
            **({"e2e_target_s": float(g)} if math.isfinite(g) else {}),
            **({"predicted_output_tokens": float(o)} if math.isfinite(o) else {}),
        }
        for d, v, l, p, c, t, u, g, o in zip(dur, speech, lang, prio, cls, tbt, tenant, e2e, predicted)
    ]


def job_sizes(trace: pd.DataFrame, kappa: dict[str, float], duration: str = "raw") -> np.ndarray:
    """:func:`size_estimate` for every request of a trace, from the same hints a vLLM client
    sends (``duration`` as in :func:`size_hints`); its ``max_tokens`` is its forced output
    length (what vLLM's scheduler sees)."""
    max_tokens = trace["output_tokens"].to_numpy(np.int64)
    if duration == "raw" and "priority" not in trace:
        # no hint carries a priority: each size is floor(duration x kappa of its language), at
        # least 1, or its max_tokens where the request has no audio or its language no kappa,
        # as size_estimate gives it, in one pass instead of a hint per request
        if "audio_duration_s" not in trace:
            return max_tokens.astype(float)
        lang = trace["language"].astype(str) if "language" in trace else pd.Series("en", index=trace.index)
        k = lang.map(lambda name: kappa.get(name, np.nan)).to_numpy(float)
        dur = trace["audio_duration_s"].to_numpy(float)
        known = np.isfinite(dur) & np.isfinite(k)
        return np.where(known, np.maximum(1.0, np.floor(np.where(known, dur * k, 0.0))), max_tokens.astype(float))
    return np.array(
        [
            size_estimate(h, kappa, m)
            for h, m in zip(size_hints(trace, duration), max_tokens)
        ],
        dtype=float,
    )
