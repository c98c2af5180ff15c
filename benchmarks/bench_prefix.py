"""What vLLM's prefix cache costs the engine (the ``sim`` backend), measured in one run.

Paper B's 200k-request shape (80% short chat prompts, 20% long ones, ~11 output tokens) at
500 req/s, FCFS and EWSJF, CPU time of the process (the machine may be shared), best of two
rounds interleaved:

- **traces without sharing data**: the cache on changes nothing and costs nothing (the engine
  keeps its integer free-block path): goal, at most 25% more than the cache off;
- **the same requests with sharing data that shares nothing** (every prompt its own tokens):
  the whole block pool runs, vLLM's operations block by block; reported;
- **documents asked 8 times** (paper B's sharing study): the 200k-request EWSJF run stays
  under 15 s.

Run with ``pytest benchmarks/bench_prefix.py --benchmark-only``.
"""

from __future__ import annotations

import time

import pytest

from schedlab.engine import Arena
from schedlab.ewsjf.policy import Params
from schedlab.ewsjf.studies import Setup, engine_limits, policy_for, run
from schedlab.fit.steptime import roofline_grid_steptime
from schedlab.latency.catalogue import hardware, model_arch

from bench_ewsjf import pools

N, RATE = 200_000, 500.0


@pytest.fixture(scope="module")
def setups():
    hw, arch = hardware("4xA100-80GB"), model_arch("llama-2-13b")
    step = roofline_grid_steptime(hw, arch).scaled(7.0)
    off = Setup(Arena(step, engine_limits(hw, arch, False)), *pools())
    on = Setup(Arena(step, engine_limits(hw, arch, True)), *pools())
    docs = Setup(Arena(step, engine_limits(hw, arch, True)), *pools(), questions_per_doc=8)
    trace = off.trace("mixed", N, RATE, 0)
    return {
        "cache off": (off, trace),
        "cache on, no sharing data": (on, trace),
        "cache on, sharing data sharing nothing": (on, trace.assign(prefix_id=0, prefix_tokens=0)),
        "cache on, documents asked 8 times": (docs, docs.trace("mixed", N, RATE, 0)),
    }, off.history("mixed", 0)


def _cpu_s(setup, trace, policy, history) -> float:
    t0 = time.process_time()
    _, summary = run(setup, trace, policy_for(policy, setup, Params(), history))
    assert summary["completed"] == N
    return time.process_time() - t0


@pytest.mark.parametrize("policy", ["fcfs", "ewsjf"])
def test_the_cache_costs_nothing_without_sharing_data(benchmark, setups, policy):
    cases, history = setups

    def rounds():
        best = {}
        for _ in range(2):
            for name, (setup, trace) in cases.items():
                best[name] = min(best.get(name, float("inf")), _cpu_s(setup, trace, policy, history))
        return best

    best = benchmark.pedantic(rounds, rounds=1, iterations=1)
    base = best["cache off"]
    for name, cpu in best.items():
        benchmark.extra_info[name] = cpu
        print(f"\n{policy}, {name}: {cpu:.2f} s CPU ({cpu / base:.2f}x the cache off)")
    benchmark.extra_info["goal_ratio_without_sharing_data"] = 1.25
    assert best["cache on, no sharing data"] / base <= 1.25
    if policy == "ewsjf":
        assert best["cache on, documents asked 8 times"] < 15
