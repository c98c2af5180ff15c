"""Paper C's experiments, each a table: the rate sweep of one scheduler at one paying share
(summaries, prompt-length buckets, KV/queue timelines), serving capacity by bisection, the
engine-model parameter studies (Fig. 6), the throughput-optimality study and its routing claim
across identical engines."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from schedlab import registry
from schedlab.cluster import run_cluster
from schedlab.engine import Arena, run
from schedlab.engine.steptime import StepTimeModel
from schedlab.errors import SchedlabError
from schedlab.limits import check_work
from schedlab.slai.lineups import (ROUTING_FACTORS, ROUTING_REPLICAS, ROUTING_ROUTERS, ROUTING_SCHEDULERS,
                                    THROUGHPUT_SCHEDULERS)
from schedlab.slai.run import by_bucket, summary
from schedlab.simulate import scheduler_for, serve
from schedlab.builders.sarathi import Sarathi
from schedlab.workload.openchat import TBT_TARGET_S, openchat_trace


@dataclass(frozen=True)
class Setup:
    """What every run shares: the length pool, the arena (``None`` where a real engine serves
    the runs), the run length, the backend (``sim``, or ``vllm-sim`` with ``model``'s
    architecture) and the classes' TBT targets."""

    pool: pd.DataFrame
    arena: Arena | None
    duration_s: float = 2100.0
    warmup_s: float = 120.0
    backend: str = "sim"
    model: str = "mistral-7b"
    targets: dict[str, float] = field(default_factory=lambda: dict(TBT_TARGET_S))

    def trace(self, rate: float, share: float, seed: int) -> pd.DataFrame:
        return openchat_trace(self.pool, rate, self.duration_s, share, seed, self.targets)

    def run(self, scheduler: str, rate: float, share: float, seed: int):
        trace = self.trace(rate, share, seed)
        res = serve(trace, scheduler, self.arena, warmup_s=self.warmup_s, sample_s=1.0, backend=self.backend,
                    model=self.model)
        keys = {"scheduler": scheduler, "share": share, "rate": rate, "seed": seed}
        return res, summary(res, trace, policy=scheduler, backend=self.backend, workload="openchat", **keys)


def sweep(setup: Setup, scheduler: str, share: float, rates, seeds) -> dict[str, pd.DataFrame]:
    """``summary`` (one row per rate x seed), ``buckets`` and ``timeline`` tables."""
    rows, buckets, timelines = [], [], []
    for rate in rates:
        for seed in seeds:
            res, s = setup.run(scheduler, rate, share, seed)
            keys = {"scheduler": scheduler, "share": share, "rate": rate, "seed": seed}
            rows.append(s)
            buckets.append(by_bucket(res, setup.duration_s).assign(**keys))
            timelines.append(res.timeline.assign(**keys))
    return {"summary": pd.DataFrame(rows), "buckets": pd.concat(buckets), "timeline": pd.concat(timelines)}


def capacity(setup: Setup, grid: pd.DataFrame, *, iterations: int = 3, growth: float = 1.25,
             extensions: int = 3) -> pd.DataFrame:
    """Serving capacity per scheduler (highest rate whose median TTFT <= 0.5 s with every class
    within its P99 TBT target): bracketed by the sweep's rates (``grid``: summaries of one share,
    first seed), or above the top one by rates ``growth`` times higher (at most ``extensions``
    of them), then bisected ``iterations`` times. ``bound`` says whether the capacity is
    ``bracketed``, ``at least`` the highest rate tried or ``below`` the lowest."""
    rows = []
    for (scheduler, share), runs in grid.groupby(["scheduler", "share"], sort=True):
        runs = runs[runs["seed"] == runs["seed"].min()].sort_values("rate")
        seed = int(runs["seed"].iloc[0])
        within = lambda rate: setup.run(scheduler, rate, share, seed)[1]["within_capacity"]
        ok = runs["within_capacity"].to_numpy(bool)
        rates = runs["rate"].to_numpy(float)
        if not ok[0]:
            rows.append((scheduler, share, 0.0, "below"))
            continue
        if ok.all():
            lo, hi = rates[-1], None
            for _ in range(extensions):
                rate = round(lo * growth, 4)
                if not within(rate):
                    hi = rate
                    break
                lo = rate
            if hi is None:
                rows.append((scheduler, share, lo, "at least"))
                continue
        else:
            first_out = int(np.argmin(ok))
            lo, hi = rates[first_out - 1], rates[first_out]
        for _ in range(iterations):
            mid = round((lo + hi) / 2, 4)
            lo, hi = (mid, hi) if within(mid) else (lo, mid)
        rows.append((scheduler, share, lo, "bracketed"))
    return pd.DataFrame(rows, columns=["scheduler", "share", "capacity_rps", "bound"])


