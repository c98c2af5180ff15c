"""A cluster's speed: requests simulated per second across 16 replicas, beside one engine's rate
on one replica's share of the same trace (the issue's goal: one million requests across 16
replicas in under 60 s on one core).

Run with ``pytest benchmarks/bench_cluster.py --benchmark-only``; ``SCHEDLAB_BENCH_CLUSTER_REQUESTS``
sets the run's size (default one million). Each run is checked to finish every request on
exactly one replica; the rates and the goal's wall time are printed and kept in the benchmark's
``extra_info``.
"""

from __future__ import annotations

import os
import time

import numpy as np
import pandas as pd
import pytest

from schedlab.cluster import run_cluster
from schedlab.engine import Arena, EngineConfig
from schedlab.engine.steptime import StepTimeModel
from schedlab.simulate import serve

REPLICAS = 16
#: Requests per second each replica is offered: about 60% of this engine's saturation.
RATE_PER_REPLICA = 8.0
GOAL_S = 60.0
STEP = StepTimeModel(intercept=0.01, n_prefill_tokens=2e-5, n_decode=1e-4, ctx_tokens=1e-7)
ARENA = Arena(STEP, EngineConfig(max_num_seqs=128, max_num_batched_tokens=4096, kv_capacity_blocks=8000))


def llm_trace(n: int, rate: float, seed: int = 0) -> pd.DataFrame:
    """Poisson arrivals of LLM requests: prompts of 16-1023 tokens, outputs of 8-255."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"request_id": np.arange(n), "arrival_s": np.cumsum(rng.exponential(1 / rate, n)),
                         "prompt_tokens": rng.integers(16, 1024, n), "output_tokens": rng.integers(8, 256, n)})


@pytest.mark.parametrize("router", ["round-robin", "least-requests", "least-kv"])
def test_requests_per_second_across_16_replicas_beside_one_engine(benchmark, router):
    n = int(os.environ.get("SCHEDLAB_BENCH_CLUSTER_REQUESTS", 1_000_000))
    trace = llm_trace(n, REPLICAS * RATE_PER_REPLICA)
    share = trace.iloc[::REPLICAS].reset_index(drop=True)  # one replica's share under round-robin
    serve(share.iloc[:1000], "fcfs", ARENA)  # compiled kernels loaded outside the measurement
    t0 = time.perf_counter()
    serve(share, "fcfs", ARENA)
    single = len(share) / (time.perf_counter() - t0)
    result = benchmark.pedantic(run_cluster, args=(trace, "fcfs", [ARENA] * REPLICAS, router), rounds=1, iterations=1)
    req = result.requests
    assert req["finish_s"].notna().all() and req["request_id"].is_unique and len(req) == n
    assert sorted(np.unique(req["replica"])) == list(range(REPLICAS))
    wall = benchmark.stats.stats.min
    rate = n / wall
    benchmark.extra_info.update(requests=n, cluster_rps=rate, single_engine_rps=single, ratio=rate / single,
                                goal_s=GOAL_S, wall_s=wall)
    print(f"\n{router}: {n:,} requests on {REPLICAS} replicas in {wall:.1f} s ({rate:,.0f} req/s; one engine on one "
          f"replica's share: {single:,.0f} req/s; ratio {rate / single:.2f}); goal {GOAL_S:.0f} s for one million: "
          f"{'met' if n >= 1_000_000 and wall < GOAL_S else 'not met'}")
