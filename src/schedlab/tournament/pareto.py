"""Median-versus-tail Pareto fronts of the tournament table."""

from __future__ import annotations

import numpy as np
import pandas as pd

#: The two latencies traded off: median and tail end-to-end latency (lower is better).
AXES = ("p50_e2el_ms", "p99_e2el_ms")
GROUP = ("workload", "load")


def front(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Points no other point dominates (no worse on both axes, better on one); NaN never is."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    le = (x[None, :] <= x[:, None]) & (y[None, :] <= y[:, None])
    lt = (x[None, :] < x[:, None]) | (y[None, :] < y[:, None])
    return ~(le & lt).any(axis=1) & np.isfinite(x) & np.isfinite(y)


def on_front(table: pd.DataFrame, axes=AXES, group=GROUP) -> pd.DataFrame:
    """``table`` with a ``pareto`` column: on its (workload, load) group's front (a cluster
    study's runs: its (workload, load, replicas) group's)."""
    if "replicas" in table:
        group = (*group, "replicas")
    mark = pd.Series(False, index=table.index)
    for _, g in table.groupby(list(group), sort=False):
        mark[g.index] = front(g[axes[0]].to_numpy(), g[axes[1]].to_numpy())
    return table.assign(pareto=mark.to_numpy())
