"""The cluster's event loop, its results and their summaries (see :mod:`schedlab.cluster`)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from schedlab import progress, registry
from schedlab.cluster.replica import Replica
from schedlab.engine import Arena, EngineConfig, RunResult, check_servable
from schedlab.engine.core import Engine
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
    """What a router reads (see :mod:`schedlab.routers`): the replicas and the requests (job
    sizes and block size of the ``first`` replica's arena)."""

    def __init__(self, replicas: list, requests: Requests, first: Arena) -> None:
        super().__init__(requests.trace, requests.sizes(first), first.limits.block_size)
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
    every, some = np.arange(len(arenas)), not fits.all()
    rid = trace["request_id"].to_numpy(np.int64)

    def route(i: int) -> int:
        """The router's choice for request ``i`` among the replicas that can serve it."""
        candidates = np.flatnonzero(fits[:, i]) if some else every
        r = chooser.route(i, candidates)
        if not isinstance(r, (int, np.integer)) or not (0 <= r < len(arenas) if not some else r in candidates):
            raise SchedlabError(f"router {router!r} chose replica {r} for request {int(rid[i])}, which only "
                                f"{candidates.tolist()} can serve")
        return r

    schedulers = names[0] if len(set(names)) == 1 else ",".join(names)
    with progress.stage(f"cluster of {len(arenas)} {schedulers} replicas behind {router}", total=requests.n):
        if chooser.reads_state:
            return _routed_at_arrivals(requests, names, arenas, router, chooser, route, wall0)
        return _routed_up_front(requests, names, arenas, router, chooser, route, warmup_s, wall0)


def _routed_at_arrivals(requests: Requests, names: list[str], arenas: list[Arena], router: str, chooser, route,
                        wall0: float) -> ClusterResult:
    """Each request routed at its arrival, the replicas run up to it first (see :mod:`.replica`)."""
    replicas = []
    for r, (name, arena) in enumerate(zip(names, arenas)):
        # a replica behind a router has no trace of its own in advance
        replicas.append(Replica(r, requests, scheduler_for(name, None, arena), arena, shows_kv=chooser.reads_kv))
    chooser.bind(Cluster(replicas, requests, arenas[0]))
    where = np.full(requests.n, -1, np.int64)
    for i, t in enumerate(requests.arrival.tolist()):
        for rep in replicas:
            if rep.wake < t:
                rep.advance(t)
        r = where[i] = route(i)
        replicas[r].take(i)
    for rep in replicas:
        rep.advance(np.inf)
    return _result(requests, replicas, where, names, router, time.perf_counter() - wall0)


class _Unread:
    """A replica as a router that reads no state (``reads_state = False``) sees it: its index
    and its limits, which do not change; reading anything else fails in one line."""

    def __init__(self, index: int, arena: Arena, router: str) -> None:
        self.index, self.limits, self._router = index, arena.limits, router

    def __getattr__(self, name: str):
        if name.startswith("__"):  # Python's own protocols (copy, pickle, numpy) look for these
            raise AttributeError(name)
        raise SchedlabError(f"router {self._router!r} reads a replica's {name!r} but says it reads no replica's "
                            "state (reads_state = False): it routes every request before any replica runs")


def _routed_up_front(requests: Requests, names: list[str], arenas: list[Arena], router: str, chooser, route,
                     warmup_s: float, wall0: float) -> ClusterResult:
    """Every request routed before any replica runs (a router that reads no replica's state
    chooses the same whenever it is asked); then each replica is the single engine on its share."""
    trace = requests.trace
    chooser.bind(Cluster([_Unread(r, arena, router) for r, arena in enumerate(arenas)], requests, arenas[0]))
    where = np.array([route(i) for i in range(requests.n)], np.int64)
    shares = [np.flatnonzero(where == r) for r in range(len(arenas))]
    runs = [Engine(trace.iloc[share].reset_index(drop=True), scheduler_for(name, None, arena), arena,
                   warmup_s=warmup_s).run() for share, name, arena in zip(shares, names, arenas)]
    order = np.argsort(np.concatenate(shares), kind="stable")
    # (a replica with no share has an empty table, whose text columns have no dtype to keep)
    frame = pd.concat([run.requests for run in runs if len(run.requests)] or [runs[0].requests], ignore_index=True)
    frame = frame.iloc[order].reset_index(drop=True)
    frame["replica"] = where
    wall = time.perf_counter() - wall0
    for run in runs:
        run.wall_s = wall
    return ClusterResult(frame, GapHistogram.merged([run.gaps for run in runs]), runs, names, router, wall)


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
        counts = rep._cache_counts(where == rep.index)
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
