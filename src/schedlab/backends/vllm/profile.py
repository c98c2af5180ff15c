"""The ``vllm`` profile source: timed steps of a real vLLM engine while it serves.

A profiling trace (random prompt and output lengths, Poisson arrivals at several rates from
light load to overload) is replayed through the engine in real time, and every step's
composition (prefill tokens, decodes and their context, as vLLM's scheduler scheduled them)
and wall time becomes a profile row. Steps are timed under the same conditions as a served
workload (requests arriving between steps, mixed prefill and decode batches), which an offline
grid of isolated batches misses. :func:`predictor_profile` times the same engine on paper D's
latency predictor grid instead.
"""

from __future__ import annotations

import itertools
import os
import platform

import numpy as np
import pandas as pd

from schedlab import progress
from schedlab.backends.vllm.engine import LaunchSpec, replay, start_engine
from schedlab.contracts import PROFILE_COLUMNS, STEP_FEATURES
from schedlab.errors import SchedlabError
from schedlab.latency.predictor_profile import predictor_table
from schedlab.workload.arrivals import arrival_times
from schedlab.workload.synthetic import random_lengths_trace


def device_label(spec: LaunchSpec) -> str:
    if spec.device == "cpu":
        return f"cpu-{os.cpu_count()}c-{platform.machine()}"
    import torch

    return torch.cuda.get_device_name(spec.device).replace(" ", "-")


def profiling_trace(rate: float, duration_s: float, *, seed: int, max_prompt: int = 256, max_output: int = 64):
    """Poisson arrivals of requests with uniform random prompt and output lengths."""
    rng = np.random.default_rng([seed, int(rate * 1000)])
    arrivals = arrival_times(rate, rng=rng, duration_s=duration_s)
    return random_lengths_trace(arrivals, rng=rng, prompt=(4, max_prompt + 1), output=(2, max_output + 1))


def profile(
    spec: LaunchSpec,
    *,
    rates=(5.0, 10.0, 20.0, 40.0),
    duration_s: float = 3.0,
    seed: int = 0,
    warmup_steps: int = 3,
) -> pd.DataFrame:
    """Profile table (``source="vllm"``) of the engine's steps over the profiling traces."""
    llm = start_engine(spec, policy="fcfs", kappa={})
    rows: list[tuple] = []
    with progress.stage(f"vllm profile of {spec.model}", total=len(rates), unit="traces") as replayed:
        for rate in rates:
            replay(llm, profiling_trace(rate, duration_s, seed=seed),
                   on_step=lambda c, t: rows.append((*c[: len(STEP_FEATURES)], t)))
            replayed.advance()
    out = pd.DataFrame(rows[warmup_steps:], columns=list(PROFILE_COLUMNS[3:]))
    out.insert(0, "source", "vllm")
    out.insert(1, "hardware", device_label(spec))
    out.insert(2, "model", spec.model)
    return out


def predictor_profile(
    model: str = "tiny-llama",
    device: str = "cpu",
    kv_cache_gib: int = 1,
    batches=(1, 2, 4, 8),
    lengths=(64, 128, 256, 512),
    decode_steps: int = 4,
    repeats: int = 3,
) -> pd.DataFrame:
    """Paper D's latency predictor profile (:mod:`schedlab.latency.predictor_profile`) from
    timed steps of a real vLLM engine (dummy weights of ``model``). At each grid point
    ``batch`` prompts of ``length`` tokens are submitted together: the step that prefills all
    of them is a prefill row, and each of the ``decode_steps`` steps that then decode all of
    them is a decode row (its length: the mean context). The engine's limits are set so that
    the largest point is one step; a first pass over the grid warms it up."""
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
    return predictor_table(rows, "vllm", device_label(spec), model)
