"""One entrant on one trace, on the arena's engine, scored on the tournament's metrics.

Metrics: the run summary's P50/P90/P99 TTFT and E2EL, P99 TBT (``p99_itl_ms``, every token gap
of every request), throughput; SLO attainment (share of requests that finished within every
target that applies to them) and paper D's ``G`` (requests on time per second of summed
end-to-end latency).
"""

from __future__ import annotations

import time
from functools import lru_cache

import numpy as np
import pandas as pd

from schedlab.engine import Arena, ContinuousBatching, run
from schedlab.engine.steptime import StepTimeModel
from schedlab.metrics import latency_columns, summarize
from schedlab.policies import make_policy
from schedlab.slai.prefill_priority import PrefillPriority
from schedlab.slai.registry import make_builder
from schedlab.slosa.online import OnlineMapper, predictor_for
from schedlab.tournament.entrants import BATCH, Entrant
from schedlab.tournament.workloads import trace as workload_trace


@lru_cache(maxsize=4)
def predictor(step_time: StepTimeModel):
    """Paper D's latency predictor, fitted to an arena's step-time model."""
    return predictor_for(step_time)


def play(entrant: Entrant, trace: pd.DataFrame, arena: Arena):
    """Per-request results and the token-gap histogram of ``entrant`` serving ``trace``, on
    the one engine: a batch builder as its scheduler, or a waiting-queue policy inside
    continuous batching."""
    if entrant.kind == BATCH:
        scheduler = _builder(entrant, arena)
    else:
        policy = OnlineMapper(trace, predictor(arena.step_time)) if entrant.name == "slo-sa" else make_policy(entrant.name)
        scheduler = ContinuousBatching(policy)
    result = run(trace, scheduler, arena)
    return result.requests, result.gaps


def _builder(entrant: Entrant, arena: Arena):
    """Paper C's builder; without chunked prefill a step must hold the longest prompt, so the
    vLLM-style one gets the model's context as its token limit, as vLLM sets it."""
    if entrant.name == "prefill-priority" and arena.max_tokens:
        return PrefillPriority(max_tokens=max(PrefillPriority().max_tokens, arena.max_tokens))
    return make_builder(entrant.name)


def slo_score(requests: pd.DataFrame, trace: pd.DataFrame) -> dict:
    """SLO attainment and G (1/s) of served requests against the trace's targets."""
    lat = latency_columns(requests) / 1e3
    targets = trace.set_index("request_id").loc[requests["request_id"]]
    ok = requests["finish_s"].notna().to_numpy().copy()  # an unfinished request misses; a one-token one has no TPOT
    for col, target in (("ttft_ms", "slo_ttft_s"), ("tpot_ms", "slo_tpot_s"), ("e2el_ms", "slo_e2e_s")):
        x, t = lat[col].to_numpy(float), targets[target].to_numpy(float)
        ok &= np.isnan(t) | np.isnan(x) | (x <= t)
    e2e = lat["e2el_ms"].to_numpy(float)
    total = float(np.nansum(e2e))
    return {"slo_attainment": float(ok.mean()) if ok.size else float("nan"),
            "g_per_s": float(ok.sum()) / total if total > 0 else float("nan")}


def match(entrant: Entrant, trace: pd.DataFrame, arena: Arena, **identity) -> dict:
    """The tournament row of one run."""
    t0 = time.perf_counter()
    requests, gaps = play(entrant, trace, arena)
    row = summarize(requests, gaps, policy=entrant.name, paper=entrant.paper, kind=entrant.kind, **identity)
    row.update(slo_score(requests, trace))
    row["preemptions"] = int(requests["preemptions"].sum())
    row["wall_s"] = time.perf_counter() - t0
    return row


def capacity(spec: dict, pools: dict[str, pd.DataFrame], arena: Arena, reference: Entrant) -> float:
    """Requests per second ``reference`` sustains on a backlog of the workload's requests."""
    backlog = workload_trace(spec, pools, float("inf"), max_tokens=arena.max_tokens)
    requests, _ = play(reference, backlog, arena)
    return len(requests) / float(requests["finish_s"].max())
