"""The profiling suite: the papers' models timed on one device, written as profile tables with
their provenance (the tables shipped under ``assets/profiles/<hardware>/`` come from it).

    python -m schedlab.latency.suite --device cuda:0 --out DIR       # or: make gpu-profile

Models: whisper-large-v3 and whisper-medium (paper A: encoder passes, decode steps at batch
1-256 over a 30 s window's cross-attention cache), Mistral-7B (paper C), Qwen2.5-7B (paper D)
and LLaMA-2-13B (paper B): prefills of 100-8,000 tokens at batch 1-32 and decode steps at batch
1-32 over contexts to 8,000 tokens, paper D's grid coarsened to fit eight minutes of one GPU.
Points whose caches would not fit the device's free memory are left out, and so is whatever a
time budget leaves no time for; ``provenance.json`` lists both, with the GPU's name, driver,
clocks and the software's versions. The suite needs only torch, transformers, pandas, pyarrow
and PyYAML (``PYTHONPATH=src`` on a machine without schedlab installed).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from schedlab.errors import SchedlabError
from schedlab.io import check_folder, write_outputs, write_parquet
from schedlab.latency.catalogue import hardware_for_device, model_arch

#: The papers' models, in the order the suite times them (the earlier ones first if time is short).
MODELS = ("whisper-large-v3", "mistral-7b", "qwen2.5-7b", "llama-2-13b", "whisper-medium")
#: A small grid of the same passes, for a check of the suite (``--grid small``).
SMALL_MODELS = ("whisper-tiny", "tiny-llama")


@dataclass(frozen=True)
class Grid:
    """The passes timed per model: Whisper's encoder batches and (batch, context) decode
    points; a decoder's prefill (batch, length) points up to ``max_prefill_tokens`` and its
    decode points."""

    encoder_batches: tuple[int, ...]
    whisper_decode_batches: tuple[int, ...]
    whisper_contexts: tuple[int, ...]
    batches: tuple[int, ...]
    prefill_lengths: tuple[int, ...]
    decode_lengths: tuple[int, ...]
    max_prefill_tokens: int
    repeats: int

    def points(self, whisper: bool, max_length: int) -> dict:
        """Keyword arguments of :func:`~schedlab.latency.torch_profile.time_passes`."""
        if whisper:
            decode = [(b, c) for b in self.whisper_decode_batches for c in self.whisper_contexts if c < max_length]
            return {"encoder_batches": self.encoder_batches, "decode_points": decode}
        prefill = [
            (b, n) for n in self.prefill_lengths for b in self.batches
            if n < max_length and b * n <= self.max_prefill_tokens
        ]
        decode = [(b, n) for n in self.decode_lengths for b in self.batches if n < max_length]
        return {"prefill_points": prefill, "decode_points": decode}


GRIDS = {
    "paper": Grid(
        encoder_batches=(1, 2, 4, 8, 16, 32),
        whisper_decode_batches=(1, 2, 4, 8, 16, 32, 64, 128, 256),
        whisper_contexts=(16, 64, 128, 256),
        batches=(1, 2, 4, 8, 16, 32),
        prefill_lengths=(100, 250, 500, 1000, 2000, 4000, 8000),
        decode_lengths=(100, 500, 1000, 2000, 4000, 8000),
        max_prefill_tokens=16384,
        repeats=5,
    ),
    "small": Grid(
        encoder_batches=(1, 2),
        whisper_decode_batches=(1, 4),
        whisper_contexts=(8, 32),
        batches=(1, 2),
        prefill_lengths=(16, 64),
        decode_lengths=(16, 64),
        max_prefill_tokens=128,
        repeats=2,
    ),
}

#: Share of the device's free memory one point's KV cache may take (the rest: the pass's own
#: activations and, for a CUDA graph, its private memory pool).
CACHE_SHARE = 0.6


def _smi(*fields: str) -> dict:
    """``nvidia-smi``'s reading of ``fields`` for the first GPU (empty without one)."""
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits", "-i", "0"],
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return {}
    return dict(zip(fields, (v.strip() for v in out.split(","))))


CLOCK_FIELDS = ("clocks.sm", "clocks.mem", "clocks.max.sm", "clocks.max.mem", "power.draw", "temperature.gpu")


def _other_gpu_processes() -> list[str]:
    """Compute processes on the GPU other than this one (they would share its time)."""
    import os

    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip() and line.split(",")[0].strip() != str(os.getpid())]


def _versions() -> dict:
    import torch
    import transformers

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "transformers": transformers.__version__,
        "pandas": pd.__version__,
    }


def _warm_up_gpu(seconds: float = 2.0) -> float:
    """Matrix products for ``seconds`` so the clocks leave idle before the first timing;
    returns the last product's TFLOP/s (a sanity check of the device)."""
    import torch

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    end, tflops = time.monotonic() + seconds, 0.0
    while time.monotonic() < end:
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(10):
            a @ a
        stop.record()
        stop.synchronize()
        tflops = 10 * 2 * 8192**3 / (start.elapsed_time(stop) / 1e3) / 1e12
    return tflops