# -- engine-model parameter studies (Fig. 6) --------------------------------------------------
def _burst(n: int, prompt: int, output: int) -> pd.DataFrame:
    return pd.DataFrame({"request_id": np.arange(n), "arrival_s": np.zeros(n),
                         "prompt_tokens": prompt, "output_tokens": output})


def budget_study(arena: Arena, budgets=(64, 128, 256, 512, 1024, 2048, 4096, 8192),
                 n: int = 100, prompt: int = 2048) -> pd.DataFrame:
    """Fig. 6a: median TTFT and mean batch time vs token budget, ``n`` requests of ``prompt``
    tokens and one output token all waiting at t = 0 (Sarathi, FCFS)."""
    rows = []
    for b in budgets:
        res = run(_burst(n, prompt, 1), Sarathi(budget=b, max_active=n), arena)
        ttft = res.requests["first_token_s"] - res.requests["arrival_s"]
        rows.append({"budget": b, "p50_ttft_s": float(ttft.median()), "mean_batch_ms": res.busy_s / res.steps * 1e3})
    return pd.DataFrame(rows)


def kv_study(arena: Arena, counts=tuple(range(0, 161, 8)), prompt: int = 2048) -> pd.DataFrame:
    """Fig. 6b: KV-cache use with ``n`` concurrent decode requests of ``prompt``-token prompts
    (each holding its prompt and first generated token)."""
    lim = arena.limits
    blocks = lim.encoder_blocks + -(-(prompt + 1) // lim.block_size)
    return pd.DataFrame({"n_decode": counts, "kv_frac": [n * blocks / lim.kv_capacity_blocks for n in counts]})


def mixed_batch_study(model: StepTimeModel, decodes=tuple(range(0, 129, 4)), budget: int = 512, ctx: int = 513) -> pd.DataFrame:
    """Fig. 6c: batch time with ``d`` decodes (context ``ctx`` each) beside one prefill chunk
    filling the rest of the token budget (from position 0)."""
    d = np.asarray(decodes)
    c = budget - d
    return pd.DataFrame({"n_decode": d, "prefill_tokens": c,
                         "batch_ms": np.asarray(model(0, c, d, d * ctx, c * (c + 1) // 2)) * 1e3})


# -- throughput optimality --------------------------------------------------------------------
def engine_models(setup: Setup, tile_col: int = 128) -> dict[str, Arena]:
    """The calibrated engine on the 48 GB card; the theory's batch time (the same terms
    without the fixed per-batch cost: tile staircase, per-token and attention terms); and the
    theory's batch time with KV memory for ``tile_col`` requests of the longest length."""
    arena, lim = setup.arena, setup.arena.limits
    theory = replace(arena, step_time=replace(arena.step_time, intercept=0.0))
    roomy = theory.with_limits(kv_capacity_blocks=max(lim.kv_capacity_blocks, tile_col * 8192 // lim.block_size))
    return {"calibrated": arena, "no fixed cost": theory, "no fixed cost, memory for tile_col": roomy}


def saturation(setup: Setup, scheduler: str, arena: Arena, n: int = 1500, seed: int = 0) -> float:
    """Highest stable arrival rate: completions per second with a backlog of ``n`` requests
    (FCFS schedulers serve them in arrival order), over the middle 80% of completions."""
    rng = np.random.default_rng([seed, 1])
    rows = rng.integers(len(setup.pool), size=n)
    trace = _burst(n, 0, 0).assign(prompt_tokens=setup.pool["prompt_tokens"].to_numpy(np.int64)[rows],
                                   output_tokens=setup.pool["output_tokens"].to_numpy(np.int64)[rows])
    finish = np.sort(run(trace, scheduler_for(scheduler), arena).requests["finish_s"])
    lo, hi = int(0.1 * n), int(0.9 * n)
    return (hi - lo) / float(finish[hi] - finish[lo])


def throughput(setup: Setup, schedulers=THROUGHPUT_SCHEDULERS, factors=(0.9, 1.1), seed: int = 0,
               backlog: int = 1500, queue_duration_s: float = 1200.0) -> dict[str, pd.DataFrame]:
    """``capacity``: saturation throughput (a ``backlog`` of requests) per (engine model,
    scheduler); ``queue``: waiting and active requests over time at ``factors`` x that
    capacity (Poisson arrivals for ``queue_duration_s``, p = 5%)."""
    rows, queues = [], []
    for kind, arena in engine_models(setup).items():
        for scheduler in schedulers:
            rate = saturation(setup, scheduler, arena, n=backlog, seed=seed)
            rows.append({"engine_model": kind, "scheduler": scheduler, "saturation_rps": rate})
            for f in factors:
                trace = openchat_trace(setup.pool, f * rate, queue_duration_s, 0.05, seed, setup.targets)
                res = serve(trace, scheduler, arena, sample_s=5.0)
                queues.append(res.timeline.assign(engine_model=kind, scheduler=scheduler, factor=f, rate=f * rate))
    if not rows:
        raise SchedlabError("no scheduler given")
    return {"capacity": pd.DataFrame(rows), "queue": pd.concat(queues, ignore_index=True)}


# -- routing across identical engines ---------------------------------------------------------


def routing(setup: Setup, schedulers=ROUTING_SCHEDULERS, routers=ROUTING_ROUTERS, replicas=ROUTING_REPLICAS,
            factors=ROUTING_FACTORS, *, share: float = 0.05, seed: int = 0, backlog: int = 1500) -> pd.DataFrame:
    """Paper C's claim that random routing across identical engines keeps the system
    throughput-optimal: for each scheduler, one engine's saturation throughput ``mu``
    (:func:`saturation`, a ``backlog`` at t = 0), then clusters of each size ``N`` of
    ``replicas`` under each router, offered Poisson arrivals at ``factor x N x mu`` for
    ``setup.duration_s`` (paying ``share``). One row per run: the rate served per engine (requests
    finished between the warm-up and the end of arrivals, per second and engine), its ratio to
    ``mu`` and to the offered rate, the requests left per engine when arrivals end, and the
    measured requests' TTFT and E2E latency percentiles."""
    rows = []
    window = setup.duration_s - setup.warmup_s
    for scheduler in schedulers:
        mu = saturation(setup, scheduler, setup.arena, n=backlog, seed=seed)
        # n engines take n times one's requests; a router that reads the replicas' state advances
        # every replica at each arrival
        visits = sum(n * (n if registry.router_entry(r).cls.reads_state else 1) for r in routers for n in replicas)
        check_work(sum(factors) * mu * setup.duration_s * visits,
                   f"the routing study of {scheduler} ({len(replicas)} cluster sizes up to {max(replicas)} replicas "
                   f"(--replicas), offered up to {max(factors):g}x its {mu:.3g} req/s each (--factors), "
                   f"for {setup.duration_s:g} s)")
        for n in replicas:
            for factor in factors:
                trace = openchat_trace(setup.pool, factor * n * mu, setup.duration_s, share, seed, setup.targets)
                for router in routers:
                    req = run_cluster(trace, scheduler, [setup.arena] * n, router, seed=seed,
                                      warmup_s=setup.warmup_s).requests
                    finish = req["finish_s"].to_numpy(float)
                    served = np.count_nonzero((finish >= setup.warmup_s) & (finish <= setup.duration_s)) / window / n
                    measured = req[req["arrival_s"] >= setup.warmup_s]
                    ttft = (measured["first_token_s"] - measured["arrival_s"]).to_numpy(float) * 1e3
                    e2el = (measured["finish_s"] - measured["arrival_s"]).to_numpy(float) * 1e3
                    rows.append({
                        "scheduler": scheduler, "replicas": n, "router": router, "factor": factor,
                        "saturation_rps": mu, "offered_rps_per_engine": factor * mu,
                        "served_rps_per_engine": served, "served_per_saturation": served / mu,
                        "served_per_offered": served / (factor * mu),
                        "left_per_engine": np.count_nonzero(finish > setup.duration_s) / n,
                        "p50_ttft_ms": float(np.median(ttft)), "p99_ttft_ms": float(np.percentile(ttft, 99)),
                        "p50_e2el_ms": float(np.median(e2el)), "p99_e2el_ms": float(np.percentile(e2el, 99)),
                    })
    if not rows:
        raise SchedlabError("no scheduler given")
    return pd.DataFrame(rows)
