"""The engine's speed (the ``sim`` backend): a full paper-A run, and how the cost scales with run size.

Run with ``pytest benchmarks/bench_sim.py --benchmark-only``.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import pytest

from schedlab.engine import Arena, engine_config
from schedlab.engine import run as serve
from schedlab.engine.steptime import StepTimeModel
from schedlab.simulate import scheduler_for
from schedlab.workload.arrivals import arrival_times
from schedlab.workload.asr import asr_trace, librispeech_pool

STEP = StepTimeModel(
    intercept=0.006, n_encoder=0.031, n_prefill_tokens=0.0009, n_decode=0.00066, ctx_tokens=4e-7
)
KAPPA = {"en": 3.0}


def librispeech_like_pool(seed: int = 0, n: int = 2620) -> pd.DataFrame:
    """LibriSpeech test-clean's size: lognormal durations, mean 7.4 s, sd 5.15 s, 1.3-35 s."""
    rng = np.random.default_rng(seed)
    s2 = np.log(1 + (5.15 / 7.4) ** 2)
    dur = np.clip(rng.lognormal(np.log(7.4) - s2 / 2, np.sqrt(s2), n), 1.285, 34.955)
    tokens = np.maximum(1, np.round(3.0 * dur * rng.uniform(0.8, 1.2, n))).astype(np.int64)
    return librispeech_pool(pd.DataFrame({"duration_s": dur, "output_tokens": tokens}))


def trace_for(rate: float, *, duration_s=None, n_requests=None, seed: int = 0) -> pd.DataFrame:
    arrivals = arrival_times(
        rate, rng=np.random.default_rng([seed, 0]), duration_s=duration_s, n_requests=n_requests
    )
    return asr_trace(librispeech_like_pool(seed), arrivals, rng=np.random.default_rng([seed, 1]))


@pytest.fixture(scope="module")
def arena():
    return Arena(STEP, engine_config("A100-40GB", "whisper-large-v3", max_num_batched_tokens=2048), KAPPA)


def run(trace, policy, arena):
    return serve(trace, scheduler_for(policy), arena)


@pytest.mark.parametrize("policy", ["fcfs", "sjf", "hrrn"])
def test_full_librispeech_run_25rps_300s(benchmark, arena, policy):
    trace = trace_for(25.0, duration_s=300.0)
    assert 7000 < len(trace) < 8000
    result = benchmark.pedantic(run, args=(trace, policy, arena), rounds=3, iterations=1)
    assert result.requests["finish_s"].notna().all()
    best = benchmark.stats.stats.min
    print(f"\n{policy}: {len(trace)} requests simulated in {best:.3f} s ({len(trace) / best:,.0f} req/s)")
    assert best < 2.0


@pytest.mark.parametrize("policy", ["fcfs", "sjf", "hrrn"])
def test_cost_grows_at_most_linearly_with_run_size(benchmark, arena, policy):
    """Simulated requests per second at 1k, 2k, 4k and 8k requests (25 req/s, overloaded, so
    the waiting queue grows with the run): time per request may rise by at most 1.5x."""
    sizes_n = (1000, 2000, 4000, 8000)
    traces = {n: trace_for(25.0, n_requests=n) for n in sizes_n}

    def sweep():
        per_request = {}
        for n in sizes_n:
            best = float("inf")
            for _ in range(3):
                t0 = time.perf_counter()
                run(traces[n], policy, arena)
                best = min(best, time.perf_counter() - t0)
            per_request[n] = best / n
        return per_request

    per_request = benchmark.pedantic(sweep, rounds=1, iterations=1)
    for n in sizes_n:
        benchmark.extra_info[f"req_per_s_{n}"] = 1 / per_request[n]
        print(f"\n{policy}: {n:5d} requests: {1 / per_request[n]:,.0f} simulated req/s")
    ratio = per_request[sizes_n[-1]] / per_request[sizes_n[0]]
    benchmark.extra_info["time_per_request_ratio"] = ratio
    print(f"{policy}: time per request, 8k vs 1k: {ratio:.2f}x")
    assert ratio < 1.5
