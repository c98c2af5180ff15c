"""The ``vllm-sim`` backend: vLLM's real scheduler driven on a virtual clock.

Requests enter at their arrival times; each step calls ``schedule()``, advances the clock by
the step-time model applied to the step's composition (encoder inputs, prefill tokens, decodes
and their context), synthesises a ``ModelRunnerOutput`` with one token for every request whose
scheduled chunk completes its known tokens, and feeds it to ``update_from_output()``.

With prefix caching on and a trace that carries sharing data (:mod:`schedlab.sharing`), vLLM's
own prefix cache runs: requests carry the trace's token ids, and each request's cached tokens
are what its first admission found (vLLM's ``PrefillStats``).
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
from vllm.v1.outputs import ModelRunnerOutput

from schedlab import progress, registry
from schedlab.backends.vllm.build import block_hasher, build_scheduler, make_request
from schedlab.engine import Arena, RunResult, check_servable
from schedlab.engine.core import TIMELINE_COLUMNS
from schedlab.engine.log import RequestLog
from schedlab.engine.prefix import uses_prefix_cache
from schedlab.errors import SchedlabError
from schedlab.estimate import size_hints
from schedlab.latency.catalogue import model_arch
from schedlab.sharing import OUTPUT_TOKEN, prompt_token_ids

#: Placeholder id of every generated token (lengths are forced with ignore_eos).
TOKEN = OUTPUT_TOKEN


def run_vllm_sim(trace: pd.DataFrame, scheduler: str, arena: Arena, *, model: str, warmup_s: float = 0.0,
                 sample_s: float | None = None, host_costs: list | None = None) -> RunResult:
    """Run ``trace`` through vLLM's scheduler with the registered ``scheduler``: a queue
    policy as its waiting queue, or a batch builder carried out by step plans. The result has the ``sim``
    backend's shape (``warmup_s`` and ``sample_s`` as on :class:`schedlab.engine.core.Engine`).
    The requests' hints carry the arena's duration source and their SLO class and target
    (:func:`size_hints`). With ``host_costs`` (a list), one tuple per step is appended to it:
    the requests scheduled, the decodes, the prefill tokens, and the CPU time (s) of this
    thread in ``schedule()`` and in ``update_from_output()``, the scheduler's own work on the
    host (:mod:`schedlab.fit.scheduler_cost`)."""
    wall0 = time.perf_counter()
    arch = model_arch(model)
    check_servable(trace, arena.limits, min(arena.max_tokens or arch.max_target_positions, arch.max_target_positions))
    step_time = arena.step_time
    entry = registry.entry(scheduler)
    context = registry.Context(trace, arena)
    caching = uses_prefix_cache(trace, arena.limits.prefix_caching, arch.encoder_frames)
    if entry.kind == registry.BATCH:
        sched = build_scheduler(model, arena.limits, builder=scheduler, prefix_caching=caching)
        sched.use_builder(entry.make(context))
    else:
        sched = build_scheduler(model, arena.limits, policy=scheduler, kappa=arena.kappa, prefix_caching=caching)
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
    hasher = block_hasher(sched) if caching else None
    if caching:
        # vLLM's own counters of its lookups (what its /metrics endpoint reports), kept for the
        # whole run: the scheduler's statistics are off, so nothing reads and resets them
        from vllm.v1.metrics.stats import PrefixCacheStats

        sched.kv_cache_manager.log_stats = True
        sched.kv_cache_manager.prefix_cache_stats = PrefixCacheStats()
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
                token_ids=prompt_token_ids(trace, range(nxt, nxt + 1))[0].tolist() if caching else None, hasher=hasher,
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
        cpu = time.thread_time() if host_costs is not None else 0.0
        out = sched.schedule()
        scheduled_cpu = time.thread_time() - cpu if host_costs is not None else 0.0
        ids = list(out.num_scheduled_tokens)
        if not ids:
            if out.preempted_req_ids:  # a step that only preempted: vLLM's engine schedules again at once
                continue
            if nxt < n:
                clock["now"] = max(now, float(visible[nxt]))
                continue
            raise SchedlabError(f"{entry.describe()}: vLLM's scheduler stalled, with {len(sched.waiting)} requests "
                                "waiting and nothing scheduled")
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
        runner_output = ModelRunnerOutput(req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
                                          sampled_token_ids=sampled)
        cpu = time.thread_time() if host_costs is not None else 0.0
        result = sched.update_from_output(out, runner_output)
        if host_costs is not None:
            host_costs.append((len(ids), int(sched.last_composition[2]), int(sched.last_composition[1]),
                               scheduled_cpu, time.thread_time() - cpu))
        for o in (o for e in result.values() for o in e.outputs):
            if o.finish_reason is not None:
                log.finish[int(o.request_id)] = clock["now"]
                progress.requests_done(1)
            if o.prefill_stats is not None:  # a first admission's lookup (taken at its first output)
                log.cached[int(o.request_id)] = o.prefill_stats.num_local_cached_tokens
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
        prefix_cache=_counts(sched.kv_cache_manager.prefix_cache_stats) if caching else None,
    )


def _counts(stats) -> dict:
    """vLLM's prefix-cache counters as :attr:`RunResult.prefix_cache` names them."""
    return {"queries": stats.queries, "hits": stats.hits, "preempted_queries": stats.preempted_queries,
            "preempted_hits": stats.preempted_hits}
