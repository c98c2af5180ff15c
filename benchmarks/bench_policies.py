"""Scheduling overhead: one push plus one pop at a steady queue depth of 500.

Run with ``pytest benchmarks/bench_policies.py --benchmark-only``. Paper A reports the
scheduling decision at well under 0.1 ms per request.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from schedlab import registry

DEPTH = 500
CYCLES = 2000  # push+pop cycles per timed round
TARGET_US = {"fcfs": 10.0, "sjf": 10.0, "hrrn": 100.0}


@dataclass(slots=True)
class Job:
    request_id: int
    arrival_s: float
    size: float


@pytest.mark.parametrize("name", ["sjf", "hrrn", "fcfs"])
def test_push_pop_overhead_at_depth_500(benchmark, name):
    rng = np.random.default_rng(0)
    n = DEPTH + CYCLES
    arrival = np.cumsum(rng.exponential(0.04, n))
    size = np.maximum(1.0, np.floor(rng.lognormal(1.8, 0.63, n) * 3.0))
    jobs = [Job(i, float(arrival[i]), float(size[i])) for i in range(n)]

    def setup():
        policy = registry.make(name, kind=registry.QUEUE)
        for j in jobs[:DEPTH]:
            policy.push(j)
        return (policy,), {}

    def cycles(policy):
        for i in range(DEPTH, n):
            job = jobs[i]
            policy.push(job)
            policy.pop(job.arrival_s)
        return policy

    policy = benchmark.pedantic(cycles, setup=setup, rounds=15, iterations=1, warmup_rounds=1)
    assert len(policy) == DEPTH
    per_request_us = benchmark.stats.stats.min / CYCLES * 1e6
    median_us = benchmark.stats.stats.median / CYCLES * 1e6
    benchmark.extra_info["per_request_us"] = per_request_us
    print(f"\n{name}: push+pop at depth {DEPTH}: {per_request_us:.2f} us/request (median {median_us:.2f})")
    assert per_request_us <= TARGET_US[name]
