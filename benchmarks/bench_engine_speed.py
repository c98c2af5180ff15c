"""The engine's loop on LLM traffic (benchmarks/llm_workload.py): simulated requests per
second on 10,000- and 100,000-request traces at 3.5 and 7 req/s (FCFS, the run loop only:
the trace and the arena are made beforehand), and the whole process of ``schedlab simulate``
on the 10,000-request traces against Vidur's time on the same traces.

Run with ``pytest benchmarks/bench_engine_speed.py --benchmark-only``. The 100,000-request
traces take up to a minute each on a 2-core machine; ``-k 'not 100k'`` leaves them out.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

import pytest

from llm_workload import KV_BLOCKS, LLAMA2_7B_A100, RATES, llm_arena, llm_trace
from schedlab.engine import Engine
from schedlab.simulate import scheduler_for
from schedlab.validation import write_steptime

#: Vidur's whole-process wall time on the 10,000-request traces (issue 39: Llama-2-7B on an
#: A100, the same lengths, rates, KV capacity and limits; median of three on a 2-core machine).
VIDUR_10K_S = {3.5: 30.5, 7.0: 17.8}


@pytest.fixture(scope="module")
def arena():
    arena = llm_arena()
    Engine(llm_trace(200, 3.5), scheduler_for("fcfs"), arena).run()  # the compiled kernels, loaded once
    return arena


@pytest.mark.parametrize("rate", RATES)
@pytest.mark.parametrize("n_requests", [10_000, 100_000], ids=["10k", "100k"])
def test_loop_rate(benchmark, arena, n_requests, rate):
    trace = llm_trace(n_requests, rate)
    results = []

    def fresh_engine():
        return (Engine(trace, scheduler_for("fcfs"), arena),), {}

    def loop(engine):
        results.append(engine.run())

    rounds = 3 if n_requests <= 10_000 else 1
    benchmark.pedantic(loop, setup=fresh_engine, rounds=rounds, iterations=1)
    stats = benchmark.stats.stats
    assert results[0].requests["finish_s"].notna().all()
    rate_rps = n_requests / stats.median
    benchmark.extra_info.update(steps=results[0].steps, simulated_req_per_s=rate_rps)
    print(f"\n{n_requests:,} requests at {rate} req/s: loop median {stats.median:.2f} s (range {stats.min:.2f}-"
          f"{stats.max:.2f}, {rounds} runs), {results[0].steps:,} steps, {rate_rps:,.0f} simulated req/s")


@pytest.mark.parametrize("rate", RATES)
def test_whole_process_against_vidur(benchmark, tmp_path, rate):
    llm_trace(10_000, rate).to_parquet(tmp_path / "trace.parquet", index=False)
    write_steptime(LLAMA2_7B_A100, tmp_path / "step.json")
    argv = [sys.executable, "-m", "schedlab.cli", "simulate", "--trace", str(tmp_path / "trace.parquet"),
            "--scheduler", "fcfs", "--out-results", str(tmp_path / "r.parquet"), "--out-summary",
            str(tmp_path / "s.json"), "--steptime", str(tmp_path / "step.json"), "--hardware", "A100-80GB",
            "--model", "mistral-7b", "--max-num-seqs", "128", "--max-num-batched-tokens", "4096",
            "--kv-capacity-blocks", str(KV_BLOCKS)]
    subprocess.run(argv, check=True, capture_output=True)  # warms the file and kernel caches

    def whole():
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            subprocess.run(argv, check=True, capture_output=True)
            times.append(time.perf_counter() - t0)
        return times

    times = benchmark.pedantic(whole, rounds=1, iterations=1)
    median = statistics.median(times)
    ratio = VIDUR_10K_S[rate] / median
    benchmark.extra_info.update(whole_process_s=median, vidur_s=VIDUR_10K_S[rate], ratio_vs_vidur=ratio)
    print(f"\n10,000 requests at {rate} req/s: schedlab simulate {median:.2f} s (range {min(times):.2f}-"
          f"{max(times):.2f}), Vidur {VIDUR_10K_S[rate]} s (recorded): {ratio:.1f}x")
