"""Speech-active duration of a waveform (WebRTC's voice-activity detector), and a real
speech sample to build audio from.

:func:`speech_seconds` cuts the signal into 30 ms frames (one reshape; a trailing partial
frame is dropped), asks ``webrtcvad`` whether each frame is speech, and counts the speech
frames. A fresh detector per waveform keeps results independent of call order. WebRTC's
decisions are counted as they are: a hangover (marking frames after speech as speech) was
tried and dropped, as it moved the total towards the clip's speech span but did not improve
how well the measure ranks clips by output tokens, which is all SJF and HRRN use.
"""

from __future__ import annotations

import importlib.resources

import numpy as np
import soundfile
import webrtcvad

from schedlab.errors import SchedlabError

#: Sample rates WebRTC's detector accepts (Hz).
VAD_RATES = (8000, 16000, 32000, 48000)
FRAME_MS = 30
#: The bundled speech sample: ``moonshine_onnx/assets/beckett.wav`` (9.96 s, 16 kHz, mono).
SPEECH_PACKAGE, SPEECH_FILE = "moonshine_onnx", "assets/beckett.wav"


def to_pcm16(wave: np.ndarray) -> np.ndarray:
    """A mono waveform as int16: int16 as is, floats (full scale +-1) clipped and scaled."""
    wave = np.asarray(wave)
    if wave.ndim != 1:
        raise SchedlabError(f"VAD needs a mono (1-D) waveform, got shape {wave.shape}")
    if wave.size == 0:
        raise SchedlabError("VAD got an empty waveform")
    if wave.dtype == np.int16:
        return wave
    if not np.issubdtype(wave.dtype, np.floating):
        raise SchedlabError(f"VAD needs an int16 or float waveform, got {wave.dtype}")
    return np.round(np.clip(wave, -1.0, 1.0) * 32767).astype(np.int16)


def speech_frames(wave: np.ndarray, sample_rate: int = 16000, *, aggressiveness: int = 2) -> np.ndarray:
    """Per 30 ms frame, whether it is speech (bool array); see the module docstring."""
    if sample_rate not in VAD_RATES:
        raise SchedlabError(f"VAD sample rate must be one of {VAD_RATES} Hz, got {sample_rate}")
    if aggressiveness not in (0, 1, 2, 3):
        raise SchedlabError(f"VAD aggressiveness must be 0-3, got {aggressiveness}")
    pcm = to_pcm16(wave)
    width = sample_rate * FRAME_MS // 1000
    n = len(pcm) // width
    frames = np.ascontiguousarray(pcm[: n * width]).reshape(n, width)
    vad = webrtcvad.Vad(aggressiveness)
    return np.fromiter((vad.is_speech(f.tobytes(), sample_rate) for f in frames), bool, n)


def speech_seconds(wave: np.ndarray, sample_rate: int = 16000, *, aggressiveness: int = 2) -> float:
    """Seconds of ``wave`` (mono, int16 or float) that the detector calls speech."""
    return int(speech_frames(wave, sample_rate, aggressiveness=aggressiveness).sum()) * FRAME_MS / 1000


def speech_sample() -> tuple[np.ndarray, int]:
    """The bundled real speech sample as (int16 waveform, sample rate), found through the
    installed package ``useful-moonshine-onnx`` (envs/whisper-assets.txt)."""
    try:
        path = importlib.resources.files(SPEECH_PACKAGE).joinpath(SPEECH_FILE)
    except ImportError as exc:
        raise SchedlabError(
            "the speech sample needs useful-moonshine-onnx: pip install --no-deps -r envs/whisper-assets.txt"
        ) from exc
    with importlib.resources.as_file(path) as local:
        wave, rate = soundfile.read(local, dtype="int16")
    return wave, rate
