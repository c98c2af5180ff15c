"""Profile tables for paper D's latency predictor: prefill and per-token decode times over a
(batch size, length) grid, from the roofline, the passes measured on the shipped GPUs, timed
torch forward passes, or a real vLLM engine's steps.

A prefill row times ``batch`` prompts of ``length`` tokens processed together; a decode row
times one decode step of ``batch`` sequences that each hold ``length`` tokens of context.
"""

from __future__ import annotations

import itertools

import numpy as np
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


def _table(rows, source: str, hardware: str, model: str) -> pd.DataFrame:
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
    return _table(rows, "roofline", hw.name, arch.name)


def measured_profile(hw: Hardware, arch: ModelArch, batches=BATCHES, lengths=LENGTHS) -> pd.DataFrame:
    """Times for every grid point and phase from the passes measured on the shipped GPUs
    (:mod:`schedlab.latency.measured`), on ``hw``."""
    from schedlab.latency.measured import phase_times

    b, n = (np.asarray(v, dtype=float).ravel() for v in np.meshgrid(batches, lengths, indexing="ij"))
    pre, dec = phase_times(hw, arch, b, n)
    rows = [row for k in range(len(b)) for row in (("prefill", int(b[k]), int(n[k]), float(pre[k])),
                                                   ("decode", int(b[k]), int(n[k]), float(dec[k])))]
    return _table(rows, "measured", hw.name, arch.name)


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
    return _table(rows.itertuples(index=False), first["source"], first["hardware"], first["model"])


def vllm_profile(
    model: str = "tiny-llama",
    device: str = "cpu",
    kv_cache_gib: int = 1,
    batches=(1, 2, 4, 8),
    lengths=(64, 128, 256, 512),
    decode_steps: int = 4,
    repeats: int = 3,
) -> pd.DataFrame:
    """Timed steps of a real vLLM engine (dummy weights of ``model``). At each grid point
    ``batch`` prompts of ``length`` tokens are submitted together: the step that prefills all
    of them is a prefill row, and each of the ``decode_steps`` steps that then decode all of
    them is a decode row (its length: the mean context). The engine's limits are set so that
    the largest point is one step; a first pass over the grid warms it up."""
    from schedlab.backends.vllm_engine import LaunchSpec, replay, start_engine
    from schedlab.backends.vllm_profile import device_label

    if repeats < 1 or decode_steps < 1:
        raise SchedlabError(f"repeats and decode_steps must be >= 1, got {repeats} and {decode_steps}")
    points = list(itertools.product(batches, lengths))
    spec = LaunchSpec(
        model=model,
        max_num_seqs=max(batches),
        max_num_batched_tokens=max(b * n for b, n in points),
        device=device,
        kv_cache_gib=kv_cache_gib,
    )
    llm = start_engine(spec, policy="fcfs", kappa={})
    rows = []
    for rep in range(repeats + 1):
        for b, n in points:
            steps = []
            trace = pd.DataFrame(
                {"request_id": range(b), "arrival_s": 0.0, "prompt_tokens": n, "output_tokens": decode_steps + 1}
            )
            replay(llm, trace, on_step=lambda c, t: steps.append((c, t)))
            for (_, n_prefill, n_decode, ctx, _), t in steps if rep else ():
                if n_prefill == b * n and n_decode == 0:
                    rows.append(("prefill", b, n, t))
                elif n_prefill == 0 and n_decode == b:
                    rows.append(("decode", b, round(ctx / b), t))
    return _table(rows, "vllm", device_label(spec), model)
