"""The tournament's shared workloads, each with per-request SLO targets.

A workload spec (``config.yaml``'s ``tournament.workloads``) names a registered workload
``kind`` (:func:`schedlab.registry.workload_entries`; ``schedlab workloads`` lists them), a request
count, SLO targets (``ttft_s``, ``tpot_s``, ``e2e_s``; a missing one does not apply) and the
kind's own parameters (paper B's ``short_share``, paper C's ``share``, a replay's ``start``, ...).
openchat's classes (``paying``/``free``) have TBT targets, which are their TPOT targets here.

A spec's ``prefix_caching`` (default off) turns vLLM's prefix cache on for that workload's
matches: the prompts that share tokens (Mooncake's, the conversations') then reuse each
other's cached blocks. Its loads stay fractions of FCFS's capacity without the cache, so it
serves the same traces as the spec without it.

``trace(spec, pools, rate)`` is deterministic for the spec's seed, and every entrant gets the
same trace (drawn from the tournament's own random streams, :data:`STREAMS`). A rate of ``inf``
is a backlog (every request at t = 0), used to measure capacity. Requests the engine's context
cannot hold are left out (a server rejects them).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from schedlab import registry
from schedlab.slosa.online import SLO_COLUMNS
from schedlab.validation import check_workload_spec
from schedlab.validation.documents import SloTargets
from schedlab.workload.kinds import DROP, Draw, make_trace
from schedlab.workload.openchat import TBT_TARGET_S

SLO_KEYS = tuple(SloTargets.model_fields)
#: The tournament's random streams: arrivals, and one generator for the lengths and the pool a
#: kind builds.
STREAMS = {"arrivals": 7, "lengths": 9, "pool": 9}


def modality(spec: dict) -> str:
    return registry.workload_entry(spec["kind"]).modality


def pool_names(kind: str) -> tuple[str, ...]:
    """The pools (inputs) a kind draws from."""
    return registry.workload_entry(kind).pools


def check_spec(name: str, spec: dict) -> None:
    """Keys, types and ranges of a workload spec and its kind's parameters
    (:func:`schedlab.validation.documents.check_workload_spec`)."""
    check_workload_spec(name, spec)


def trace(spec: dict, pools: dict[str, pd.DataFrame], rate: float, *, max_tokens: int | None = None) -> pd.DataFrame:
    """One workload trace at ``rate`` req/s (``inf``: a backlog), with SLO target columns and
    the ``slo_class``/``tbt_target_s`` columns paper C's builders read."""
    checked, parameters = check_workload_spec(spec["kind"], spec)
    draw = Draw(pools, rate, n_requests=checked.n_requests, seed=checked.seed, max_tokens=max_tokens, streams=STREAMS)
    return with_slos(make_trace(checked.kind, draw, parameters, too_long=DROP), spec.get("slo", {}))


def with_slos(trace: pd.DataFrame, slo: dict) -> pd.DataFrame:
    """Per-request SLO targets: the spec's, with a class's TBT target as its TPOT target."""
    n = len(trace)
    targets = {f"slo_{k}": np.full(n, float(slo.get(k, np.nan))) for k in SLO_KEYS}
    if "tbt_target_s" in trace:
        targets["slo_tpot_s"] = trace["tbt_target_s"].to_numpy(float)
    out = trace.assign(**targets)
    if "slo_class" not in out:
        tbt = out["slo_tpot_s"].to_numpy(float)
        out = out.assign(slo_class="all", tbt_target_s=np.where(np.isnan(tbt), max(TBT_TARGET_S.values()), tbt))
    return out[[*[c for c in out.columns if c not in SLO_COLUMNS], *SLO_COLUMNS]]
