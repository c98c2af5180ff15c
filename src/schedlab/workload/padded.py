"""Paper A's VAD extension: LibriSpeech requests whose audio carries silence (the study is
:mod:`schedlab.extensions.vad`).

Each utterance becomes a synthetic clip: a speech part as long as the utterance, cut from the
bundled real speech sample (tiled, from a seeded offset), and, for a seeded ``pad_fraction``
of the utterances, 0..``max_pad_s`` seconds of silence (seeded), split at a seeded point into
a leading and a trailing part. Silence is zeros plus Gaussian noise at ``noise_dbfs`` (-60 dBFS
by default: a quiet room's noise floor, as a real recording has, rather than digital zero).
Output tokens stay the utterance's: they depend on the speech only. ``audio_duration_s`` is
speech plus padding; ``speech_duration_s`` is what WebRTC's detector measures on the clip.

The detector is not exact: it leaves out the pauses of real speech (about 40% of the sample),
a little more on short clips, and a leading silence lets its noise estimate settle, so a padded
clip reads about 0.5 s more speech than the same clip unpadded, whatever the silence's length.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from schedlab.data.vad import speech_sample, speech_seconds
from schedlab.errors import SchedlabError
from schedlab.workload.arrivals import arrival_times
from schedlab.workload.asr import asr_trace

#: The unpadded LibriSpeech clips (where VAD has nothing to remove) and the padded ones.
SCENARIOS = ("librispeech", "padded")


def synth_clip(speech: np.ndarray, rate: int, offset: int, speech_s: float, lead_s: float, trail_s: float,
               *, rng: np.random.Generator, noise_dbfs: float) -> np.ndarray:
    """``lead_s`` of silence, ``speech_s`` of ``speech`` (tiled) from sample ``offset``, then
    ``trail_s`` of silence (int16)."""
    body = np.resize(np.roll(speech, -offset), round(speech_s * rate))
    n_lead, n_trail = round(lead_s * rate), round(trail_s * rate)
    noise = np.rint(rng.standard_normal(n_lead + n_trail, np.float32) * (32767 * 10 ** (noise_dbfs / 20)))
    noise = noise.astype(np.int16)
    return np.concatenate([noise[:n_lead], body, noise[n_lead:]])


def vad_clips(utterances: pd.DataFrame, *, seed: int = 0, pad_fraction: float = 0.5, max_pad_s: float = 10.0,
              aggressiveness: int = 2, noise_dbfs: float = -60.0) -> pd.DataFrame:
    """One row per (scenario, utterance): ``true_speech_s`` (the utterance's length),
    ``pad_s``, ``audio_duration_s``, ``speech_duration_s`` (VAD), ``vad_error_s`` (VAD minus
    true speech) and ``output_tokens``; the per-clip accuracy figure plots this table.

    The draws do not depend on ``pad_fraction`` beyond who is padded, so an unpadded clip is
    the same waveform in both scenarios and is measured once; each clip is synthesised,
    measured and dropped in turn (memory stays one clip).
    """
    if not 0 <= pad_fraction <= 1:
        raise SchedlabError(f"pad_fraction must be in [0, 1], got {pad_fraction}")
    if not max_pad_s >= 0:
        raise SchedlabError(f"max_pad_s must be >= 0, got {max_pad_s}")
    missing = {"duration_s", "output_tokens"} - set(utterances.columns)
    if missing:
        raise SchedlabError(f"utterances lack column(s) {', '.join(sorted(missing))}")
    speech, rate = speech_sample()
    true_s = utterances["duration_s"].to_numpy(float)
    n = len(true_s)
    rng = np.random.default_rng([seed, 3])
    offset = rng.integers(len(speech), size=n)
    pad = np.where(rng.random(n) < pad_fraction, rng.uniform(0.0, max_pad_s, n), 0.0)
    lead = pad * rng.random(n)

    def measure(i: int, lead_s: float, trail_s: float) -> float:
        clip = synth_clip(speech, rate, offset[i], true_s[i], lead_s, trail_s,
                          rng=np.random.default_rng([seed, 4, i]), noise_dbfs=noise_dbfs)
        return speech_seconds(clip, rate, aggressiveness=aggressiveness)

    plain = np.array([measure(i, 0.0, 0.0) for i in range(n)])
    padded = np.array([measure(i, lead[i], pad[i] - lead[i]) if pad[i] > 0 else plain[i] for i in range(n)])
    tokens = utterances["output_tokens"].to_numpy(np.int64)
    return pd.concat(
        [
            pd.DataFrame(
                {
                    "scenario": scenario,
                    "utterance": np.arange(n),
                    "true_speech_s": true_s,
                    "pad_s": p,
                    "audio_duration_s": true_s + p,
                    "speech_duration_s": vad,
                    "vad_error_s": vad - true_s,
                    "output_tokens": tokens,
                }
            )
            for scenario, p, vad in zip(SCENARIOS, (np.zeros(n), pad), (plain, padded))
        ],
        ignore_index=True,
    )


def vad_trace(clips: pd.DataFrame, scenario: str, rate: float, *, seed: int, duration_s: float) -> pd.DataFrame:
    """A scenario's clips as an ASR trace with ``speech_duration_s``: for a (rate, seed) both
    scenarios get the same arrivals and the same utterance per request (the CLI's seeding)."""
    if scenario not in SCENARIOS:
        raise SchedlabError(f"unknown VAD scenario {scenario!r}; choose {' or '.join(SCENARIOS)}")
    rows = clips[clips["scenario"] == scenario]
    pool = rows[["audio_duration_s", "output_tokens", "speech_duration_s"]].reset_index(drop=True)
    arrivals = arrival_times(rate, rng=np.random.default_rng([seed, 0]), duration_s=duration_s)
    return asr_trace(pool, arrivals, rng=np.random.default_rng([seed, 1]))
