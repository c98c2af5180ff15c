"""The ``vllm`` profile source: timed steps of a real vLLM engine while it serves.

A profiling trace (random prompt and output lengths, Poisson arrivals at several rates from
light load to overload) is replayed through the engine in real time, and every step's
composition (prefill tokens, decodes and their context, as vLLM's scheduler scheduled them)
and wall time becomes a profile row. Steps are timed under the same conditions as a served
workload (requests arriving between steps, mixed prefill and decode batches), which an offline
grid of isolated batches misses.
"""

from __future__ import annotations

import os
import platform

import numpy as np
import pandas as pd

from schedlab import progress
from schedlab.backends.vllm_engine import LaunchSpec, replay, start_engine
from schedlab.contracts import PROFILE_COLUMNS, STEP_FEATURES
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
