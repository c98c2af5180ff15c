"""The front end's CPU cost per Whisper request, measured, and the queue it makes.

Before vLLM's scheduler sees a transcription request, its API server decodes the uploaded audio
to 16 kHz mono (``vllm.multimodal.media.audio.load_audio``, in the speech-to-text server's
preprocessing threads) and its multimodal processor computes the log-mel features with the
model's ``WhisperFeatureExtractor`` (``truncation=True``: every clip padded to the 30 s
window). Both are Python and NumPy on the host's CPU, the same beside a GPU as here.
:func:`measure_audio_front_end` runs exactly those two calls on WAVs of the clips' durations
(the replay's own WAVs, :func:`~schedlab.backends.served.wav.speech_wav`) and times each by the
process's CPU time (every thread's: with torch installed, ``transformers`` computes the features
with torch, in its thread pool). Other processes inflate CPU time less than wall time but do
inflate it (shared caches and cores): the wall time beside it says whether the machine was busy
(``contended``), and the pipeline's rule takes the whole machine. One API process serving
requests in turn on one core spends that CPU time on each; a host whose idle cores share the
STFT spends less wall time, so the station's service time taken from it is an upper bound. :func:`fit_front_end` fits the cost
against the clip's duration by OLS and gives the station's service time for a workload's mean
clip; :func:`md1_wait` the mean wait one first-come-first-served API process with that constant
service adds at a rate (Pollaczek-Khinchine)."""

from __future__ import annotations

import io
import time

import numpy as np
import pandas as pd

from schedlab.errors import SchedlabError
from schedlab.fit.line import line_fit

#: The table's columns: one row per call.
COLUMNS = ("duration_s", "repeat", "decode_ms", "features_ms", "total_ms", "wall_ms")
#: A call whose wall time exceeds its CPU time by this factor waited for the CPU.
CONTENDED_RATIO = 1.5


def measure_audio_front_end(model: str, durations: list[float], repeats: int) -> pd.DataFrame:
    """The CPU time of vLLM's audio decoding and of ``model``'s feature extraction for a WAV of
    each of ``durations`` seconds, ``repeats`` times each after one untimed warm-up call."""
    from transformers import WhisperFeatureExtractor
    from vllm.multimodal.media.audio import load_audio

    from schedlab.backends.served.wav import speech_wav
    from schedlab.data.whisper_files import whisper_config

    extractor = WhisperFeatureExtractor(feature_size=whisper_config(model)["num_mel_bins"])
    rate = extractor.sampling_rate

    def once(wav: bytes) -> tuple[float, float, float]:
        wall, cpu = time.perf_counter(), time.process_time()
        with io.BytesIO(wav) as buf:
            audio, _ = load_audio(buf, sr=rate, mono=True)
        decoded = time.process_time()
        extractor(audio, sampling_rate=rate, truncation=True, return_tensors="np")
        done = time.process_time()
        return (decoded - cpu) * 1e3, (done - decoded) * 1e3, (time.perf_counter() - wall) * 1e3

    rows = []
    for duration in durations:
        wav = speech_wav(float(duration))
        once(wav)
        for repeat in range(repeats):
            decode, features, wall = once(wav)
            rows.append((float(duration), repeat, decode, features, decode + features, wall))
    return pd.DataFrame(rows, columns=list(COLUMNS))


def fit_front_end(table: pd.DataFrame, mean_duration_s: float) -> dict:
    """OLS of the CPU cost per request (ms) on the clip's duration (s), with 95 % intervals,
    and the station's service time (s) for a clip of ``mean_duration_s``; ``contended`` is the
    share of calls whose wall time exceeded their CPU time by :data:`CONTENDED_RATIO`."""
    if table.empty or table["duration_s"].nunique() < 2:
        raise SchedlabError("the front-end table needs calls at two clip durations at least")
    line = line_fit(table["duration_s"], table["total_ms"], "intercept_ms", "per_s_ms")
    return {
        **line, "calls": int(len(table)),
        "decode_ms_median": float(table["decode_ms"].median()), "features_ms_median": float(table["features_ms"].median()),
        "mean_duration_s": float(mean_duration_s),
        "service_s": (line["intercept_ms"] + line["per_s_ms"] * mean_duration_s) / 1e3,
        "contended": float((table["wall_ms"] > CONTENDED_RATIO * table["total_ms"]).mean()),
    }


def md1_wait(rate: float, service_s: float) -> float:
    """Mean wait in queue (s) of Poisson arrivals at ``rate`` before one server with a
    constant ``service_s``: ``rho S / (2 (1 - rho))``, ``rho = rate S``; infinite at or past
    ``rho = 1``."""
    rho = rate * service_s
    return float("inf") if rho >= 1 else rho * service_s / (2 * (1 - rho))


def front_end_service(path) -> float:
    """The station's service time (s) from a fit written by :func:`fit_front_end`."""
    from schedlab.io import read_json

    fit = read_json(path)
    service = fit.get("service_s") if isinstance(fit, dict) else None
    if not isinstance(service, (int, float)) or isinstance(service, bool) or not 0 < service < 10:
        raise SchedlabError(f"{path}: not a front-end fit (its service_s must be a time in seconds, 0 < s < 10)")
    return float(service)
