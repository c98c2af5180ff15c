"""Paper A's future work: dynamic FCFS/SJF/HRRN switching against each fixed policy, under a
workload that drifts (:mod:`schedlab.workload.drift`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from schedlab.metrics import latency_columns, summarize
from schedlab import registry
from schedlab.policies.adaptive import Adaptive, Switch
from schedlab.engine import Arena, ContinuousBatching, run
from schedlab.workload.drift import drift_trace, parse_phases

SUMMARY_KEYS = tuple(f"p{q}_{m}" for m in ("e2el_ms", "ttft_ms") for q in (50, 90, 99))


@dataclass(frozen=True)
class SwitchingStudy:
    """The study's tables (latencies in ms, times in seconds from the trace's start).

    - ``summary``: one row per policy — overall P50/P90/P99 E2EL and TTFT, throughput,
      completed requests, and the number of regime changes (0 for a fixed policy);
    - ``by_phase``: one row per (policy, phase) — requests and P50/P90/P99 E2EL, P50/P90 TTFT;
    - ``timeline``: one row per (policy, arrival window) — requests and P50/P90 E2EL;
    - ``switches``: each adaptive run's log (policy, time_s, from_policy, to_policy, regime,
      depth, tail_s);
    - ``regimes``: each adaptive run's active order as intervals (policy, start_s, end_s,
      active) up to its last completion;
    - ``phases``: the workload's phases as intervals (phase, start_s, end_s, rate, pool).
    """

    summary: pd.DataFrame
    by_phase: pd.DataFrame
    timeline: pd.DataFrame
    switches: pd.DataFrame
    regimes: pd.DataFrame
    phases: pd.DataFrame


def _quantiles(x: pd.Series, qs, suffix: str) -> dict:
    x = x.dropna().to_numpy(float)
    return {f"p{q}_{suffix}": float(np.percentile(x, q)) if x.size else float("nan") for q in qs}


def _regimes(name: str, policy: Adaptive, end_s: float) -> pd.DataFrame:
    starts = [0.0] + [s.time_s for s in policy.switches]
    active = [policy.rule.policy("shallow")] + [s.to_policy for s in policy.switches]
    return pd.DataFrame({"policy": name, "start_s": starts, "end_s": starts[1:] + [end_s], "active": active})


def switching_study(
    utterances: pd.DataFrame,
    arena: Arena,
    *,
    phases,
    seed: int = 0,
    policies=("fcfs", "sjf", "hrrn", "adaptive", "adaptive-hrrn"),
    bin_s: float = 10.0,
) -> SwitchingStudy:
    """Run each policy on one drifting trace (``phases`` as in :func:`drift_trace`) on the
    simulator, and tabulate latency overall, per phase and per ``bin_s`` window of arrival.

    Feeds paper A's switching figures: latency over time (``timeline``: x window_start_s,
    y p50_e2el_ms and p90_e2el_ms, hue policy; ``regimes`` of the ``adaptive`` run shaded by
    ``active``, ``phases`` marked), per-phase P50/P90 E2EL bars (``by_phase``: x phase, hue
    policy), and the switch log (``switches``: x time_s, y tail_s and depth). Deterministic
    for a seed: every policy sees the identical trace.
    """
    parsed = parse_phases(phases)
    trace = drift_trace(utterances, phases, seed=seed)
    phase_of, arrival = trace["phase"].to_numpy(), trace["arrival_s"].to_numpy(float)
    window = np.floor(arrival / bin_s) * bin_s
    summary, by_phase, timeline, switches, regimes = [], [], [], [], []
    for name in policies:
        policy = registry.make(name, kind=registry.QUEUE)
        result = run(trace, ContinuousBatching(policy), arena)
        s = summarize(result.requests, result.gaps)
        adaptive = isinstance(policy, Adaptive)
        summary.append({"policy": name, **{k: s[k] for k in SUMMARY_KEYS}, "throughput_rps": s["throughput_rps"],
                        "completed": s["completed"], "switches": len(policy.switches) if adaptive else 0})
        lat = latency_columns(result.requests)
        for ph in parsed:
            part = lat[phase_of == ph.name]
            by_phase.append({"policy": name, "phase": ph.name, "requests": len(part),
                             **_quantiles(part["e2el_ms"], (50, 90, 99), "e2el_ms"),
                             **_quantiles(part["ttft_ms"], (50, 90), "ttft_ms")})
        for w, part in lat.groupby(window, sort=True):
            timeline.append({"policy": name, "window_start_s": float(w), "requests": len(part),
                             **_quantiles(part["e2el_ms"], (50, 90), "e2el_ms")})
        if adaptive:
            switches.append(pd.DataFrame(policy.switches, columns=list(Switch._fields)).assign(policy=name))
            regimes.append(_regimes(name, policy, float(result.requests["finish_s"].max())))
    starts = np.concatenate([[0.0], np.cumsum([p.duration_s for p in parsed])])
    switch_cols = ["policy", *Switch._fields]
    return SwitchingStudy(
        summary=pd.DataFrame(summary),
        by_phase=pd.DataFrame(by_phase),
        timeline=pd.DataFrame(timeline),
        switches=pd.concat(switches, ignore_index=True)[switch_cols] if switches else pd.DataFrame(columns=switch_cols),
        regimes=pd.concat(regimes, ignore_index=True) if regimes else pd.DataFrame(columns=["policy", "start_s", "end_s", "active"]),
        phases=pd.DataFrame({"phase": [p.name for p in parsed], "start_s": starts[:-1], "end_s": starts[1:],
                             "rate": [p.rate for p in parsed], "pool": [p.pool for p in parsed]}),
    )
