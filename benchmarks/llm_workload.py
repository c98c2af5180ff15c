"""The LLM serving workload the engine-speed benchmarks, the profiles and the Vidur comparison
share: Splitwise-like conversation lengths (the Azure 2023 ``conv`` trace's, drawn with
replacement), Poisson arrivals, a Llama-2-7B-on-A100-like step model, Vidur's KV capacity
(7,424 blocks of 16 tokens), 128 sequences and 4,096 tokens a step.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from schedlab.engine import Arena, engine_config
from schedlab.engine.steptime import StepTimeModel

#: Llama-2-7B on one A100, fp16, as a linear step model: ~7 ms of weights a step, prefill at
#: ~75 us a token, 40 us a decode row and 0.3 us a token of context read.
LLAMA2_7B_A100 = StepTimeModel(
    intercept=0.007, n_prefill_tokens=7.5e-5, n_decode=4e-5, ctx_tokens=3e-7, meta={"label": "llama-2-7b-a100-like"}
)
KV_BLOCKS = 7424
RATES = (3.5, 7.0)


def conversation_lengths() -> pd.DataFrame:
    """The Azure conv service's (prompt, output) lengths: the offline mirror's copy, else a
    lognormal stand-in of the same medians (prompt ~1,020, output ~130 tokens)."""
    try:
        from schedlab.data.llm_traces import azure_lengths

        return azure_lengths("conv")[["prompt_tokens", "output_tokens"]]
    except Exception as e:  # no mirror and no network: the stand-in keeps the benchmark runnable
        warnings.warn(f"Azure conv lengths unavailable ({e}); using a lognormal stand-in", stacklevel=2)
        rng = np.random.default_rng(7)
        return pd.DataFrame({
            "prompt_tokens": np.clip(rng.lognormal(np.log(1020), 0.9, 20000), 1, 8000).astype(np.int64),
            "output_tokens": np.clip(rng.lognormal(np.log(130), 1.0, 20000), 1, 2000).astype(np.int64),
        })


def llm_trace(n_requests: int, rate: float, seed: int = 0) -> pd.DataFrame:
    """``n_requests`` Poisson arrivals at ``rate`` req/s with conversation lengths."""
    pool = conversation_lengths()
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, len(pool), n_requests)
    gaps = rng.exponential(1.0 / rate, n_requests)
    return pd.DataFrame({
        "request_id": np.arange(n_requests, dtype=np.int64),
        "arrival_s": np.cumsum(gaps) - gaps[0],
        "prompt_tokens": pool["prompt_tokens"].to_numpy(np.int64)[pick],
        "output_tokens": pool["output_tokens"].to_numpy(np.int64)[pick],
    })


def llm_arena() -> Arena:
    limits = engine_config("A100-80GB", "mistral-7b", max_num_seqs=128, max_num_batched_tokens=4096,
                           kv_blocks=KV_BLOCKS)
    return Arena(LLAMA2_7B_A100, limits)
