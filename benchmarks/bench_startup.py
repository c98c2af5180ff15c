"""Whole-process start-up: ``schedlab --help`` and ``schedlab simulate`` of a 200-request LLM
trace, each run as its own process (interpreter, imports, the compiled kernels' cache, the
run and its outputs), median of seven on a warm machine.

Run with ``pytest benchmarks/bench_startup.py --benchmark-only``. Goals: ``--help`` under
0.3 s, ``simulate`` under 0.5 s (see docs/backends.md, "Speed", for where a run's start-up
goes and what the present floor is).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

import pytest

from llm_workload import LLAMA2_7B_A100, KV_BLOCKS, llm_trace
from schedlab.validation import write_steptime

CLI = [sys.executable, "-m", "schedlab.cli"]
REPEATS = 7


def _median_wall(argv: list[str]) -> tuple[float, list[float]]:
    """The median whole-process wall time of ``argv`` over :data:`REPEATS` runs (after one
    untimed run that warms the file cache and the compiled kernels' cache), and every time."""
    subprocess.run(argv, check=True, capture_output=True)
    times = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times


def _report(benchmark, name: str, median: float, times: list[float]) -> None:
    benchmark.extra_info[f"{name}_median_s"] = median
    benchmark.extra_info[f"{name}_min_s"] = min(times)
    benchmark.extra_info[f"{name}_max_s"] = max(times)
    print(f"\n{name}: median {median:.3f} s over {len(times)} processes (range {min(times):.3f}-{max(times):.3f} s)")


def test_help_start_up(benchmark):
    median, times = benchmark.pedantic(_median_wall, args=(CLI + ["--help"],), rounds=1, iterations=1)
    _report(benchmark, "help", median, times)
    assert median < 0.3


@pytest.fixture(scope="module")
def small_run(tmp_path_factory) -> list[str]:
    folder = tmp_path_factory.mktemp("startup")
    llm_trace(200, 3.5).to_parquet(folder / "trace.parquet", index=False)
    write_steptime(LLAMA2_7B_A100, folder / "step.json")
    return CLI + [
        "simulate", "--trace", str(folder / "trace.parquet"), "--scheduler", "fcfs",
        "--out-results", str(folder / "results.parquet"), "--out-summary", str(folder / "summary.json"),
        "--steptime", str(folder / "step.json"), "--hardware", "A100-80GB", "--model", "mistral-7b",
        "--max-num-seqs", "128", "--max-num-batched-tokens", "4096", "--kv-capacity-blocks", str(KV_BLOCKS),
    ]


#: A process that imports numba and makes the first call of one kernel from its cache, as
#: ``simulate`` does with the engine's kernels.
CACHED_KERNEL = """
import numpy as np
from numba import njit

@njit(cache=True)
def total(a):
    s = 0.0
    for x in a:
        s += x
    return s

total(np.arange(10.0))
"""


@pytest.mark.xfail(reason="not met: the libraries' floor printed beside it (pandas and pyarrow imported; numba "
                          "imported and a cached kernel's first call) exceeds it before any of schedlab's code",
                   strict=False)
def test_simulate_start_up(benchmark, small_run, tmp_path):
    median, times = benchmark.pedantic(_median_wall, args=(small_run,), rounds=1, iterations=1)
    _report(benchmark, "simulate", median, times)
    # The same machine's floors, in the same run: what the libraries simulate is built on cost alone.
    kernel = tmp_path / "cached_kernel.py"
    kernel.write_text(CACHED_KERNEL)
    _report(benchmark, "floor_pandas_pyarrow", *_median_wall([sys.executable, "-c", "import numpy, pandas, pyarrow.parquet"]))
    _report(benchmark, "floor_numba_cached_kernel", *_median_wall([sys.executable, str(kernel)]))
    assert median < 0.5
