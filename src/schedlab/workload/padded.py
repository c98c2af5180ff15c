"""Paper A's VAD extension: LibriSpeech requests whose audio carries silence, and the study
of ordering the queue by speech-active time instead of raw file length.

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
from scipy.stats import spearmanr

from schedlab.data.vad import speech_sample, speech_seconds
from schedlab.errors import SchedlabError
from schedlab.estimate import DURATION_SOURCES, job_sizes
from schedlab.sim.engine import EngineConfig
from schedlab.sim.setup import run_sim
from schedlab.sim.steptime import StepTimeModel
from schedlab.workload.arrivals import arrival_times
from schedlab.workload.asr import asr_trace

#: The unpadded LibriSpeech clips (where VAD has nothing to remove) and the padded ones.
SCENARIOS = ("librispeech", "padded")
#: Policies whose queue order does not depend on the size estimate (run once per scenario).
ESTIMATE_FREE = ("fcfs",)


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


def vad_accuracy(clips: pd.DataFrame) -> pd.DataFrame:
    """Per scenario and estimate (``raw`` or ``vad``): the Spearman rank correlation of the
    duration with output tokens (what SJF's order relies on) and the median error of that
    duration against the true speech length, in seconds."""
    rows = []
    for scenario, g in clips.groupby("scenario", sort=False):
        for estimate, col in zip(DURATION_SOURCES, ("audio_duration_s", "speech_duration_s")):
            rows.append(
                {
                    "scenario": scenario,
                    "estimate": estimate,
                    "spearman_tokens": float(spearmanr(g[col], g["output_tokens"]).statistic),
                    "median_error_s": float(np.median(g[col] - g["true_speech_s"])),
                }
            )
    return pd.DataFrame(rows)


def vad_study(
    utterances: pd.DataFrame,
    step_time: StepTimeModel,
    engine: EngineConfig,
    kappa: dict[str, float],
    *,
    rates,
    seed: int = 0,
    duration_s: float = 300.0,
    pad_fraction: float = 0.5,
    max_pad_s: float = 10.0,
    policies=("fcfs", "sjf", "hrrn"),
) -> pd.DataFrame:
    """One row per (scenario, estimate, policy, rate): the ``run_sim`` summary plus
    ``scenario``, ``estimate`` (duration source of the job sizes), ``pad_fraction``,
    ``max_pad_s`` and ``size_spearman`` (rank correlation of the run's job sizes with its
    output tokens). Feeds paper A's VAD figure: P50/P90 E2EL against rate, hue policy, style
    estimate, one panel per scenario (padding misleads raw-duration SJF/HRRN; without padding
    VAD does not help).

    Every run at a rate sees the same arrivals and utterance order (:func:`vad_trace`);
    scenarios differ only by padding. Policies in :data:`ESTIMATE_FREE` run once per (scenario, rate), their row
    repeated for both estimates.
    """
    clips = vad_clips(utterances, seed=seed, pad_fraction=pad_fraction, max_pad_s=max_pad_s)
    identity = {"model": step_time.meta.get("model"), "hardware": step_time.meta.get("hardware"), "seed": seed}
    rows = []
    for rate in rates:
        for scenario in SCENARIOS:
            trace = vad_trace(clips, scenario, rate, seed=seed, duration_s=duration_s)
            tokens = trace["output_tokens"].to_numpy()
            for policy in policies:
                summary = None
                for estimate in DURATION_SOURCES:
                    if summary is None or policy not in ESTIMATE_FREE:
                        _, summary = run_sim(trace, policy, step_time, engine, kappa=kappa, duration=estimate,
                                             identity={"workload": scenario, "rate": rate, **identity})
                    sizes = job_sizes(trace, kappa, estimate)
                    rows.append(
                        {
                            **summary,
                            "scenario": scenario,
                            "estimate": estimate,
                            "pad_fraction": pad_fraction if scenario == "padded" else 0.0,
                            "max_pad_s": max_pad_s if scenario == "padded" else 0.0,
                            "size_spearman": float(spearmanr(sizes, tokens).statistic),
                        }
                    )
    return pd.DataFrame(rows)
