"""The papers' queue policies in transformers' continuous-batching engine, held out from the
step-time fit: the study whose GPU run is shipped under ``assets/transformers-runs/<hardware>/``
and whose CPU run is the pipeline's ``transformers`` option; the calibration notebook sets
``sim`` beside either (:mod:`schedlab.fit.engine_runs`).

    python -m schedlab.backends.transformers.study --device cuda:0 --out DIR   # or: make gpu-transformers

A random-initialised decoder (on a GPU, of a paper's shape: Mistral-7B by default, bfloat16)
serves LLM-like requests (log-normal prompt and output lengths) replayed on the wall clock. A
burst first measures the engine's throughput; FCFS then runs at three loads (shares of it), from
whose steps the step-time model is fitted, and the held-out policies (SJF, EWSJF, HRRN) at
two other loads. Written as each run finishes, in four files: ``traces.parquet`` (every run's
trace), ``requests.parquet`` (per-request results), ``steps.parquet`` (every engine step: its
composition and time, the profile columns) and ``provenance.json`` (device, versions, engine
limits, loads, the probe's throughput, each run's summary and the share of the machine's cores
other processes kept busy meanwhile, what a time budget left out). The run needs torch,
transformers, pandas, pyarrow, numba, scipy, statsmodels, PyYAML and pydantic
(``PYTHONPATH=src`` on a machine without schedlab installed: the papers' policies are then
registered from the checkout's ``pyproject.toml``).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import importlib
import importlib.metadata
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from schedlab import registry
from schedlab.backends.served.host_counters import machine_busy_cpu_s
from schedlab.builders.transformers_batching import FIFO, ORDERS
from schedlab.cli_types import count, number, positive_number, seed
from schedlab.errors import SchedlabError
from schedlab.io import check_folder, write_outputs
from schedlab.workload.arrivals import arrival_times

#: The files of a run (four, so that a GPU machine's output folder brings them all back).
FILES = ("traces.parquet", "requests.parquet", "steps.parquet", "provenance.json")
#: Policies held out of the step-time fit (FCFS's runs are fitted).
HELD_OUT = ("sjf", "ewsjf", "hrrn")
#: Loads, as shares of the burst's throughput: FCFS's (fitted) and the held-out policies'.
FIT_LOADS = (0.3, 0.6, 0.9)
HELD_OUT_LOADS = (0.45, 0.75)


def llm_trace(n: int, rate: float, seed: int, prompt_median: int, output_median: int, max_tokens: int) -> pd.DataFrame:
    """``n`` requests at ``rate`` (Poisson; ``inf``: a burst), log-normal prompt and output
    lengths (sigma 0.8 and 0.6 about their medians, at least 8 tokens each, together at most
    ``max_tokens``)."""
    rng = np.random.default_rng([seed, 7])
    prompt = np.clip(np.round(prompt_median * np.exp(rng.normal(0, 0.8, n))), 8, max_tokens // 2).astype(np.int64)
    output = np.clip(np.round(output_median * np.exp(rng.normal(0, 0.6, n))), 8, max_tokens // 2).astype(np.int64)
    return pd.DataFrame({"request_id": np.arange(n), "arrival_s": arrival_times(rate, rng=rng, n_requests=n),
                         "prompt_tokens": prompt, "output_tokens": output})


def register_checkout_plugins(root: Path) -> list[str]:
    """On a machine where schedlab is not installed (no entry points), import the modules that
    ``root``'s ``pyproject.toml`` names in the ``schedlab.schedulers`` group, so that the
    papers' policies register; the names they added."""
    import tomllib

    before = set(registry.names())
    if importlib.metadata.entry_points(group=registry.GROUP) or not (root / "pyproject.toml").exists():
        return []
    project = tomllib.loads((root / "pyproject.toml").read_text())
    for module in project["project"]["entry-points"][registry.GROUP].values():
        importlib.import_module(module)
    return sorted(set(registry.names()) - before)


def _versions() -> dict:
    import torch
    import transformers

    return {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
            "transformers": transformers.__version__, "pandas": pd.__version__}


