"""A Whisper request's audio: WAV bytes of the bundled speech sample for a clip of a given
duration, as the HTTP client sends it to ``/v1/audio/transcriptions``."""

from __future__ import annotations

import io

import numpy as np
import soundfile

from schedlab.data.vad import speech_sample

#: Whisper's window: vLLM splits longer audio into several engine requests; the clip sent is
#: capped at it (the duration hint keeps the clip's real length).
MAX_CLIP_S = 30.0


def speech_wav(duration_s: float, *, offset_s: float = 0.0) -> bytes:
    """WAV bytes of the bundled speech sample, tiled from ``offset_s`` and trimmed to
    ``duration_s`` (at most :data:`MAX_CLIP_S`)."""
    wave, rate = speech_sample()
    n = max(1, round(min(duration_s, MAX_CLIP_S) * rate))
    body = np.resize(np.roll(wave, -round(offset_s * rate) % len(wave)), n)
    buf = io.BytesIO()
    soundfile.write(buf, body, rate, format="WAV", subtype="PCM_16")
    return buf.getvalue()
