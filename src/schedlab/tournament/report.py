"""The tournament table's views: the metrics table, rankings and per-workload winners, and the
cluster study's reading."""

from __future__ import annotations

import pandas as pd

#: The table's metrics, in the order shown, and whether higher is better.
METRICS = {
    "p50_ttft_ms": False, "p90_ttft_ms": False, "p99_ttft_ms": False,
    "p50_e2el_ms": False, "p90_e2el_ms": False, "p99_e2el_ms": False,
    "p99_itl_ms": False, "throughput_rps": True, "slo_attainment": True, "g_per_s": True,
}
KEYS = ["workload", "load", "paper", "policy"]


def metrics_table(table: pd.DataFrame) -> pd.DataFrame:
    """One row per (workload, load, entrant) with the tournament's metrics (P99 TBT is
    ``p99_itl_ms``: every token gap of every request)."""
    return table[KEYS + list(METRICS) + ["pareto"]].rename(columns={"p99_itl_ms": "p99_tbt_ms"})


def ranks(table: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Each entrant's rank on ``metric`` within its (workload, load) (1 = best), as workload x
    load rows and entrant columns; ties share the better rank."""
    r = table.groupby(["workload", "load"])[metric].rank(ascending=not METRICS[metric], method="min")
    return table.assign(rank=r).pivot_table(index=["workload", "load"], columns="policy", values="rank")


def winners(table: pd.DataFrame, metric: str) -> pd.DataFrame:
    """The best entrant on ``metric`` per (workload, load), with its value and FCFS's."""
    best = table.loc[table.groupby(["workload", "load"])[metric].idxmax() if METRICS[metric]
                     else table.groupby(["workload", "load"])[metric].idxmin()]
    fcfs = table[table["policy"] == "fcfs"].set_index(["workload", "load"])[metric]
    out = best.set_index(["workload", "load"])[["policy", "paper", metric]]
    return out.assign(fcfs=fcfs.reindex(out.index)).reset_index()


def cluster_reading(cluster: pd.DataFrame) -> list[str]:
    """One sentence per workload, from the cluster study's numbers at its highest load and
    largest cluster: the (router, scheduler) pair with the lowest P99 end-to-end latency and the
    one with the highest SLO attainment, and how much the best router's tail beats round-robin's
    under the same scheduler (when round-robin played)."""
    top, big = cluster["load"].max(), cluster["replicas"].max()
    at = cluster[(cluster["load"] == top) & (cluster["replicas"] == big)]
    out = []
    for workload, g in at.groupby("workload", sort=False):
        tail = g.loc[g["p99_e2el_ms"].idxmin()]
        slo = g.loc[g["slo_attainment"].idxmax()]
        text = (f"{workload}, {big} replicas at load {top:g}: the lowest P99 E2E latency is {tail['router']} with "
                f"{tail['policy']} ({tail['p99_e2el_ms'] / 1e3:.1f} s); the highest SLO attainment is {slo['router']} "
                f"with {slo['policy']} ({slo['slo_attainment']:.1%})")
        rr = g[(g["router"] == "round-robin") & (g["policy"] == tail["policy"])]
        if not rr.empty and tail["router"] != "round-robin":
            text += (f"; under {tail['policy']}, round-robin's P99 is {rr['p99_e2el_ms'].iloc[0] / 1e3:.1f} s "
                     f"({rr['p99_e2el_ms'].iloc[0] / tail['p99_e2el_ms']:.2f}x)")
        out.append(text + ".")
    return out
