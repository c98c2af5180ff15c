"""Profile tables for paper D's latency predictor: prefill and per-token decode times over a
(batch size, length) grid, from the roofline or from timed torch forward passes.

A prefill row times ``batch`` prompts of ``length`` tokens processed together; a decode row
times one decode step of ``batch`` sequences that each hold ``length`` tokens of context.
"""

from __future__ import annotations

import itertools

import pandas as pd

from schedlab.errors import SchedlabError
from schedlab.latency import roofline
from schedlab.latency.catalogue import Hardware, ModelArch, model_dir

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


def torch_profile(
    model: str = "tiny-llama",
    batches=(1, 2, 4, 8),
    lengths=(64, 128, 256, 512),
    repeats: int = 3,
    seed: int = 0,
    device: str = "cpu",
) -> pd.DataFrame:
    """Timed prefill and decode passes of a random-initialised Llama-layout model."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from schedlab.latency.torch_profile import device_setup, median_time

    config = AutoConfig.from_pretrained(model_dir(model))
    too_long = [n for n in lengths if not 0 < n < config.max_position_embeddings]
    if too_long:
        raise SchedlabError(f"lengths must lie in 1..{config.max_position_embeddings - 1}, got {too_long}")
    if repeats < 1:
        raise SchedlabError(f"repeats must be >= 1, got {repeats}")
    torch.manual_seed(seed)
    dtype, sync, hardware = device_setup(device)
    net = AutoModelForCausalLM.from_config(config).eval().to(device=device, dtype=dtype)
    rows = []
    with torch.inference_mode():
        for b, n in itertools.product(batches, lengths):
            prompt = torch.randint(0, config.vocab_size, (b, n), device=device)
            step_ids = torch.randint(0, config.vocab_size, (b, 1), device=device)
            rows.append(("prefill", b, n, median_time(lambda: net(prompt, use_cache=True), repeats, sync=sync)))

            def setup():
                return (net(prompt, use_cache=True).past_key_values,)

            def step(cache):
                net(step_ids, past_key_values=cache, use_cache=True)

            rows.append(("decode", b, n, median_time(step, repeats, setup, sync)))
    return _table(rows, "torch", hardware, model)