def _cache_bytes(model: str, phase: str, batch: int, length: int) -> float:
    """Bytes of the KV cache a point allocates (bf16): the self-attention cache of ``length``
    tokens a sequence (plus the slot), and Whisper's cross-attention cache of its window."""
    arch = model_arch(model)
    if phase == "decode":
        return batch * ((length + 1) * arch.kv_bytes_per_token + arch.cross_kv_bytes_per_request)
    if phase == "prefill":
        return batch * length * arch.kv_bytes_per_token
    return 0.0


def run(models, device: str, grid: Grid, out: Path, budget_s: float, log=print) -> dict:
    """Time ``models`` on ``device`` over ``grid``; write ``<out>/<model>.parquet`` as each
    finishes and ``<out>/provenance.json`` after each model. Returns the provenance."""
    import torch

    from schedlab.latency.torch_profile import SERVING_ATTENTION, PassTimer, load, time_passes

    started = time.monotonic()
    deadline = started + budget_s
    cuda = device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        raise SchedlabError(f"device {device}: torch sees no CUDA device")
    device_name = torch.cuda.get_device_name(device) if cuda else platform.processor() or "cpu"
    out.mkdir(parents=True, exist_ok=True)
    provenance = {
        "device": device,
        "device_name": device_name,
        "hardware": hardware_for_device(device_name) if cuda else None,
        "gpu": _smi("name", "driver_version", "memory.total", "power.limit", "pci.bus_id"),
        "versions": _versions(),
        "dtype": "bfloat16" if cuda else "float32",
        "attention": SERVING_ATTENTION,
        "timing": (
            "median of {r} runs after a warm-up; on CUDA, passes of at most 2,048 tokens as "
            "replays of a CUDA graph, timed by CUDA events"
        ).format(r=grid.repeats),
        "grid": grid.__dict__,
        "started_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(sys.argv),
        "other_gpu_processes_at_start": _other_gpu_processes() if cuda else [],
        "models": {},
    }
    if cuda:
        provenance["warm_up_tflops"] = round(_warm_up_gpu(), 1)
        provenance["clocks_after_warm_up"] = _smi(*CLOCK_FIELDS)
    log(f"device {device_name} ({device}); versions {provenance['versions']}")
    for model in models:
        if time.monotonic() > deadline:
            provenance["models"][model] = {"skipped": "time budget spent before it started"}
            log(f"{model}: skipped (time budget spent)")
            continue
        t0 = time.monotonic()
        left_out: list[str] = []

        def skip(phase: str, batch: int, length: int) -> bool:
            if time.monotonic() > deadline:
                left_out.append(f"{phase} b={batch} n={length}: time budget")
                return True
            if cuda:
                free, _ = torch.cuda.mem_get_info(device)
                if _cache_bytes(model, phase, batch, length) > CACHE_SHARE * free:
                    left_out.append(f"{phase} b={batch} n={length}: cache over {CACHE_SHARE:.0%} of free memory")
                    return True
            log(f"  {model} {phase} b={batch} n={length}")
            return False

        loaded = load(model, device)
        timer = PassTimer(device, grid.repeats)
        table = time_passes(loaded, repeats=grid.repeats, skip=skip, timer=timer,
                            **grid.points(loaded.whisper, loaded.max_length))
        if provenance["hardware"]:
            table["hardware"] = provenance["hardware"]
        write_parquet(table, out / f"{model}.parquet")
        entry = {
            "rows": len(table),
            "graph_rows": int(table["cuda_graph"].sum()),
            "wall_s": round(time.monotonic() - t0, 1),
            "left_out": left_out,
            "capture_error": timer.capture_error,
        }
        if cuda:
            entry["clocks_after"] = _smi(*CLOCK_FIELDS)
            entry["peak_memory_gib"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 1)
        provenance["models"][model] = entry
        log(f"{model}: {len(table)} rows in {entry['wall_s']} s ({entry['graph_rows']} graph replays); "
            f"left out {len(left_out)}; capture error: {timer.capture_error}")
        del loaded, table, timer
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
        _write_provenance(out, provenance, started)
    provenance["other_gpu_processes_at_end"] = _other_gpu_processes() if cuda else []
    _write_provenance(out, provenance, started)
    return provenance


def _write_provenance(out: Path, provenance: dict, started: float) -> None:
    provenance["wall_s"] = round(time.monotonic() - started, 1)
    provenance["finished_utc"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    write_outputs({out / "provenance.json": json.dumps(provenance, indent=1) + "\n"})


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m schedlab.latency.suite", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda:0", help="torch device (default cuda:0)")
    p.add_argument("--out", required=True, help="folder for <model>.parquet and provenance.json")
    p.add_argument("--models", nargs="+", help=f"default: {' '.join(MODELS)} ({' '.join(SMALL_MODELS)} with --grid small)")
    p.add_argument("--grid", choices=sorted(GRIDS), default="paper")
    p.add_argument("--budget-s", type=float, default=450.0, help="stop starting passes after this many seconds")
    args = p.parse_args(argv)
    models = args.models or (SMALL_MODELS if args.grid == "small" else MODELS)
    try:
        for m in models:
            model_arch(m)  # fail early on an unknown name
        check_folder(args.out)
        run(models, args.device, GRIDS[args.grid], Path(args.out), args.budget_s,
            log=lambda s: print(s, flush=True))
    except SchedlabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
