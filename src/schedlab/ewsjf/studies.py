"""Paper B's experiments on the ``sim`` engine, each a table.

- :func:`queue_count`: FCFS (one queue), static k-means partitions (5/10/30 queues) and
  Refine-and-Prune (EWSJF, its own count): completion time, req/s, tok/s, utilisation, tails;
- :func:`load`: FCFS vs EWSJF across workload sizes and arrival rates;
- :func:`tuning`: the meta-optimiser's trials (reward, terms, parameters, the relative
  priority it gives short/medium/long prompts);
- :func:`starvation`: waiting long prompts over time under FCFS, greedy SJF and EWSJF, and
  each policy's mean TTFT of short requests;
- :func:`sharing`: Table 3 again at each of a range of sharing levels (documents asked 1..q
  times), the engine's prefix cache on, FCFS calibrated anew at each level (the paper's row
  alone), every other row a prediction.

Partitions start from Refine-and-Prune (or k-means) on a *history* window: a separately
seeded trace of the same kind, as the paper partitions on past traffic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from schedlab.ewsjf import workload
from schedlab.ewsjf.optimise import Tuner, params_of, values_of
from schedlab.ewsjf.partition import kmeans_bands, refine_and_prune
from schedlab.ewsjf.policy import EWSJF, Params
from schedlab.ewsjf.score import PrefillModel, score
from schedlab.latency.catalogue import Hardware, ModelArch, kv_capacity_blocks
from schedlab.metrics import latency_columns, summarize
from schedlab import registry
from schedlab.policies import Policy
from schedlab.engine import Arena, ContinuousBatching, EngineConfig, RunResult, run as serve

HISTORY = 4096
KMEANS = (5, 10, 30)
#: Representative prompt lengths of the short, medium and long queues (Fig. 2).
CLASSES = {"short": 256, "medium": 1024, "long": 3072}
#: The reference wait at which Fig. 2's relative priorities are read (seconds).
REFERENCE_WAIT_S = 10.0


@dataclass(frozen=True)
class Setup:
    """The calibrated arena and the length pools."""

    arena: Arena
    short: pd.DataFrame
    long: pd.DataFrame
    #: Questions per document of the long prompts (1: no sharing data; see :mod:`.workload`).
    questions_per_doc: int = 1

    @property
    def prefill(self) -> PrefillModel:
        return PrefillModel.from_steptime(self.arena.step_time)

    def trace(self, kind: str, n: int, rate: float, seed: int) -> pd.DataFrame:
        return workload.trace(kind, self.short, self.long, n, rate, seed, questions_per_doc=self.questions_per_doc)

    def history(self, kind: str, seed: int) -> np.ndarray:
        return self.trace(kind, HISTORY, 1.0, seed + 10_000)["prompt_tokens"].to_numpy()


def engine_limits(hw: Hardware, arch: ModelArch, prefix_caching: bool = False) -> EngineConfig:
    """vLLM's defaults (256 sequences, 8,192 batched tokens) and ``hw``'s KV capacity; its
    prefix cache on or off (vLLM 0.11's default: on)."""
    return EngineConfig(kv_capacity_blocks=kv_capacity_blocks(hw, arch), prefix_caching=prefix_caching)


def policy_for(method: str, setup: Setup, params: Params, history: np.ndarray, tuner: Tuner | None = None) -> Policy:
    """``fcfs``, ``sjf-prompt``, ``kmeans-<k>`` (static), ``ewsjf`` (Refine-and-Prune, learning),
    ``ewsjf-uncached`` (the same, its score costing the tokens the prefix cache does not hold)."""
    if method.startswith("kmeans-"):
        return EWSJF(params, setup.prefill, kmeans_bands(history, int(method.split("-")[1])), learn=False)
    if method in ("ewsjf", "ewsjf-uncached"):
        bands = refine_and_prune(history, alpha=params.alpha, max_queues=params.max_queues)
        return EWSJF(params, setup.prefill, bands, tuner=tuner, cache_aware=method == "ewsjf-uncached")
    return registry.make(method, kind=registry.QUEUE)


def run(setup: Setup, trace: pd.DataFrame, policy: Policy) -> tuple[RunResult, dict]:
    """One simulation and its summary, with paper B's extra columns."""
    result = serve(trace, ContinuousBatching(policy), setup.arena)
    req = result.requests
    s = summarize(req, result.gaps, policy=policy.name)
    lat = latency_columns(req)
    span = s["completed"] / s["throughput_rps"]
    short = (trace["task"] == "short").to_numpy()
    s.update(
        completion_s=span,
        utilisation=result.busy_s / span,
        p95_ttft_ms=float(np.percentile(lat["ttft_ms"], 95)),
        p95_e2el_ms=float(np.percentile(lat["e2el_ms"], 95)),
        mean_ttft_short_ms=float(lat["ttft_ms"][short].mean()) if short.any() else math.nan,
        mean_ttft_long_ms=float(lat["ttft_ms"][~short].mean()) if (~short).any() else math.nan,
        queues=policy.dispatch.peak if isinstance(policy, EWSJF) else 1,
        wall_s=result.wall_s,
    )
    return result, s


def queue_count(setup: Setup, params: Params, kind: str, n: int, rate: float, seed: int = 0,
                methods: tuple[str, ...] | None = None) -> pd.DataFrame:
    """Paper Tables 3, 8 and 9: one row per partition method on one workload."""
    trace, history = setup.trace(kind, n, rate, seed), setup.history(kind, seed)
    rows = []
    for method in methods or ("fcfs", *(f"kmeans-{k}" for k in KMEANS), "ewsjf"):
        _, s = run(setup, trace, policy_for(method, setup, params, history))
        rows.append({"workload": kind, "n": n, "rate": rate, "seed": seed, "method": method, **s})
    return pd.DataFrame(rows)


def load(setup: Setup, params: Params, sizes, rates, seed: int = 0, policies=("fcfs", "ewsjf")) -> pd.DataFrame:
    """Paper Tables 4-7: throughput per (size, rate, policy) on the mixed workload."""
    history = setup.history("mixed", seed)
    rows = []
    for n in sizes:
        for rate in rates:
            trace = setup.trace("mixed", n, rate, seed)
            for method in policies:
                _, s = run(setup, trace, policy_for(method, setup, params, history))
                rows.append({"n": n, "rate": rate, "seed": seed, "method": method, **s})
    return pd.DataFrame(rows)


def relative_priority(params: Params, history: np.ndarray, prefill: PrefillModel) -> dict[str, float]:
    """Scores of representative short/medium/long heads after :data:`REFERENCE_WAIT_S`, in the
    partition ``params`` give the history window, normalised to sum to 1."""
    bands = refine_and_prune(history, alpha=params.alpha, max_queues=params.max_queues)
    los = [b.lo for b in bands]
    raw = {}
    for name, b in CLASSES.items():
        i = max(0, int(np.searchsorted(los, b, side="right")) - 1)
        raw[name] = score(i + 1, b, REFERENCE_WAIT_S, params.weights.at(bands[i].mean), prefill)
    total = sum(raw.values())
    return {k: v / total for k, v in raw.items()}


def tuning(
    setup: Setup, n: int, rate: float, trial_s: float, max_trials: int, seed: int = 0, n_startup: int = 4
) -> tuple[pd.DataFrame, Params]:
    """Paper Figs. 2 and 5: the tuner beside one run. Returns the trial table and the best
    parameters found."""
    history = setup.history("mixed", seed)
    tuner = Tuner(trial_s, seed=seed, n_startup=n_startup, max_trials=max_trials, start=Params())
    policy = policy_for("ewsjf", setup, Params(), history, tuner)
    run(setup, setup.trace("mixed", n, rate, seed), policy)
    table = tuner.table()
    prio = [relative_priority(params_of(row), history, setup.prefill) for row in tuner.history]
    return pd.concat([table, pd.DataFrame(prio).add_prefix("priority_")], axis=1), tuner.best()


def backlog(requests: pd.DataFrame, task: np.ndarray, grid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Requests of ``task`` waiting (arrived, not yet admitted) at each time of ``grid``, and
    the age of the oldest of them (0 when none waits): starvation shows as an age that keeps
    growing."""
    arrive = requests["arrival_s"].to_numpy()[task]
    admit = requests["first_scheduled_s"].to_numpy()[task]
    count = np.searchsorted(np.sort(arrive), grid, side="right") - np.searchsorted(np.sort(admit), grid, side="right")
    waiting = (arrive[None, :] <= grid[:, None]) & (admit[None, :] > grid[:, None])
    oldest = np.where(waiting, grid[:, None] - arrive[None, :], 0.0).max(axis=1, initial=0.0)
    return count, oldest


def starvation(
    setup: Setup, params: Params, n: int, rates, seed: int = 0, points: int = 200
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Paper Fig. 6 and the short-TTFT comparison at each rate: (the waiting requests of each
    class over time and the oldest one's age, per-policy summaries)."""
    history = setup.history("mixed", seed)
    timelines, summaries = [], []
    for rate in rates:
        trace = setup.trace("mixed", n, rate, seed)
        runs = {m: run(setup, trace, policy_for(m, setup, params, history)) for m in ("fcfs", "sjf-prompt", "ewsjf")}
        end = max(float(r.requests["finish_s"].max()) for r, _ in runs.values())
        grid = np.linspace(0.0, end, points)
        for method, (result, s) in runs.items():
            summaries.append({"method": method, "rate": rate, "n": n, **s})
            for task in ("long", "short"):
                count, oldest = backlog(result.requests, (trace["task"] == task).to_numpy(), grid)
                timelines.append(pd.DataFrame({
                    "rate": rate, "method": method, "task": task, "time_s": grid, "waiting": count, "oldest_wait_s": oldest,
                }))
    return pd.concat(timelines, ignore_index=True), pd.DataFrame(summaries)


def with_params(table: pd.DataFrame, params: Params) -> pd.DataFrame:
    """``table`` with the EWSJF parameters it ran with, as columns."""
    return table.assign(**{f"param_{k}": v for k, v in values_of(params).items()})



#: Table 3's rows, and EWSJF costing uncached tokens, at every sharing level.
SHARING_METHODS = ("fcfs", *(f"kmeans-{k}" for k in KMEANS), "ewsjf", "ewsjf-uncached")


def sharing(setup: Setup, params: Params, levels, n: int, rate: float, saturation_rps: float, overload_rate: float,
            calibration_n: int, seed: int = 0) -> pd.DataFrame:
    """Table 3 at each sharing level (questions per document of the long prompts, 1 = none),
    the prefix cache on. ``setup``'s arena carries the *uncalibrated* step-time model: at each
    level FCFS alone is calibrated (its compute factor chosen so that it saturates at
    ``saturation_rps`` on ``calibration_n`` requests at ``overload_rate``, the paper's
    procedure), then every method serves ``n`` requests at ``rate``. Rows carry the level,
    the factor, and the prefix cache's hit rate."""
    from schedlab.fit.calibrate import saturation_factor

    base = setup.arena.with_limits(prefix_caching=True)
    rows = []
    for q in levels:
        at = replace(setup, arena=base, questions_per_doc=int(q))
        compute = saturation_factor(base, at.trace("mixed", calibration_n, overload_rate, seed), saturation_rps)
        calibrated = replace(at, arena=replace(base, step_time=base.step_time.scaled(compute, 1.0)))
        table = queue_count(calibrated, params, "mixed", n, rate, seed, methods=SHARING_METHODS)
        rows.append(table.assign(questions_per_doc=int(q), compute=compute))
    return pd.concat(rows, ignore_index=True)
