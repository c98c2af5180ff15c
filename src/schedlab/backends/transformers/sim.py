"""The ``transformers-sim`` backend: transformers' real continuous-batching scheduler driven on
a virtual clock (as ``vllm-sim`` drives vLLM's).

transformers' own objects decide every step: its paged cache's block accounting (a stand-in
model of one small layer: the scheduler counts blocks, whatever they hold), its scheduler class
(:func:`~schedlab.backends.transformers.scheduler.scheduler_factory`: its FIFO or prefill-first
class, or a queue policy inside :class:`~schedlab.backends.transformers.scheduler.PolicyScheduler`)
and its offloading manager's soft resets (no CPU swap space). This module does what the batch
processor does around them, without the forward pass: a step is scheduled as
``prepare_next_batch`` schedules it, the requests' positions move by the tokens scheduled, the
clock by the step-time model applied to the step's composition, and each request whose chunk
completes its known tokens takes one token, as ``update_batch`` gives it.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd

from schedlab import progress, registry
from schedlab.backends import placeholder_prompt
from schedlab.backends.transformers.scheduler import Recorder, composition, scheduler_factory
from schedlab.builders.transformers_batching import FIFO
from schedlab.compat.transformers import batching_config, blocks_per_sector, free_blocks, paged_cache, read_budget
from schedlab.engine import Arena, RunResult, check_servable
from schedlab.engine.core import TIMELINE_COLUMNS
from schedlab.engine.log import RequestLog
from schedlab.errors import SchedlabError


def stand_in_cache(limits, max_blocks_per_request: int = 0):
    """transformers' paged cache with ``limits``' blocks, pages and token budget, for a one-layer
    model of one 8-wide head (what the scheduler reads is its block counts), without block
    sharing."""
    import torch
    from transformers import LlamaConfig
    from transformers.generation.continuous_batching.distributed import DistributedHelper

    config = LlamaConfig(hidden_size=8, intermediate_size=8, num_hidden_layers=1, num_attention_heads=1,
                         num_key_value_heads=1, head_dim=8, vocab_size=64)
    config._attn_implementation = "flash_attention_2"  # its memory plan then sizes no attention masks
    cb = batching_config(
        page_size=limits.block_size, num_blocks=limits.kv_capacity_blocks, max_batch_tokens=limits.max_num_batched_tokens,
        max_requests_per_batch=limits.max_num_seqs, max_blocks_per_request=max_blocks_per_request,
        allow_block_sharing=False, use_async_batching=False, use_cuda_graph=False, max_memory_percent=0.9,
        cpu_offload_space=0.0,
    )
    helper = DistributedHelper(device_mesh=None, cpu_group_timeout=None)
    cache = paged_cache(config, cb, helper, torch.float16)
    if cache.num_blocks != limits.kv_capacity_blocks or blocks_per_sector(cache) != {1}:
        raise SchedlabError(f"transformers' stand-in cache holds {cache.num_blocks} blocks, not {limits.kv_capacity_blocks}")
    return cache, cb, helper


def run_transformers_sim(trace: pd.DataFrame, arena: Arena, *, policy: str | None = None, order: str = FIFO,
                         max_blocks_per_request: int = 0, warmup_s: float = 0.0,
                         sample_s: float | None = None) -> RunResult:
    """Serve ``trace`` with transformers' scheduler of ``order`` on a virtual clock: around the
    registered queue ``policy``, or transformers' own class without one. The result has the
    ``sim`` backend's shape."""
    from transformers.generation.continuous_batching.offloading_manager import OffloadingManager
    from transformers.generation.continuous_batching.requests import RequestState, RequestStatus

    wall0 = time.perf_counter()
    limits = arena.limits
    if limits.encoder_frames:
        raise SchedlabError("transformers' continuous batching serves decoder models only")
    check_servable(trace, limits, arena.max_tokens)
    step_time = arena.step_time
    n = len(trace)
    arrival = trace["arrival_s"].to_numpy(float)
    visible = step_time.visible_times(arrival).tolist() + [np.inf]
    prompt = trace["prompt_tokens"].to_numpy(np.int64)
    output = trace["output_tokens"].to_numpy(np.int64)
    rid = trace["request_id"].to_numpy(np.int64)
    sizes = arena.job_sizes(trace)
    clock = {"now": 0.0}
    recorder = Recorder(lambda: clock["now"])
    made = None if policy is None else registry.make(policy, registry.Context(trace, arena), registry.QUEUE)

    def job(request_id: str) -> tuple:
        i = int(request_id)
        return int(rid[i]), float(arrival[i]), float(sizes[i]), int(prompt[i])

    cache, cb, helper = stand_in_cache(limits, max_blocks_per_request)
    sched = scheduler_factory(order, recorder, made, job)(cache, cb.safety_margin, limits.max_num_seqs)
    offload = OffloadingManager(cache, sched, cpu_offload_space_gib=0.0, safety_threshold=1.0, compute_stream=None,
                                distributed_helper=helper)
    log = RequestLog(trace, warmup_s)
    next_sample = 0.0 if sample_s else np.inf
    samples: list[tuple] = []
    nxt = steps = 0
    busy = 0.0
    peak = 0
    capacity = limits.kv_capacity_blocks
    done = 0
    while done < n:
        now = clock["now"]
        while visible[nxt] <= now:
            sched.add_waiting_request(RequestState(request_id=str(nxt), initial_tokens=placeholder_prompt(int(prompt[nxt])),
                                                   max_new_tokens=int(output[nxt]), eos_token_id=-1))
            nxt += 1
        while now >= next_sample:
            samples.append((next_sample, 1 - free_blocks(cache) / capacity, len(sched.waiting_requests),
                            len(sched.active_requests)))
            next_sample += sample_s
        batch = _schedule(sched, offload, cache) if sched.has_pending_requests() else []
        if not batch:
            if nxt >= n:
                raise SchedlabError("transformers' scheduler stalled with requests left")
            clock["now"] = max(now, visible[nxt])
            continue
        dt = float(step_time(*composition(batch)))
        for fs in batch:
            fs.state.position_offset += fs.query_length
        peak = max(peak, capacity - free_blocks(cache))
        clock["now"] = now + dt
        busy += dt
        steps += 1
        emitted = []
        for fs in batch:
            state = fs.state
            if not fs.has_new_token:
                continue
            if state.generated_len() == 0:
                state.status = RequestStatus.DECODING
            emitted.append(int(state.request_id))
            if state.update_and_check_completion(0, None):
                sched.finish_request(state.request_id)
                sched.block_new_requests = False
                log.finish[int(state.request_id)] = clock["now"]
                done += 1
                progress.requests_done(1)
        log.tokens(np.array(emitted, np.int64), clock["now"])
    while sample_s and clock["now"] >= next_sample:
        samples.append((next_sample, 1 - free_blocks(cache) / capacity, len(sched.waiting_requests),
                        len(sched.active_requests)))
        next_sample += sample_s
    for request_id, t in recorder.first_scheduled.items():
        log.first_sched[int(request_id)] = t
    for request_id, k in recorder.resets.items():
        log.preemptions[int(request_id)] = k
    return RunResult(
        requests=log.frame(step_time.output_s),
        gaps=log.gaps,
        class_gaps=log.class_gaps,
        steps=steps,
        busy_s=busy,
        peak_kv_blocks=peak,
        kv_capacity_blocks=capacity,
        sched_overhead_s=float("nan"),
        wall_s=time.perf_counter() - wall0,
        timeline=pd.DataFrame(samples, columns=list(TIMELINE_COLUMNS)) if sample_s else None,
    )


def _schedule(sched, offload, cache) -> list:
    """One step's batch as transformers' ``prepare_next_batch`` schedules it: when nothing can
    be scheduled for want of blocks, soft resets until something can; after a step that
    starved running requests, soft resets for the next."""
    batch, *_ = sched.schedule_batch(cache.max_batch_tokens, read_budget(cache))
    while batch is None:
        if not offload.offload_requests():
            raise SchedlabError("transformers' scheduler: no request can be scheduled and none can be offloaded")
        batch, *_ = sched.schedule_batch(cache.max_batch_tokens, read_budget(cache))
    if batch and sched.starved_requests:
        offload.offload_requests()
    return batch
