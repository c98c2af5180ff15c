"""Paper C's engine model: Mistral-7B on an RTX 6000 Ada, from the roofline with the GEMM tile
staircase, fitted by OLS and calibrated on the SLAI artifact's measured chunk times.

The roofline is additive here (compute time plus memory time, ``overlap=False``): the measured
chunk times grow by ~54 us per token from 64 tokens on, where an overlapped roofline would
still be flat at the weight-read time, so that is the form they follow.
"""

from __future__ import annotations

import itertools

import pandas as pd

from schedlab.fit.chunk_times import calibrate_chunks
from schedlab.fit.steptime import fit_steptime
from schedlab.latency import roofline
from schedlab.latency.catalogue import Hardware, ModelArch
from schedlab.engine.steptime import StepTimeModel

#: Batch time of one prefill chunk on Mistral-7B / RTX 6000 Ada (SLAI artifact microbenchmark).
MEASURED_CHUNKS = (64, 512, 1024)
MEASURED_TIMES_S = (0.0227, 0.0465, 0.0747)
TILE = 128


def chunk_grid() -> pd.DataFrame:
    """Mixed batches: a prefill chunk (0..1024 tokens, at position 0..6144) beside 0..128
    decodes over contexts of 256..4096 tokens each. Columns: STEP_FEATURES, prefill_pairs."""
    rows = []
    chunks = (0, 1, 16, 32, 64, 96, 128, 160, 192, 256, 320, 384, 448, 512, 640, 768, 896, 1024)
    for c, start, n, ctx in itertools.product(chunks, (0, 1024, 6144), (0, 1, 8, 32, 64, 128), (256, 1024, 4096)):
        if (c == 0 and (start or n == 0)) or (n == 0 and ctx != 256):
            continue
        rows.append((0, c, n, n * ctx, c * start + c * (c + 1) // 2))
    return pd.DataFrame(rows, columns=["n_encoder", "n_prefill_tokens", "n_decode", "ctx_tokens", "prefill_pairs"])


def roofline_profile(hw: Hardware, arch: ModelArch, tile: int = TILE) -> pd.DataFrame:
    return roofline.profile(hw, arch, chunk_grid(), tile=tile, overlap=False)


def measured_profile(hw: Hardware, arch: ModelArch) -> pd.DataFrame:
    """The same batches priced by the passes measured on the shipped GPUs
    (:func:`schedlab.fit.measured.profile`)."""
    from schedlab.fit.measured import profile

    return profile(hw, arch, chunk_grid())


def calibrated_model(profile: pd.DataFrame, tile: int = TILE) -> tuple[StepTimeModel, dict]:
    """OLS fit of ``profile`` (with the staircase when ``tile`` > 0), calibrated on the
    measured chunk times."""
    return calibrate_chunks(fit_steptime(profile, tile=tile), MEASURED_CHUNKS, MEASURED_TIMES_S)
