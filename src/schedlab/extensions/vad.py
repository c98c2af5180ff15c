"""Paper A's VAD study: ordering the queue by speech-active time (WebRTC VAD) instead of raw
file length, on unpadded and silence-padded LibriSpeech clips (:mod:`schedlab.workload.padded`)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from schedlab.estimate import DURATION_SOURCES, job_sizes
from schedlab.engine import Arena
from schedlab.simulate import run_summary
from schedlab.workload.padded import SCENARIOS, vad_clips, vad_trace

#: Policies whose queue order does not depend on the size estimate (run once per scenario).
ESTIMATE_FREE = ("fcfs",)


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
    arena: Arena,
    *,
    rates,
    seed: int = 0,
    duration_s: float = 300.0,
    pad_fraction: float = 0.5,
    max_pad_s: float = 10.0,
    policies=("fcfs", "sjf", "hrrn"),
) -> pd.DataFrame:
    """One row per (scenario, estimate, policy, rate): the :func:`~schedlab.simulate.run_summary` summary plus
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
    meta, kappa = arena.step_time.meta, arena.kappa
    identity = {"model": meta.get("model"), "hardware": meta.get("hardware"), "seed": seed}
    rows = []
    for rate in rates:
        for scenario in SCENARIOS:
            trace = vad_trace(clips, scenario, rate, seed=seed, duration_s=duration_s)
            tokens = trace["output_tokens"].to_numpy()
            spearman = {e: float(spearmanr(job_sizes(trace, kappa, e), tokens).statistic) for e in DURATION_SOURCES}
            for policy in policies:
                summary = None
                for estimate in DURATION_SOURCES:
                    if summary is None or policy not in ESTIMATE_FREE:
                        _, summary = run_summary(trace, policy, replace(arena, duration=estimate),
                                                identity={"workload": scenario, "rate": rate, **identity})
                    rows.append(
                        {
                            **summary,
                            "scenario": scenario,
                            "estimate": estimate,
                            "pad_fraction": pad_fraction if scenario == "padded" else 0.0,
                            "max_pad_s": max_pad_s if scenario == "padded" else 0.0,
                            "size_spearman": spearman[estimate],
                        }
                    )
    return pd.DataFrame(rows)
