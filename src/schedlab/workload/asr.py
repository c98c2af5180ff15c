"""Paper A's request populations: LibriSpeech test-clean, the uniform-duration split, bursts.

A *pool* is a table of candidate requests (``audio_duration_s``, ``output_tokens``); a trace
draws from it in seeded permutations (each utterance used once before any repeats) and
attaches arrival times. The workload kinds ``librispeech`` and ``uniform`` draw from the
``utterances`` pool (:func:`schedlab.data.librispeech.utterances`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from schedlab.data.whisper_tokens import PROMPT_TOKENS
from schedlab.errors import SchedlabError
from schedlab.registry import ASR, register_workload
from schedlab.validation.documents import PositiveInt

#: Whisper's decoder positions (``max_target_positions``): prompt + output never exceed this.
WHISPER_MAX_POSITIONS = 448
UNIFORM_DURATIONS = (5, 10, 15, 20, 25, 30)


def librispeech_pool(utterances: pd.DataFrame) -> pd.DataFrame:
    """Every utterance is a request; output length is its Whisper token count."""
    return pd.DataFrame(
        {
            "audio_duration_s": utterances["duration_s"].to_numpy(float),
            "output_tokens": utterances["output_tokens"].to_numpy(np.int64),
        }
    )


def uniform_pool(
    utterances: pd.DataFrame,
    *,
    rng: np.random.Generator,
    clips_per_duration: int = 100,
    durations=UNIFORM_DURATIONS,
) -> pd.DataFrame:
    """Equal shares of each target duration, built by concatenating real clips.

    Clips are taken in a seeded order and concatenated until the target is reached; the last
    clip is trimmed, and its tokens counted in proportion to the part kept (rounded), so the
    output length scales with the speech kept.
    """
    from schedlab.limits import check_fits_in_memory

    check_fits_in_memory(clips_per_duration * len(durations), "the uniform pool")
    dur = utterances["duration_s"].to_numpy(float)
    tok = utterances["output_tokens"].to_numpy(float)
    if not len(dur) or not (dur > 0).any():
        raise SchedlabError("the uniform pool needs utterances longer than 0 s")
    order = rng.permutation(len(dur))
    pos = 0
    rows = []
    for target in np.repeat(np.asarray(durations, float), clips_per_duration):
        acc_d = acc_t = 0.0
        while acc_d < target:
            i = order[pos % len(order)]
            pos += 1
            take = min(dur[i], target - acc_d)
            acc_d += take
            acc_t += tok[i] * take / dur[i]
        rows.append((target, max(1, int(round(acc_t)))))
    pool = pd.DataFrame(rows, columns=["audio_duration_s", "output_tokens"])
    return pool.iloc[rng.permutation(len(pool))].reset_index(drop=True)


def asr_trace(pool: pd.DataFrame, arrivals: np.ndarray, *, rng: np.random.Generator) -> pd.DataFrame:
    """Attach pool rows (seeded permutations, cycled) to arrival times; a pool's
    ``speech_duration_s`` (speech-active seconds) comes along."""
    if len(pool) == 0:
        raise SchedlabError("empty request pool")
    n = len(arrivals)
    reps = -(-n // len(pool))
    rows = np.concatenate([rng.permutation(len(pool)) for _ in range(reps)])[:n]
    picked = pool.iloc[rows]
    out = np.minimum(picked["output_tokens"].to_numpy(np.int64), WHISPER_MAX_POSITIONS - PROMPT_TOKENS)
    return pd.DataFrame(
        {
            "request_id": np.arange(n, dtype=np.int64),
            "arrival_s": np.asarray(arrivals, float),
            "prompt_tokens": np.full(n, PROMPT_TOKENS, dtype=np.int64),
            "output_tokens": out,
            "audio_duration_s": picked["audio_duration_s"].to_numpy(float),
            **({"speech_duration_s": picked["speech_duration_s"].to_numpy(float)} if "speech_duration_s" in pool else {}),
            "language": "en",
        }
    )


@register_workload("librispeech", modality=ASR, pools=("utterances",), paper="A")
def librispeech(draw) -> pd.DataFrame:
    """LibriSpeech test-clean's utterances, each used once before any repeats, at the arrivals
    drawn."""
    return asr_trace(librispeech_pool(draw.pools["utterances"]), draw.arrivals(), rng=draw.rng("lengths"))


@register_workload("uniform", modality=ASR, pools=("utterances",), paper="A")
def uniform(draw, clips_per_duration: PositiveInt = 100) -> pd.DataFrame:
    """Clips of 5 to 30 s in equal shares, each joined from LibriSpeech utterances
    (``clips_per_duration`` of each duration), at the arrivals drawn."""
    pool = uniform_pool(draw.pools["utterances"], rng=draw.rng("pool"), clips_per_duration=clips_per_duration)
    return asr_trace(pool, draw.arrivals(), rng=draw.rng("lengths"))
