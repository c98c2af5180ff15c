"""One entrant on one trace, on the arena's engine (or on each replica of a cluster of them
behind a router), scored on the tournament's metrics.

Metrics: the run summary's P50/P90/P99 TTFT and E2EL, P99 TBT (``p99_itl_ms``, every token gap
of every request), throughput; SLO attainment (share of requests that finished within every
target that applies to them) and paper D's ``G`` (requests on time per second of summed
end-to-end latency).
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd

from schedlab import progress
from schedlab.cluster import run_cluster
from schedlab.engine import Arena
from schedlab.metrics import latency_columns, summarize
from schedlab.registry import Entry
from schedlab.simulate import serve
from schedlab.tournament.workloads import trace as workload_trace


def play(entrant: Entry, trace: pd.DataFrame, arena: Arena):
    """Per-request results and the token-gap histogram of ``entrant`` serving ``trace`` on the
    one engine."""
    result = serve(trace, entrant.name, arena)
    return result.requests, result.gaps


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


def match(entrant: Entry, trace: pd.DataFrame, arena: Arena, **identity) -> dict:
    """The tournament row of one run."""
    t0 = time.perf_counter()
    with progress.stage(f"{identity.get('workload', 'match')}: {entrant.name} at load {identity.get('load', '-')}",
                        total=len(trace)):
        requests, gaps = play(entrant, trace, arena)
    row = summarize(requests, gaps, policy=entrant.name, paper=entrant.paper, kind=entrant.kind, **identity)
    row.update(slo_score(requests, trace))
    row["preemptions"] = int(requests["preemptions"].sum())
    row["wall_s"] = time.perf_counter() - t0
    return row


def cluster_match(entrant: Entry, trace: pd.DataFrame, arena: Arena, router: str, replicas: int,
                  **identity) -> dict:
    """The cluster study's row of one run: ``entrant`` on each of ``replicas`` engines of
    ``arena`` behind ``router``, scored as :func:`match` scores one engine (plus ``router``,
    ``replicas`` and the prefix cache's hit rate)."""
    t0 = time.perf_counter()
    result = run_cluster(trace, entrant.name, [arena] * replicas, router)
    row = summarize(result.requests, result.gaps, policy=entrant.name, paper=entrant.paper, kind=entrant.kind,
                    router=router, replicas=replicas, **identity)
    row.update(slo_score(result.requests, trace))
    row["preemptions"] = int(result.requests["preemptions"].sum())
    row["wall_s"] = time.perf_counter() - t0
    return row


def capacity(spec: dict, pools: dict[str, pd.DataFrame], arena: Arena, reference: Entry) -> float:
    """Requests per second ``reference`` sustains on a backlog of the workload's requests."""
    backlog = workload_trace(spec, pools, float("inf"), max_tokens=arena.max_tokens)
    with progress.stage(f"capacity: {reference.name} on a backlog", total=len(backlog)):
        requests, _ = play(reference, backlog, arena)
    return len(requests) / float(requests["finish_s"].max())
