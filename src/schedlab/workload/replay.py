"""Real traces replayed with their own timestamps, time-scaled to a chosen load.

A window of consecutive requests keeps the trace's arrival pattern (bursts, lulls, diurnal
drift); only the clock is stretched or squeezed, by one factor, so that the window's mean rate
is the target.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from schedlab.errors import SchedlabError
from schedlab.registry import OWN, register_workload
from schedlab.validation.documents import NonNegativeInt


def native_rate(pool: pd.DataFrame, n_requests: int, start: int = 0) -> float:
    """Mean arrival rate (req/s) of the window in the original trace."""
    t = _window(pool, n_requests, start)["timestamp_s"].to_numpy(float)
    span = t[-1] - t[0]
    if not span > 0:
        raise SchedlabError("the replay window has no time span; take more requests")
    return (len(t) - 1) / span


def _window(pool: pd.DataFrame, n_requests: int, start: int) -> pd.DataFrame:
    if "timestamp_s" not in pool:
        raise SchedlabError("a replay needs a pool with timestamp_s (a timed trace)")
    if n_requests < 2 or start < 0:
        raise SchedlabError(f"a replay needs n_requests >= 2 and start >= 0, got {n_requests}, {start}")
    ordered = pool.sort_values("timestamp_s", kind="stable").reset_index(drop=True)
    if start + n_requests > len(ordered):
        raise SchedlabError(f"the trace has {len(ordered)} requests; cannot take {n_requests} from {start}")
    return ordered.iloc[start:start + n_requests]


def replay_trace(pool: pd.DataFrame, rate: float, n_requests: int, *, start: int = 0) -> pd.DataFrame:
    """``n_requests`` consecutive requests from ``start`` arriving at their own (shifted)
    timestamps scaled so the mean rate is ``rate`` req/s. Extra pool columns (e.g. ``task``)
    are kept."""
    if not rate > 0 or not np.isfinite(rate):
        raise SchedlabError(f"replay rate must be positive and finite, got {rate}")
    scale = native_rate(pool, n_requests, start) / rate
    window = _window(pool, n_requests, start)
    t = window["timestamp_s"].to_numpy(float)
    out = window.drop(columns=["timestamp_s", "source"], errors="ignore").assign(arrival_s=(t - t[0]) * scale)
    out = out.reset_index(drop=True)
    out.insert(0, "request_id", np.arange(len(out), dtype=np.int64))
    return out[["request_id", "arrival_s", *[c for c in out.columns if c not in ("request_id", "arrival_s")]]]


def replay_at(pool: pd.DataFrame, rate: float, n_requests: int, *, start: int = 0) -> pd.DataFrame:
    """:func:`replay_trace`, and at a rate of ``inf`` the same window as a backlog (all at t = 0)."""
    out = replay_trace(pool, 1.0 if math.isinf(rate) else rate, n_requests, start=start)
    if math.isinf(rate):
        out["arrival_s"] = 0.0
    return out


@register_workload("azure-code", pools=("azure-code",), arrivals=OWN)
def azure_code(draw, start: NonNegativeInt = 0) -> pd.DataFrame:
    """The Azure 2023 code trace's requests from ``start`` on, at their own timestamps scaled to
    the rate."""
    return replay_at(draw.pools["azure-code"], draw.rate, draw.n_requests, start=start)


@register_workload("azure-conv", pools=("azure-conv",), arrivals=OWN)
def azure_conv(draw, start: NonNegativeInt = 0) -> pd.DataFrame:
    """The Azure 2023 conversation trace's requests from ``start`` on, at their own timestamps
    scaled to the rate."""
    return replay_at(draw.pools["azure-conv"], draw.rate, draw.n_requests, start=start)
