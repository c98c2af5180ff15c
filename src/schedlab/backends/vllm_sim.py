"""The ``vllm-sim`` backend: vLLM's real scheduler driven on a virtual clock.

Requests enter at their arrival times; each step calls ``schedule()``, advances the clock by
the step-time model applied to the step's composition (encoder inputs, prefill tokens, decodes
and their context), synthesises a ``ModelRunnerOutput`` with one token for every request whose
scheduled chunk completes its known tokens, and feeds it to ``update_from_output()``.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
from vllm.v1.outputs import ModelRunnerOutput

from schedlab import registry
from schedlab.backends.vllm_build import build_scheduler, make_request
from schedlab.engine import Arena, RunResult, check_servable
from schedlab.engine.core import TIMELINE_COLUMNS
from schedlab.engine.log import RequestLog
from schedlab.errors import SchedlabError
from schedlab.estimate import size_hints
from schedlab.latency.catalogue import model_arch

#: Placeholder id of every generated token (lengths are forced with ignore_eos).
TOKEN = 100


def run_vllm_sim(trace: pd.DataFrame, scheduler: str, arena: Arena, *, model: str, warmup_s: float = 0.0,
                 sample_s: float | None = None) -> RunResult:
    """Run ``trace`` through vLLM's scheduler with the registered ``scheduler``: a queue
    policy as its waiting queue, or a batch builder carried out by step plans. The result has the ``sim``
    backend's shape (``warmup_s`` and ``sample_s`` as on :class:`schedlab.engine.core.Engine`).
    The requests' hints carry the arena's duration source and their SLO class and target
    (:func:`size_hints`)."""
    wall0 = time.perf_counter()
    arch = model_arch(model)
    check_servable(trace, arena.limits, min(arena.max_tokens or arch.max_target_positions, arch.max_target_positions))
    step_time = arena.step_time
    entry = registry.entry(scheduler)
    context = registry.Context(trace, arena)
    if entry.kind == registry.BATCH:
        sched = build_scheduler(model, arena.limits, builder=scheduler)
        sched.use_builder(entry.make(context))
    else:
        sched = build_scheduler(model, arena.limits, policy=scheduler, kappa=arena.kappa)
        sched.use_policy(entry.make(context))
        sched.allow_client_priority = True  # the priorities are the trace's own (a checked column)
    clock = {"now": 0.0}
    sched.clock = lambda: clock["now"]
    n = len(trace)
    arrival = trace["arrival_s"].to_numpy(float)
    visible = step_time.visible_times(arrival)
    prompt = trace["prompt_tokens"].to_numpy(np.int64)
    output = trace["output_tokens"].to_numpy(np.int64)
    hints = size_hints(trace, arena.duration)
    log = RequestLog(trace, warmup_s)
    requests = []
    next_sample = 0.0 if sample_s else np.inf
    samples: list[tuple] = []
    nxt = steps = 0
    busy = 0.0
    peak = 0
    pool = sched.kv_cache_manager.block_pool
    capacity = pool.get_num_free_blocks()
    while nxt < n or sched.has_unfinished_requests():
        now = clock["now"]
        while nxt < n and visible[nxt] <= now:
            req = make_request(
                str(nxt), int(prompt[nxt]), int(output[nxt]), float(arrival[nxt]),
                encoder_frames=arch.encoder_frames, extra_args=hints[nxt],
            )
            requests.append(req)
            sched.add_request(req)
            nxt += 1
        while now >= next_sample:
            samples.append((next_sample, 1 - pool.get_num_free_blocks() / capacity, len(sched.waiting),
                            len(sched.running)))
            next_sample += sample_s
        if not sched.has_unfinished_requests():
            clock["now"] = float(visible[nxt])
            continue
        out = sched.schedule()
        ids = list(out.num_scheduled_tokens)
        if not ids:
            if nxt < n:
                clock["now"] = max(now, float(visible[nxt]))
                continue
            raise SchedlabError("vLLM scheduler stalled with requests left")
        for new in out.scheduled_new_reqs:
            log.scheduled(int(new.req_id), now)
        dt = float(step_time(*sched.last_composition))
        peak = max(peak, capacity - pool.get_num_free_blocks())
        clock["now"] = now + dt
        busy += dt
        steps += 1
        sampled = [[] if sched.requests[rid].is_prefill_chunk else [TOKEN] for rid in ids]
        emitted = np.array([int(rid) for rid, s in zip(ids, sampled) if s], dtype=np.int64)
        log.tokens(emitted, clock["now"])
        result = sched.update_from_output(
            out,
            ModelRunnerOutput(req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)}, sampled_token_ids=sampled),
        )
        for o in (o for e in result.values() for o in e.outputs):
            if o.finish_reason is not None:
                log.finish[int(o.request_id)] = clock["now"]
    while sample_s and clock["now"] >= next_sample:
        samples.append((next_sample, 1 - pool.get_num_free_blocks() / capacity, len(sched.waiting), len(sched.running)))
        next_sample += sample_s
    log.preemptions[:] = [r.num_preemptions for r in requests]
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
