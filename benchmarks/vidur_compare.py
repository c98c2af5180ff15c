"""Time schedlab and Vidur side by side on the engine-speed traces (not run by pytest or CI).

    python benchmarks/vidur_compare.py --vidur PATH/TO/vidur --vidur-python PATH/TO/python \
        [--cache PATH/TO/vidur/cache] [--requests 1000 10000] [--rates 3.5 7] [--repeats 3]

Both tools serve the same workload (benchmarks/llm_workload.py): the Azure conv trace's
(prompt, output) lengths, Poisson arrivals, Llama-2-7B on an A100, 7,424 KV blocks of 16
tokens, 128 sequences and 4,096 tokens a step, FCFS. schedlab runs ``schedlab simulate`` on
the trace with its Llama-2-7B-like step model; Vidur runs ``python -m vidur.main`` in its
checkout with its vLLM scheduler, its synthetic request generator drawing the same lengths
(a CSV of ``num_prefill_tokens, num_decode_tokens`` written here) at the same rate (Vidur
draws its own arrival times), and its execution-time predictor trained on its profiling data,
kept in ``--cache`` between runs (Vidur trains it on its first run; run once to warm it).
Each tool's whole-process wall time is the median of ``--repeats`` runs; prints one table
row per trace. Without a Vidur checkout, or one without its profiling data, it says so and exits 0.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from llm_workload import KV_BLOCKS, LLAMA2_7B_A100, conversation_lengths, llm_trace  # noqa: E402
from schedlab.validation import write_steptime  # noqa: E402


#: The profiling data Vidur trains its Llama-2-7B A100 predictor on (large files: a partial copy
#: may lack them, or hold Git LFS pointers in their place).
PROFILES = [Path("data/profiling/compute/a100/meta-llama/Llama-2-7b-hf") / name for name in ("attention.csv", "mlp.csv")]


def _lacking(checkout: Path) -> list[str]:
    """The profiling files ``checkout`` lacks (absent, or a Git LFS pointer)."""
    def held(path: Path) -> bool:
        if not path.is_file():
            return False
        with path.open("rb") as f:
            return not f.read(64).startswith(b"version https://git-lfs")

    return [str(f) for f in PROFILES if not held(checkout / f)]


def _wall(argv: list[str], cwd: Path | None = None) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, cwd=cwd, check=True, capture_output=True)
    return time.perf_counter() - t0


def schedlab_argv(folder: Path, n: int, rate: float) -> list[str]:
    trace = folder / f"trace_{n}_{rate}.parquet"
    llm_trace(n, rate).to_parquet(trace, index=False)
    write_steptime(LLAMA2_7B_A100, folder / "step.json")
    return [sys.executable, "-m", "schedlab.cli", "simulate", "--trace", str(trace), "--scheduler", "fcfs",
            "--out-results", str(folder / "r.parquet"), "--out-summary", str(folder / "s.json"),
            "--steptime", str(folder / "step.json"), "--hardware", "A100-80GB", "--model", "mistral-7b",
            "--max-num-seqs", "128", "--max-num-batched-tokens", "4096", "--kv-capacity-blocks", str(KV_BLOCKS)]


def vidur_argv(python: str, folder: Path, cache: Path | None, n: int, rate: float) -> list[str]:
    lengths = folder / "lengths.csv"
    pool = conversation_lengths()
    pool.rename(columns={"prompt_tokens": "num_prefill_tokens", "output_tokens": "num_decode_tokens"}).to_csv(
        lengths, index=False)
    argv = [python, "-m", "vidur.main",
            "--replica_config_device", "a100", "--replica_config_model_name", "meta-llama/Llama-2-7b-hf",
            "--cluster_config_num_replicas", "1", "--replica_config_tensor_parallel_size", "1",
            "--replica_config_num_pipeline_stages", "1",
            "--request_generator_config_type", "synthetic",
            "--synthetic_request_generator_config_num_requests", str(n),
            "--length_generator_config_type", "trace",
            "--trace_request_length_generator_config_trace_file", str(lengths),
            "--trace_request_length_generator_config_max_tokens", "16384",
            "--interval_generator_config_type", "poisson",
            "--poisson_request_interval_generator_config_qps", str(rate),
            "--replica_scheduler_config_type", "vllm",
            "--vllm_scheduler_config_batch_size_cap", "128",
            "--vllm_scheduler_config_max_tokens_in_batch", "4096",
            "--vllm_scheduler_config_num_blocks", str(KV_BLOCKS),
            "--random_forrest_execution_time_predictor_config_prediction_max_tokens_per_request", "16384",
            "--metrics_config_output_dir", str(folder / "vidur_output"),
            "--no-metrics_config_store_plots", "--no-metrics_config_enable_chrome_trace"]
    if cache is not None:
        argv += ["--metrics_config_cache_dir", str(cache)]
    return argv


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--vidur", type=Path, help="a checkout of microsoft/vidur")
    p.add_argument("--vidur-python", default=sys.executable, help="the Python that has Vidur's requirements")
    p.add_argument("--cache", type=Path, help="Vidur's cache of trained predictors (default: the checkout's)")
    p.add_argument("--requests", type=int, nargs="+", default=[1000, 10000])
    p.add_argument("--rates", type=float, nargs="+", default=[3.5, 7.0])
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    if args.vidur is None or not (args.vidur / "vidur" / "main.py").is_file():
        print("no Vidur checkout given (--vidur PATH with vidur/main.py): nothing to compare")
        return 0
    if _lacking(args.vidur):
        print(f"the Vidur checkout lacks its profiling data ({', '.join(_lacking(args.vidur))}: absent, or Git LFS "
              "pointers): nothing to compare")
        return 0
    print("| requests | rate | schedlab (s) | Vidur (s) | ratio |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for n in args.requests:
            for rate in args.rates:
                ours, theirs = schedlab_argv(folder, n, rate), vidur_argv(args.vidur_python, folder, args.cache, n, rate)
                _wall(ours)  # warms the file and kernel caches
                a = statistics.median(_wall(ours) for _ in range(args.repeats))
                b = statistics.median(_wall(theirs, args.vidur) for _ in range(args.repeats))
                print(f"| {n:,} | {rate:g} | {a:.2f} | {b:.2f} | {b / a:.1f}x |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
