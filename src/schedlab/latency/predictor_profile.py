"""Profile tables for paper D's latency predictor: prefill and per-token decode times over a
(batch size, length) grid, from the roofline or timed torch forward passes (the passes
measured on the shipped GPUs: :func:`schedlab.fit.measured.predictor_profile`; a real vLLM
engine's steps: :func:`schedlab.backends.vllm.profile.predictor_profile`).

A prefill row times ``batch`` prompts of ``length`` tokens processed together; a decode row
times one decode step of ``batch`` sequences that each hold ``length`` tokens of context.
"""

from __future__ import annotations

import itertools

import pandas as pd

from schedlab.contracts import PREFILL_PAIRS
from schedlab.errors import SchedlabError
from schedlab.latency import roofline
from schedlab.latency.catalogue import Hardware, ModelArch

#: Columns of a predictor profile table (parquet).
PREDICTOR_PROFILE_COLUMNS = ("source", "hardware", "model", "phase", "batch", "length", "time_s")
PHASES = ("prefill", "decode")
#: The paper's grid: batch 1..32, lengths 100..8000 tokens.
BATCHES = (1, 2, 4, 8, 16, 32)
LENGTHS = (100, 250, 500, 1000, 1500, 2000, 4000, 8000)


def predictor_table(rows, source: str, hardware: str, model: str) -> pd.DataFrame:
    """A predictor profile table of ``(phase, batch, length, time_s)`` rows from ``source``."""
    out = pd.DataFrame(rows, columns=["phase", "batch", "length", "time_s"])
    out.insert(0, "source", source)
    out.insert(1, "hardware", hardware)
    out.insert(2, "model", model)
    return out[list(PREDICTOR_PROFILE_COLUMNS)]


def roofline_phases(hw: Hardware, arch: ModelArch, batch: int, length: int, **eff) -> tuple[float, float]:
    """Roofline (prefill, decode step) times of one grid point (``eff``: ``compute_eff`` /
    ``bw_eff``)."""
    prefill = roofline.step_time(hw, arch, 0, batch * length, 0, 0, n_prefill_seqs=batch, **eff)
    return prefill, roofline.step_time(hw, arch, 0, 0, batch, batch * length, **eff)


def roofline_profile(
    hw: Hardware, arch: ModelArch, batches=BATCHES, lengths=LENGTHS, **eff
) -> pd.DataFrame:
    """Roofline times for every grid point and phase."""
    rows = []
    for b, n in itertools.product(batches, lengths):
        pre, dec = roofline_phases(hw, arch, b, n, **eff)
        rows += [("prefill", b, n, pre), ("decode", b, n, dec)]
    return predictor_table(rows, "roofline", hw.name, arch.name)


def torch_profile(
    model: str = "tiny-llama",
    batches=(1, 2, 4, 8),
    lengths=(64, 128, 256, 512),
    repeats: int = 3,
    seed: int = 0,
    device: str = "cpu",
) -> pd.DataFrame:
    """Timed prefill and decode passes of a random-initialised Llama-layout model
    (:func:`schedlab.latency.torch_profile.profile`) on the predictor's grid."""
    from schedlab.latency.torch_profile import profile

    return from_step_profile(profile(model, batches, lengths, repeats=repeats, seed=seed, device=device))


def from_step_profile(profile: pd.DataFrame) -> pd.DataFrame:
    """A step profile's prefill-only and decode-only rows on the predictor's (batch, length)
    grid: a prefill of ``b`` prompts of ``n`` tokens has ``b * n`` tokens and
    ``b * n * (n + 1) / 2`` attention pairs, so ``n = 2 * pairs / tokens - 1``; a decode step of
    ``b`` sequences has ``b`` decodes over ``b * n`` context tokens. Rows of other compositions
    (Whisper's encoder passes, mixed steps) are left out."""
    if PREFILL_PAIRS not in profile:
        raise SchedlabError("a step profile needs its prefill_pairs column to give prefill lengths")
    prefill = profile[(profile["n_prefill_tokens"] > 0) & (profile["n_decode"] == 0) & (profile["n_encoder"] == 0)]
    decode = profile[(profile["n_decode"] > 0) & (profile["n_prefill_tokens"] == 0) & (profile["n_encoder"] == 0)]
    length = 2 * prefill[PREFILL_PAIRS] / prefill["n_prefill_tokens"] - 1
    rows = pd.concat(
        [
            pd.DataFrame({"phase": "prefill", "batch": prefill["n_prefill_tokens"] / length, "length": length,
                          "time_s": prefill["time_s"]}),
            pd.DataFrame({"phase": "decode", "batch": decode["n_decode"], "length": decode["ctx_tokens"] / decode["n_decode"],
                          "time_s": decode["time_s"]}),
        ]
    )
    rows = rows.astype({"batch": "int64", "length": "int64"}).reset_index(drop=True)
    first = profile.iloc[0]
    return predictor_table(rows.itertuples(index=False), first["source"], first["hardware"], first["model"])
