"""Engine limits for a (hardware, model) pair, and one simulation run end to end."""

from __future__ import annotations

import time

import pandas as pd

from schedlab.errors import SchedlabError
from schedlab.estimate import job_sizes
from schedlab.latency.catalogue import hardware, kv_capacity_blocks, model_arch
from schedlab.metrics import summarize
from schedlab.policies import make_policy
from schedlab.sim.engine import EngineConfig, SimResult, Simulator
from schedlab.sim.steptime import StepTimeModel
from schedlab.validation.documents import EngineLimits, parse


def engine_config(
    hardware_name: str,
    model_name: str,
    *,
    max_num_seqs: int = 256,
    max_num_batched_tokens: int = 8192,
    block_size: int = 16,
    gpu_memory_utilization: float = 0.95,
    kv_blocks: int | None = None,
) -> EngineConfig:
    """KV capacity from the hardware's memory and the model's weights and KV size, unless
    ``kv_blocks`` gives a measured engine's capacity (then ``hardware_name`` is only a label).
    The limits are checked first (:class:`EngineLimits`)."""
    parse(EngineLimits, {"max_num_seqs": max_num_seqs, "max_num_batched_tokens": max_num_batched_tokens,
                         "block_size": block_size, "gpu_memory_utilization": gpu_memory_utilization,
                         "kv_blocks": kv_blocks}, "engine limits")
    arch = model_arch(model_name)
    if kv_blocks is None:
        kv_blocks = kv_capacity_blocks(hardware(hardware_name), arch, gpu_memory_utilization, block_size)
    return EngineConfig(
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        block_size=block_size,
        kv_capacity_blocks=kv_blocks,
        encoder_frames=arch.encoder_frames,
    )


def run_sim(
    trace: pd.DataFrame,
    policy: str,
    step_time: StepTimeModel,
    engine: EngineConfig,
    *,
    kappa: dict[str, float],
    identity: dict,
    backend: str = "sim",
    model: str | None = None,
    duration: str = "raw",
) -> tuple[SimResult, dict]:
    """Simulate ``trace`` under ``policy`` on schedlab's engine (``sim``) or on vLLM's
    scheduler (``vllm-sim``, which needs the ``model``); return the result and its summary.
    ``duration`` picks the job-size estimate's duration source (:func:`job_sizes`)."""
    if backend == "vllm-sim":
        from schedlab.backends.vllm_sim import run_vllm_sim  # imported before the clock starts
    t0 = time.perf_counter()
    if backend == "sim":
        sizes = job_sizes(trace, kappa, duration)
        result = Simulator(trace, make_policy(policy), step_time, engine, sizes).run()
    elif backend == "vllm-sim":
        make_policy(policy)  # fail early on an unknown name
        result = run_vllm_sim(trace, policy, step_time, engine, model=model, kappa=kappa, duration=duration)
    else:
        raise SchedlabError(f"unknown simulation backend {backend!r}; choose sim or vllm-sim")
    summary = summarize(result.requests, result.gaps, policy=policy, backend=backend, **identity)
    summary["sched_overhead_us_per_req"] = result.sched_overhead_s / max(len(trace), 1) * 1e6
    summary["mean_step_ms"] = result.busy_s / max(result.steps, 1) * 1e3
    summary["peak_kv_blocks"] = result.peak_kv_blocks
    summary["kv_capacity_blocks"] = engine.kv_capacity_blocks
    summary["preemptions"] = int(result.requests["preemptions"].sum())
    summary["wall_s"] = time.perf_counter() - t0
    return result, summary
