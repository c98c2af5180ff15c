"""Paper D's experiments, each a table: mappers compared on seeded decision sets (G,
attainment, mean latency, search time), the annealing schedule, output-length error,
perturbed predictor coefficients, and multi-instance scaling."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from schedlab.fit.latency_predictor import TERMS, LatencyPredictor
from schedlab.latency.predictor_profile import PHASES
from schedlab.engine import Arena
from schedlab.slosa.dispatch import serve, served_score
from schedlab.slosa.instances import InstanceMemory, assign
from schedlab.slosa.lengths import RunningGaussian, perturbed
from schedlab.slosa.objective import Mapping, score
from schedlab.slosa.problem import MappingProblem
from schedlab.slosa.search import AnnealConfig, anneal, arrival_order, exhaustive
from schedlab.workload.slo_mix import eligible, slo_mix_trace


@dataclass(frozen=True)
class Workload:
    """The chat and code length pools decision sets are drawn from."""

    chat: pd.DataFrame
    code: pd.DataFrame

    def decision(self, n: int, seed: int) -> pd.DataFrame:
        return slo_mix_trace(self.chat, self.code, n, np.random.default_rng([seed, n]))


def _timed(fn, *args):
    t0 = time.perf_counter()
    out = fn(*args)
    return out, (time.perf_counter() - t0) * 1e3


def _row(problem: MappingProblem, mapping: Mapping, **keys) -> dict:
    s = score(problem, mapping)
    return {**keys, "g": s.g, "attainment": s.attainment, "mean_e2e_s": s.mean_e2e_s}


def compare(
    workload: Workload,
    predictor: LatencyPredictor,
    ns,
    max_batches,
    seeds,
    *,
    exhaustive_max_n: int = 8,
    anneal_config: AnnealConfig = AnnealConfig(),
    engine: Arena | None = None,
) -> pd.DataFrame:
    """FCFS, SA (with and without the early exit) and exhaustive search (N up to
    ``exhaustive_max_n``) per (N, max batch, seed): predicted G, attainment, mean e2e and
    search time; with ``engine``, also G etc. when the mapping is served on the sim engine."""
    rows = []
    for n in ns:
        for b in max_batches:
            for seed in seeds:
                trace = workload.decision(n, seed)
                problem = MappingProblem.build(trace, predictor, b)
                cfg = replace(anneal_config, seed=seed)
                methods = {"fcfs": _timed(arrival_order, problem)}
                sa, ms = _timed(anneal, problem, cfg)
                methods["sa"] = (sa.mapping, ms)
                full, ms = _timed(anneal, problem, replace(cfg, early_exit=False))
                methods["sa-no-early-exit"] = (full.mapping, ms)
                if n <= exhaustive_max_n:
                    ex, ms = _timed(exhaustive, problem)
                    methods["exhaustive"] = (ex.mapping, ms)
                for method, (mapping, ms) in methods.items():
                    row = _row(problem, mapping, n=n, max_batch=b, seed=seed, method=method, time_ms=ms)
                    row["early_exit"] = bool(sa.early_exit) if method == "sa" else False
                    if engine is not None:
                        s = served_score(serve(trace, mapping, engine))
                        row.update(served_g=s.g, served_attainment=s.attainment, served_mean_e2e_s=s.mean_e2e_s)
                    rows.append(row)
    return pd.DataFrame(rows)


def _improvement(g: float, base: float) -> float:
    return (g / base - 1.0) * 100.0 if base > 0 else np.nan


def anneal_schedule(
    workload: Workload, predictor: LatencyPredictor, t0s, iters, seeds, *, n: int = 10, max_batch: int = 4
) -> pd.DataFrame:
    """G improvement over FCFS (%) and search time for each initial temperature and moves per
    temperature (early exit off, so every setting searches)."""
    rows = []
    for seed in seeds:
        problem = MappingProblem.build(workload.decision(n, seed), predictor, max_batch)
        base = score(problem, arrival_order(problem)).g
        for t0 in t0s:
            for it in iters:
                cfg = AnnealConfig(t0=t0, iters=it, seed=seed, early_exit=False)
                res, ms = _timed(anneal, problem, cfg)
                rows.append({"seed": seed, "t0": t0, "iters": it, "g_improvement_pct": _improvement(res.g, base), "time_ms": ms})
    return pd.DataFrame(rows)


def length_error(
    workload: Workload, predictor: LatencyPredictor, errors, seeds, *, n: int = 20, max_batch: int = 4,
    history: int = 1000,
) -> pd.DataFrame:
    """G improvement over FCFS (%) when SA maps with estimated output lengths and is judged
    on the true ones: the true lengths, the truth perturbed by each relative error, and the
    running Gaussian per task type (fed ``history`` observed lengths of each pool)."""
    rng = np.random.default_rng(0)
    estimator = RunningGaussian()
    for task, pool in (("chat", workload.chat), ("code", workload.code)):
        sample = eligible(pool)["output_tokens"].to_numpy()
        estimator.observe_many([task] * history, rng.choice(sample, history))
    rows = []
    for seed in seeds:
        trace = workload.decision(n, seed)
        truth = MappingProblem.build(trace, predictor, max_batch)
        base = score(truth, arrival_order(truth)).g
        rng = np.random.default_rng([seed, 1])
        estimates = {"exact": trace["output_tokens"].to_numpy(float)}
        estimates |= {f"±{e:.1%}": perturbed(trace["output_tokens"], e, rng) for e in errors}
        estimates["running gaussian"] = estimator.estimate(trace["task"].tolist(), rng)
        for name, lengths in estimates.items():
            guess = MappingProblem.build(trace, predictor, max_batch, output_tokens=lengths)
            mapping = anneal(guess, AnnealConfig(seed=seed)).mapping
            rows.append({"seed": seed, "estimate": name, "g_improvement_pct": _improvement(score(truth, mapping).g, base)})
    return pd.DataFrame(rows)


def coefficient_error(
    workload: Workload, predictor: LatencyPredictor, levels, seeds, *, n: int = 20, max_batch: int = 4
) -> pd.DataFrame:
    """G of SA mapping with coefficients each scaled by ``1 + U(-x, x)``, judged with the true
    ones, relative to mapping with the true coefficients (%)."""
    rows = []
    for seed in seeds:
        trace = workload.decision(n, seed)
        truth = MappingProblem.build(trace, predictor, max_batch)
        exact = score(truth, anneal(truth, AnnealConfig(seed=seed)).mapping).g
        rng = np.random.default_rng([seed, 2])
        for x in levels:
            factors = {f"{p}.{t}": 1.0 + rng.uniform(-x, x) for p in PHASES for t in TERMS}
            guess = MappingProblem.build(trace, predictor.scaled(factors), max_batch)
            g = score(truth, anneal(guess, AnnealConfig(seed=seed)).mapping).g
            rows.append({"seed": seed, "perturbation": x, "g_relative_pct": g / exact * 100.0})
    return pd.DataFrame(rows)


def multi_instance(
    workload: Workload, predictor: LatencyPredictor, instances, seeds, memory: InstanceMemory,
    *, n: int = 40, max_batch: int = 4,
) -> pd.DataFrame:
    """Requests spread over 1..k instances by free memory, mapped per instance: combined G
    improvement of SA over FCFS (%) and the scheduling time (assignment plus every mapping)."""
    rows = []
    for seed in seeds:
        trace = workload.decision(n, seed)
        for k in instances:
            t0 = time.perf_counter()
            where = assign(trace, [memory] * k)
            met = {"fcfs": 0, "sa": 0}
            total = {"fcfs": 0.0, "sa": 0.0}
            sa_ms = 0.0
            for i in range(k):
                part = trace[where == i].reset_index(drop=True)
                if part.empty:
                    continue
                problem = MappingProblem.build(part, predictor, max_batch)
                res, ms = _timed(anneal, problem, AnnealConfig(seed=seed))
                sa_ms += ms
                for method, mapping in (("fcfs", arrival_order(problem)), ("sa", res.mapping)):
                    s = score(problem, mapping)
                    met[method] += s.met
                    total[method] += s.total_e2e_s
            g = {m: met[m] / total[m] for m in met}
            rows.append({
                "seed": seed, "instances": k, "g_fcfs": g["fcfs"], "g_sa": g["sa"],
                "g_improvement_pct": _improvement(g["sa"], g["fcfs"]),
                "sa_time_ms": sa_ms, "total_time_ms": (time.perf_counter() - t0) * 1e3,
            })
    return pd.DataFrame(rows)
