"""The cluster's event loop, its results and their summaries (see :mod:`schedlab.cluster`)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from schedlab import registry
from schedlab.cluster.replica import Replica
from schedlab.engine import Arena, EngineConfig, RunResult, check_servable
from schedlab.engine.gaps import GapHistogram
from schedlab.engine.requests import Requests
from schedlab.errors import SchedlabError
from schedlab.metrics import summarize
from schedlab.routers import RequestView
from schedlab.simulate import scheduler_for


def servable(trace: pd.DataFrame, arena: Arena) -> np.ndarray:
    """Which requests ``arena``'s engine can serve on its own: within its model's context
    (when it checks one) and its KV blocks (the rule of :func:`check_servable`)."""
    tokens = trace["prompt_tokens"].to_numpy(np.int64) + trace["output_tokens"].to_numpy(np.int64)
    fits = arena.limits.encoder_blocks + -(-tokens // arena.limits.block_size) <= arena.limits.kv_capacity_blocks
    if arena.max_tokens is not None:
        fits &= tokens <= arena.max_tokens
    return fits


class Cluster(RequestView):
    """What a router reads (see :mod:`schedlab.routers`): the replicas and the requests (the
    first replica's job sizes and block size)."""

    def __init__(self, replicas: list[Replica], requests: Requests) -> None:
        super().__init__(requests.trace, replicas[0].sizes, replicas[0].limits.block_size)
        self.replicas = replicas


@dataclass
class ClusterResult:
    """One cluster run: the per-request table (the contract's, plus ``replica``), every
    measured token gap together, and each replica's run (its requests and figures)."""

    requests: pd.DataFrame
    gaps: GapHistogram
    replicas: list[RunResult]
    #: Each replica's scheduler, and the router.
    schedulers: list[str]
    router: str
    wall_s: float


def run_cluster(trace: pd.DataFrame, schedulers: str | list[str], arenas: list[Arena], router: str, *,
                seed: int = 0, warmup_s: float = 0.0) -> ClusterResult:
    """Serve ``trace`` on one replica per arena of ``arenas``, each running its scheduler
    (one registered name for all, or one per replica), each request routed at its arrival by
    the registered ``router`` (made with ``seed``) among the replicas that can serve it. A
    router that reads no replica's state routes every request up front, and each replica then
    runs its share on its own: exactly a single engine on that share."""
    wall0 = time.perf_counter()
    if not arenas:
        raise SchedlabError("a cluster needs at least one replica")
    names = [schedulers] * len(arenas) if isinstance(schedulers, str) else list(schedulers)
    if len(names) != len(arenas):
        raise SchedlabError(f"a cluster of {len(arenas)} replicas needs one scheduler or one per replica, "
                            f"got {len(names)}")
    chooser = registry.make_router(router, seed=seed)
    check_servable(trace, EngineConfig(block_size=arenas[0].limits.block_size))  # the trace's own rules
    fits = np.stack([servable(trace, arena) for arena in arenas])
    lost = np.flatnonzero(~fits.any(axis=0))
    if lost.size:
        i = int(lost[0])
        tokens = int(trace["prompt_tokens"].iat[i] + trace["output_tokens"].iat[i])
        raise SchedlabError(f"request {int(trace['request_id'].iat[i])} ({tokens} tokens) fits no replica's context "
                            f"and KV blocks, nor do {lost.size - 1} more; no request is dropped, so the run stops")
    requests = Requests(trace, warmup_s)
    replicas = []
    for r, (name, arena) in enumerate(zip(names, arenas)):
        # a replica behind a router has no trace of its own in advance
        replicas.append(Replica(r, requests, scheduler_for(name, None, arena), arena))
    cluster = Cluster(replicas, requests)
    chooser.bind(cluster)
    everyone = np.arange(len(replicas))
    some = not fits.all()
    where = np.full(len(trace), -1, np.int64)
    arrival, rid = requests.arrival, trace["request_id"].to_numpy(np.int64)
    for i in range(len(trace)):
        if chooser.reads_state:  # the replicas as they stand at the arrival (else routed up front)
            t = float(arrival[i])
            for rep in replicas:
                rep.advance(t)
        candidates = np.flatnonzero(fits[:, i]) if some else everyone
        r = chooser.route(i, candidates)
        if r not in candidates:
            raise SchedlabError(f"router {router!r} chose replica {r} for request {int(rid[i])}, which only "
                                f"{candidates.tolist()} can serve")
        where[i] = r
        replicas[r].take(i)
    for rep in replicas:
        rep.advance(np.inf)
    return _result(requests, replicas, where, names, router, time.perf_counter() - wall0)


def _result(requests: Requests, replicas: list[Replica], where: np.ndarray, names: list[str], router: str,
            wall_s: float) -> ClusterResult:
    frame = requests.log.frame(0.0)
    # each request's tokens reach the client through its own replica's way out
    output_s = np.array([rep.step_time.output_s for rep in replicas])[where]
    frame["first_token_s"] = requests.log.first_tok + output_s
    frame["finish_s"] = requests.log.finish + output_s
    frame["replica"] = where
    runs = []
    for rep in replicas:
        mine = frame[frame["replica"] == rep.index].drop(columns="replica").reset_index(drop=True)
        counts = rep._cache_counts() if rep.prefix is not None else None
        runs.append(RunResult(requests=mine, gaps=rep.log.gaps, class_gaps=rep.log.class_gaps, steps=rep.steps,
                              busy_s=rep.busy, peak_kv_blocks=rep.peak, kv_capacity_blocks=rep.limits.kv_capacity_blocks,
                              sched_overhead_s=rep.arrive_s + rep.scheduler.overhead_s, wall_s=wall_s,
                              prefix_cache=counts))
    return ClusterResult(frame, GapHistogram.merged([run.gaps for run in runs]), runs, names, router, wall_s)


def _engine_figures(runs: list[RunResult], n_requests: int) -> dict:
    steps = sum(run.steps for run in runs)
    return {
        "sched_overhead_us_per_req": sum(run.sched_overhead_s for run in runs) / max(n_requests, 1) * 1e6,
        "mean_step_ms": sum(run.busy_s for run in runs) / max(steps, 1) * 1e3,
        "peak_kv_blocks": sum(run.peak_kv_blocks for run in runs),
        "kv_capacity_blocks": sum(run.kv_capacity_blocks for run in runs),
        "preemptions": int(sum(int(run.requests["preemptions"].sum()) for run in runs)),
    }


def cluster_summary(result: ClusterResult, identity: dict) -> tuple[dict, pd.DataFrame]:
    """The cluster-wide run summary of the contract (plus ``router`` and ``replicas``; engine
    figures summed over the replicas, the mean step over all their steps; ``policy`` the
    replicas' scheduler, their names joined by ``+`` where they differ) and one summary per
    replica (plus ``replica``), as a table."""
    runs = result.replicas
    policy = "+".join(dict.fromkeys(result.schedulers))
    summary = summarize(result.requests, result.gaps, policy=policy, backend="sim", **identity)
    summary.update(_engine_figures(runs, len(result.requests)))
    summary.update(router=result.router, replicas=len(runs), wall_s=result.wall_s)
    rows = []
    for r, run in enumerate(runs):
        row = summarize(run.requests, run.gaps, policy=result.schedulers[r], backend="sim", **identity)
        row.update(_engine_figures([run], len(run.requests)))
        row.update(router=result.router, replica=r)
        rows.append(row)
    return summary, pd.DataFrame(rows)
