"""The ``transformers`` backend: transformers' continuous-batching engine (``transformers
serve``'s) running a schedlab queue policy, with a trace replayed on the wall clock.

The model is a bundled architecture (``schedlab/assets/models``) with random weights made on
the device (nothing is downloaded); every request's output length is forced (no end-of-sequence
token). The engine runs in its own thread as transformers runs it, synchronously (no
asynchronous double-buffering: each step's composition is the batch the scheduler chose),
without block sharing or a CPU swap space (a request the cache cannot hold is soft-reset:
recomputed). Requests are added through the engine's streaming API at their arrival offsets;
each token's time is the engine's own stamp of it, so TTFT, token gaps and E2E are what a
client in the same process would see. The scheduler class
(:mod:`~schedlab.backends.transformers.scheduler`) records each step's composition and when
it was scheduled, and this module when its outputs were handled: the step log
(:data:`~schedlab.backends.steps.log.RAW_COLUMNS`, read by
:func:`~schedlab.backends.steps.tables.step_table`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from schedlab import registry
from schedlab.backends import placeholder_prompt
from schedlab.backends.steps.log import RAW_COLUMNS
from schedlab.backends.steps.tables import step_table
from schedlab.backends.transformers.scheduler import Recorder, installed, scheduler_factory
from schedlab.builders.transformers_batching import FIFO
from schedlab.compat.transformers import batching_config, blocks_per_sector
from schedlab.engine.arena import EngineConfig
from schedlab.engine.core import RunResult
from schedlab.engine.log import RequestLog
from schedlab.errors import SchedlabError
from schedlab.estimate import job_sizes
from schedlab.latency.catalogue import model_dir

#: Seconds a replay waits for the engine's next output before it checks that the engine lives.
POLL_S = 0.05


@dataclass(frozen=True)
class TransformersSpec:
    """How to start transformers' engine: the model, its device and dtype, the attention
    (``sdpa``: transformers' paged SDPA; the fast decode path needs flash attention and is off
    at ``max_blocks_per_request`` 0), the scheduler class's ``order`` and the limits: pages of
    ``block_size`` tokens, ``kv_capacity_blocks`` of them, a step of at most
    ``max_num_batched_tokens`` tokens and ``max_num_seqs`` requests. ``threads``: torch's
    threads on the CPU (default: torch's own)."""

    model: str = "tiny-llama"
    device: str = "cpu"
    dtype: str = "float32"
    attention: str = "sdpa"
    order: str = FIFO
    block_size: int = 16
    kv_capacity_blocks: int = 1024
    max_num_batched_tokens: int = 256
    max_num_seqs: int = 32
    max_blocks_per_request: int = 0
    cuda_graphs: bool = False
    seed: int = 0
    threads: int | None = None

    @property
    def limits(self) -> EngineConfig:
        """The engine's limits as schedlab's engine takes them (``sim`` and ``transformers-sim``)."""
        return EngineConfig(max_num_seqs=self.max_num_seqs, max_num_batched_tokens=self.max_num_batched_tokens,
                            block_size=self.block_size, kv_capacity_blocks=self.kv_capacity_blocks)


def engine_batching(spec: TransformersSpec) -> dict:
    """The fields of transformers' continuous-batching config that ``spec`` sets (5.19's names,
    :func:`~schedlab.compat.transformers.batching_config`): its limits, a synchronous engine
    without block sharing or a CPU swap space, attention never switched."""
    return dict(
        page_size=spec.block_size, num_blocks=spec.kv_capacity_blocks, max_batch_tokens=spec.max_num_batched_tokens,
        max_requests_per_batch=spec.max_num_seqs, max_blocks_per_request=spec.max_blocks_per_request,
        allow_block_sharing=False, use_async_batching=False, use_cuda_graph=spec.cuda_graphs,
        auto_switch_to_flash=False, cpu_offload_space=0.0, seed=spec.seed,
    )


def load_model(spec: TransformersSpec):
    """The spec's model with random weights made on its device (no copy on the host first)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    if spec.threads and spec.device == "cpu":
        torch.set_num_threads(spec.threads)
    config = AutoConfig.from_pretrained(model_dir(spec.model))
    torch.manual_seed(spec.seed)
    with torch.device(spec.device):
        net = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, spec.dtype),
                                               attn_implementation=spec.attention)
    return net.eval()


def check_policy(name: str) -> None:
    """Refuse ``name`` unless it is a registered queue policy that the real engine can run: one
    that plans with the engine's step-time model and limits (its arena) cannot."""
    if "arena" in registry.entry(name, registry.QUEUE).needs:
        raise SchedlabError(f"queue policy {name!r} needs the engine's step-time model and limits, which "
                            "transformers' real engine does not give it")


class Engine:
    """A started engine of ``spec`` whose scheduler runs the registered queue ``policy`` (or,
    without one, transformers' own class of ``spec.order``); :meth:`replay` serves one trace."""

    def __init__(self, spec: TransformersSpec, policy: str | None = "fcfs", kappa: dict[str, float] | None = None,
                 net=None) -> None:
        from transformers import GenerationConfig

        if policy is not None:
            check_policy(policy)
        self.spec, self.policy_name, self.kappa = spec, policy, kappa or {}
        self.net = net if net is not None else load_model(spec)
        self.generation = GenerationConfig(do_sample=False, eos_token_id=-1, pad_token_id=0, max_new_tokens=16)
        self._warm_up()

    def _warm_up(self) -> None:
        """An untimed replay of two short requests, so that the first timed steps do not pay
        for the kernels' first calls."""
        trace = pd.DataFrame({"request_id": [0, 1], "arrival_s": [0.0, 0.0], "prompt_tokens": [8, 24],
                              "output_tokens": [4, 4]})
        self.replay(trace)

    def replay(self, trace: pd.DataFrame) -> tuple[RunResult, pd.DataFrame]:
        """Serve ``trace`` from now on its arrival offsets; the run's result and its raw step
        log (:data:`~schedlab.backends.steps.log.RAW_COLUMNS`, times in seconds from the start)."""
        n = len(trace)
        arrival = trace["arrival_s"].to_numpy(float)
        prompt = trace["prompt_tokens"].to_numpy(np.int64)
        output = trace["output_tokens"].to_numpy(np.int64)
        rid = trace["request_id"].to_numpy(np.int64)
        sizes = job_sizes(trace, self.kappa)
        start = {"t0": time.perf_counter()}
        recorder = Recorder(lambda: time.perf_counter() - start["t0"])
        policy = None
        if self.policy_name is not None:
            policy = registry.make(self.policy_name, registry.Context(trace=trace), registry.QUEUE)

        def job(request_id: str) -> tuple:
            i = int(request_id)
            return int(rid[i]), float(arrival[i]), float(sizes[i]), int(prompt[i])

        with installed(scheduler_factory(self.spec.order, recorder, policy, job)) as name:
            config = batching_config(scheduler_type=name, **engine_batching(self.spec))
            manager = self.net.init_continuous_batching(self.generation, config)
            manager.warmup()  # the batch processor, and its CUDA graphs where they are on, before the clock starts
        processor = manager.batch_processor
        if processor.cache.num_blocks != self.spec.kv_capacity_blocks:  # sim is given the spec's limits
            raise SchedlabError(f"transformers' engine made a cache of {processor.cache.num_blocks} blocks, not the "
                                f"{self.spec.kv_capacity_blocks} asked for")
        #: Blocks a sector of the engine's cache holds (sim counts blocks: one a sector is exact).
        self.blocks_per_sector = sorted(blocks_per_sector(processor.cache))
        update = processor.update_batch

        def update_timed() -> None:
            update()
            recorder.updated(processor.scheduler.has_pending_requests() or not manager.input_queue.empty())

        processor.update_batch = update_timed
        log = RequestLog(trace)
        seen = np.zeros(n, np.int64)
        nxt = finished = 0
        start["t0"] = time.perf_counter()
        try:
            while finished < n:
                now = recorder.clock()
                while nxt < n and arrival[nxt] <= now:
                    manager.add_request(placeholder_prompt(int(prompt[nxt])), request_id=str(nxt),
                                        max_new_tokens=int(output[nxt]), streaming=True, record_timestamps=True,
                                        eos_token_id=-1)
                    nxt += 1
                if not manager.is_running():
                    manager.start()
                wait = POLL_S if nxt >= n else min(POLL_S, max(0.0, arrival[nxt] - recorder.clock()))
                out = manager.get_result(timeout=wait)
                if out is None:
                    if manager.background_thread_status.fatal_error is not None or not manager.is_running():
                        raise SchedlabError(f"transformers' engine stopped: {manager.background_thread_status.fatal_error}")
                    continue
                if out.error:
                    raise SchedlabError(f"transformers' engine failed request {out.request_id}: {out.error}")
                i = int(out.request_id)
                t = (out.timestamps[-1] - start["t0"]) if out.timestamps else recorder.clock()
                for _ in range(len(out.generated_tokens) - seen[i]):
                    log.tokens(np.array([i], np.int64), t)
                seen[i] = len(out.generated_tokens)
                if out.is_finished():
                    log.finish[i] = t
                    finished += 1
        finally:
            manager.stop(block=True, timeout=60)
        for request_id, t in recorder.first_scheduled.items():
            log.first_sched[int(request_id)] = t
        for request_id, k in recorder.resets.items():
            log.preemptions[int(request_id)] = k
        if (seen != output).any():
            raise SchedlabError("transformers' engine returned another output length than the trace's")
        raw = pd.DataFrame(recorder.steps, columns=list(RAW_COLUMNS))
        busy_s = float(step_table(raw, hardware=self.spec.device, model=self.spec.model)["time_s"].sum())
        result = RunResult(
            requests=log.frame(), gaps=log.gaps, class_gaps=log.class_gaps, steps=len(raw), busy_s=busy_s,
            peak_kv_blocks=-1, kv_capacity_blocks=self.spec.kv_capacity_blocks, sched_overhead_s=float("nan"),
            wall_s=recorder.clock(),
        )
        return result, raw


def run_summary(engine: Engine, trace: pd.DataFrame, identity: dict) -> tuple[RunResult, dict, pd.DataFrame]:
    """One replay of ``trace`` on ``engine``: its result, its run summary (``identity``: the
    workload, rate, seed, ... it records) and its step table (profile columns first, then the
    raw log's; :func:`~schedlab.backends.steps.tables.step_table`), with the run's identity."""
    from schedlab.metrics import summarize

    result, raw = engine.replay(trace)
    spec = engine.spec
    summary = summarize(result.requests, result.gaps, policy=engine.policy_name or f"transformers-{spec.order}",
                        backend="transformers", model=spec.model, hardware=spec.device, **identity)
    summary.update(mean_step_ms=result.busy_s / max(result.steps, 1) * 1e3, kv_capacity_blocks=spec.kv_capacity_blocks,
                   preemptions=int(result.requests["preemptions"].sum()), sched_overhead_us_per_req=float("nan"),
                   wall_s=result.wall_s)
    steps = step_table(raw, hardware=spec.device, model=spec.model, source="transformers")
    steps = steps.assign(policy=summary["policy"], **{k: identity[k] for k in ("rate", "seed") if k in identity})
    return result, summary, steps
