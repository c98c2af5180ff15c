"""Multilingual ASR traffic: per-language request pools mixed by share (paper A's future work).

A language's pool comes from its real utterance table when one is available (FLEURS test, with
Whisper text tokens counted as ``schedlab fit kappa`` counts them). Otherwise it is a labelled
*stand-in* built from English utterances: real LibriSpeech durations, and text tokens scaled by
a token-rate ratio ``r = kappa_lang / kappa_en``. That ratio is a parameter of the study, not a
measurement; scaling each utterance keeps the real per-utterance spread around the line.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import numpy as np
import pandas as pd

from schedlab.data import fleurs
from schedlab.data.sources import DataUnavailable
from schedlab.data.whisper_tokens import count_text_tokens
from schedlab.errors import SchedlabError
from schedlab.workload.asr import asr_trace


def utterance_pool(table: pd.DataFrame) -> pd.DataFrame:
    """A language's pool from its utterance table (``duration_s``, ``text_tokens``): every
    utterance is a request whose output is its text tokens plus the closing <|endoftext|>."""
    text = table["text_tokens"].to_numpy(np.int64)
    return pd.DataFrame(
        {
            "audio_duration_s": table["duration_s"].to_numpy(float),
            "text_tokens": text,
            "output_tokens": text + 1,
        }
    )


def stand_in_pool(english: pd.DataFrame, ratio: float) -> pd.DataFrame:
    """A stand-in pool for a language with ``ratio`` times English's token rate: English
    durations, each utterance's text tokens scaled by ``ratio`` (rounded, at least 1)."""
    if not (ratio > 0 and math.isfinite(ratio)):
        raise SchedlabError(f"token-rate ratio must be positive and finite, got {ratio}")
    pool = utterance_pool(english)
    text = np.maximum(1, np.rint(ratio * pool["text_tokens"].to_numpy(float))).astype(np.int64)
    return pool.assign(text_tokens=text, output_tokens=text + 1)


def fleurs_tables(languages: Iterable[str]) -> dict[str, pd.DataFrame | str]:
    """FLEURS test tables with ``text_tokens`` for the languages that load; for the others,
    the reason they did not (offline, FLEURS is not in the mirror)."""
    out: dict[str, pd.DataFrame | str] = {}
    for lang in languages:
        try:
            table = fleurs.load_test(lang)
        except DataUnavailable as exc:
            out[lang] = f"FLEURS {lang} not available offline ({exc})"
            continue
        out[lang] = table.assign(text_tokens=count_text_tokens(table["transcript"]))
    return out


def check_shares(shares: Mapping[str, float]) -> None:
    """Shares are non-negative and sum to 1."""
    values = np.array(list(shares.values()), float)
    if values.size == 0 or not np.all(values >= 0) or not math.isclose(values.sum(), 1.0, abs_tol=1e-9):
        raise SchedlabError(f"language shares must be non-negative and sum to 1, got {dict(shares)}")


def mix_trace(
    pools: Mapping[str, pd.DataFrame],
    shares: Mapping[str, float],
    arrivals: np.ndarray,
    *,
    rng: np.random.Generator,
) -> pd.DataFrame:
    """A trace whose requests draw their language by ``shares`` and then a row of that
    language's pool (seeded permutations, cycled, output capped as :func:`asr_trace` does).

    The draws depend only on the pools' sizes, so stand-in pools of any ratio give the same
    languages, durations and arrivals.
    """
    check_shares(shares)
    missing = [lang for lang in shares if lang not in pools]
    if missing:
        raise SchedlabError(f"no request pool for language(s) {', '.join(missing)}")
    arrivals = np.asarray(arrivals, float)
    if arrivals.size == 0:
        raise SchedlabError("a multilingual trace needs at least one arrival")
    langs = list(shares)
    which = rng.choice(len(langs), size=arrivals.size, p=[shares[lang] for lang in langs])
    parts = []
    for i, lang in enumerate(langs):
        at = np.flatnonzero(which == i)
        if at.size:
            part = asr_trace(pools[lang], arrivals[at], rng=rng).set_axis(at)
            parts.append(part.assign(language=lang))
    trace = pd.concat(parts).sort_index().reset_index(drop=True)
    trace["request_id"] = np.arange(len(trace), dtype=np.int64)
    return trace