def run(args, log=print) -> dict:
    """The runs of ``args`` (see :func:`main`), each written as it finishes; the provenance."""
    import torch

    from schedlab.backends.transformers.engine import Engine, TransformersSpec, run_summary, load_model
    from schedlab.latency.catalogue import hardware_for_device, model_arch

    started = time.monotonic()
    deadline = started + args.budget_s
    cuda = args.device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        raise SchedlabError(f"device {args.device}: torch sees no CUDA device")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device_name = torch.cuda.get_device_name(args.device) if cuda else platform.processor() or "cpu"
    spec = TransformersSpec(model=args.model, device=args.device, dtype=args.dtype, order=args.order,
                            block_size=args.block_size, kv_capacity_blocks=args.kv_capacity_blocks,
                            max_num_batched_tokens=args.max_num_batched_tokens, max_num_seqs=args.max_num_seqs,
                            seed=args.seed, threads=args.threads)
    max_tokens = min(model_arch(args.model).max_target_positions, spec.kv_capacity_blocks * spec.block_size)
    provenance = {
        "device": args.device, "device_name": device_name,
        "hardware": hardware_for_device(device_name) if cuda else None, "versions": _versions(),
        "engine": {**dataclasses.asdict(spec), "batching": "synchronous, no CUDA graphs, no block sharing, no CPU swap space"},
        "workload": {"requests_per_run": args.requests, "prompt_median": args.prompt_median,
                     "output_median": args.output_median, "seed": args.seed},
        "fit_policy": "fcfs", "fit_loads": list(args.fit_loads), "held_out": list(args.held_out),
        "held_out_loads": list(args.held_out_loads), "plugins_from_checkout": args.plugins,
        "started_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(sys.argv), "runs": [], "left_out": [],
    }
    t0 = time.monotonic()
    net = load_model(spec)
    provenance["model_load_s"] = round(time.monotonic() - t0, 1)
    tables: dict[str, list[pd.DataFrame]] = {"traces": [], "requests": [], "steps": []}

    def one(policy: str, load: float, rate: float, trace: pd.DataFrame) -> dict:
        engine = Engine(spec, policy, net=net)
        provenance["engine"]["blocks_per_sector"] = engine.blocks_per_sector
        # other processes' share of the cores while the engine served: interference in its timings
        wall, machine, own = time.monotonic(), machine_busy_cpu_s(), sum(os.times()[:2])
        result, summary, steps = run_summary(engine, trace, {"workload": "llm-lognormal", "rate": rate, "seed": args.seed})
        foreign = (machine_busy_cpu_s() - machine) - (sum(os.times()[:2]) - own)
        foreign_share = max(0.0, foreign) / ((time.monotonic() - wall) * (os.cpu_count() or 1))
        ident = {"policy": policy, "load": load, "rate": rate}
        tables["traces"].append(trace.assign(**ident))
        tables["requests"].append(result.requests.assign(**ident))
        tables["steps"].append(steps.assign(load=load))
        entry = {**ident, "requests": len(trace), "steps": int(result.steps), "wall_s": round(result.wall_s, 1),
                 "throughput_rps": summary["throughput_rps"], "p50_ttft_ms": summary["p50_ttft_ms"],
                 "p50_e2el_ms": summary["p50_e2el_ms"], "preemptions": summary["preemptions"],
                 "foreign_cpu_share": round(foreign_share, 4)}
        provenance["runs"].append(entry)
        log(f"{policy} at load {load:g} ({rate:.2f} req/s): {entry}")
        _write(out, tables, provenance, started)
        return summary

    probe = one("fcfs", float("inf"), float("inf"),
                llm_trace(args.requests, float("inf"), args.seed, args.prompt_median, args.output_median, max_tokens))
    capacity = float(probe["throughput_rps"])
    provenance["probe_throughput_rps"] = capacity
    plan = [("fcfs", load) for load in args.fit_loads] + [(p, load) for p in args.held_out for load in args.held_out_loads]
    loads = sorted({load for _, load in plan})
    for policy, load in plan:
        if time.monotonic() > deadline:
            provenance["left_out"].append(f"{policy} at load {load:g}: time budget")
            continue
        rate = load * capacity
        # every policy at a load gets the same trace
        trace = llm_trace(args.requests, rate, args.seed + 1 + loads.index(load), args.prompt_median,
                          args.output_median, max_tokens)
        one(policy, load, rate, trace)
    if provenance["left_out"]:
        log(f"left out: {provenance['left_out']}")
    _write(out, tables, provenance, started)
    return provenance


def _write(out: Path, tables: dict, provenance: dict, started: float) -> None:
    provenance["wall_s"] = round(time.monotonic() - started, 1)
    provenance["finished_utc"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    write_outputs({**{out / f"{name}.parquet": pd.concat(parts, ignore_index=True) for name, parts in tables.items()},
                   out / "provenance.json": json.dumps(provenance, indent=1, default=float) + "\n"})


def main(argv=None) -> int:
    positive, share = positive_number(int), positive_number(float)
    p = argparse.ArgumentParser(prog="python -m schedlab.backends.transformers.study",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda:0", help="torch device (default cuda:0)")
    p.add_argument("--out", required=True, help=f"folder for {', '.join(FILES)}")
    p.add_argument("--model", default="mistral-7b", help="a bundled architecture (default mistral-7b)")
    p.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    p.add_argument("--requests", type=count, default=160, help="requests of each run")
    p.add_argument("--prompt-median", type=positive, default=300)
    p.add_argument("--output-median", type=positive, default=120)
    p.add_argument("--fit-loads", type=share, nargs="+", default=list(FIT_LOADS))
    p.add_argument("--held-out", nargs="+", default=list(HELD_OUT), help="queue policies held out of the fit")
    p.add_argument("--held-out-loads", type=share, nargs="+", default=list(HELD_OUT_LOADS))
    p.add_argument("--order", choices=ORDERS, default=FIFO,
                   help="transformers' scheduler class the policies' waiting queues sit in")
    p.add_argument("--block-size", type=positive, default=16)
    p.add_argument("--kv-capacity-blocks", type=positive, default=8192)
    p.add_argument("--max-num-batched-tokens", type=positive, default=2048)
    p.add_argument("--max-num-seqs", type=positive, default=128)
    p.add_argument("--threads", type=positive, help="torch threads on the CPU")
    p.add_argument("--seed", type=seed, default=0)
    p.add_argument("--budget-s", type=number(float, inf=True), default=420.0,
                   help="start no run after this many seconds (inf: no budget)")
    args = p.parse_args(argv)
    try:
        args.plugins = register_checkout_plugins(Path(__file__).resolve().parents[3])
        from schedlab.backends.transformers.engine import check_policy

        for name in ("fcfs", *args.held_out):
            check_policy(name)  # fail before any run
        check_folder(args.out)
        run(args, log=lambda s: print(s, flush=True))
    except SchedlabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
