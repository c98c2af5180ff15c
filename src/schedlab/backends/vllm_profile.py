"""The ``vllm`` profile source: timed steps of a real vLLM engine.

For every (batch size, prompt length) of the grid, that many requests are submitted together
and the engine is stepped until they finish; each step's composition (prefill tokens, decodes
and their context, as the scheduler scheduled it) and wall time becomes a profile row. The
steps mix prefill chunks and decodes as real serving does, and the fit stage regresses them.
"""

from __future__ import annotations

import platform
import time

import pandas as pd

from schedlab.backends.vllm_engine import EngineSpec, scheduler_of, start_engine
from schedlab.contracts import PROFILE_COLUMNS


def device_label(spec: EngineSpec) -> str:
    if spec.device == "cpu":
        import os

        return f"cpu-{os.cpu_count()}c-{platform.machine()}"
    import torch

    return torch.cuda.get_device_name(spec.device).replace(" ", "-")


def profile(
    spec: EngineSpec,
    *,
    batch_sizes=(1, 2, 4, 8, 16, 32),
    prompt_lengths=(16, 64, 256),
    output_tokens: int = 16,
    warmup_steps: int = 3,
) -> pd.DataFrame:
    """Profile table (``source="vllm"``) of the engine's steps over the grid."""
    from vllm import SamplingParams

    llm = start_engine(spec, policy="fcfs", kappa={})
    engine, sched = llm.llm_engine, scheduler_of(llm)
    params = SamplingParams(max_tokens=output_tokens, ignore_eos=True, detokenize=False)
    rows = []
    n = 0
    for b in batch_sizes:
        for p in prompt_lengths:
            for _ in range(b):
                engine.add_request(f"{n}", {"prompt_token_ids": [100 + k % 1000 for k in range(p)]}, params)
                n += 1
            while engine.has_unfinished_requests():
                start = time.perf_counter()
                engine.step()
                rows.append((*sched.last_composition, time.perf_counter() - start))
    out = pd.DataFrame(rows[warmup_steps:], columns=list(PROFILE_COLUMNS[3:]))
    out.insert(0, "source", "vllm")
    out.insert(1, "hardware", device_label(spec))
    out.insert(2, "model", spec.model)
    return out
