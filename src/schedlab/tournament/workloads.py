"""The tournament's shared workloads, each with per-request SLO targets.

A workload spec (``config.yaml``'s ``tournament.workloads``) names a ``kind``, a request count
and SLO targets (``ttft_s``, ``tpot_s``, ``e2e_s``; a missing one does not apply). Kinds:

- ``librispeech``, ``uniform`` (ASR): paper A's populations, Poisson arrivals;
- ``mixed`` (LLM): paper B's short/long prompt mix, Poisson arrivals, outputs as in the pools;
- ``openchat`` (LLM): paper C's length pool and two classes (``paying``/``free``), whose TBT
  targets are the classes' TPOT targets;
- ``azure-code``, ``azure-conv``, ``mooncake`` (LLM): the real traces' first ``n_requests``
  replayed with their own timestamps, time-scaled to the rate; Mooncake's prompts carry their
  block hashes (``hash_ids``: which prompts share which blocks);
- ``multi-turn`` (LLM): conversations whose every turn's prompt holds the earlier turns and
  answers (:func:`schedlab.workload.shared_prefixes.multi_turn_trace`), answer lengths from paper C's
  openchat pool.

A spec's ``prefix_caching`` (default off) turns vLLM's prefix cache on for that workload's
matches: the prompts that share tokens (Mooncake's, the conversations') then reuse each
other's cached blocks. Its loads stay fractions of FCFS's capacity without the cache, so it
serves the same traces as the spec without it.

``trace(spec, pools, rate)`` is deterministic for the spec's seed, and every entrant gets the
same trace. A rate of ``inf`` is a backlog (every request at t = 0), used to measure capacity.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from schedlab.ewsjf.workload import trace as mixed_trace
from schedlab.slosa.online import SLO_COLUMNS
from schedlab.workload.arrivals import arrival_times
from schedlab.workload.asr import asr_trace, librispeech_pool, uniform_pool
from schedlab.workload.openchat import TBT_TARGET_S, openchat_requests
from schedlab.validation import check_workload_spec
from schedlab.validation.documents import SloTargets
from schedlab.workload.replay import replay_trace
from schedlab.workload.shared_prefixes import multi_turn_trace

ASR_KINDS = ("librispeech", "uniform")
REPLAY_KINDS = ("azure-code", "azure-conv", "mooncake")
SLO_KEYS = tuple(SloTargets.model_fields)


def modality(spec: dict) -> str:
    return "asr" if spec["kind"] in ASR_KINDS else "llm"


def pool_names(kind: str) -> tuple[str, ...]:
    """The pools (inputs) a kind draws from."""
    return {"librispeech": ("utterances",), "uniform": ("utterances",), "mixed": ("short", "long"),
            "openchat": ("openchat",), "multi-turn": ("openchat",)}.get(kind, (kind,))


def check_spec(name: str, spec: dict) -> None:
    """Keys, types and ranges of a workload spec (:class:`schedlab.validation.documents.WorkloadSpec`)."""
    check_workload_spec(name, spec)


def _arrivals(rate: float, n: int, seed: int) -> np.ndarray:
    return arrival_times(rate, rng=np.random.default_rng([seed, 7]), n_requests=n)


def trace(spec: dict, pools: dict[str, pd.DataFrame], rate: float, *, max_tokens: int | None = None) -> pd.DataFrame:
    """One workload trace at ``rate`` req/s (``inf``: a backlog), with SLO target columns and
    the ``slo_class``/``tbt_target_s`` columns paper C's builders read."""
    kind, n, seed = spec["kind"], int(spec["n_requests"]), int(spec.get("seed", 0))
    backlog = math.isinf(rate)
    if kind in REPLAY_KINDS:
        out = replay_trace(pools[kind], 1.0 if backlog else rate, n, start=int(spec.get("start", 0)))
        if backlog:
            out["arrival_s"] = 0.0
    elif kind == "multi-turn":
        out = multi_turn_trace(pools["openchat"], n, rate, seed, max_tokens=max_tokens)
    elif kind == "mixed":
        out = mixed_trace("mixed", pools["short"], pools["long"], n, rate, seed,
                          short_share=float(spec.get("short_share", 0.8)), mean_output=None)
    else:
        arrivals = np.zeros(n) if backlog else _arrivals(rate, n, seed)
        if kind in ASR_KINDS:
            rng = np.random.default_rng([seed, 9])
            pool = librispeech_pool(pools["utterances"]) if kind == "librispeech" else uniform_pool(pools["utterances"], rng=rng)
            out = asr_trace(pool, arrivals, rng=rng)
        else:
            out = openchat_requests(pools["openchat"], arrivals, float(spec.get("share", 0.5)), seed)
    if max_tokens is not None and modality(spec) == "llm":  # the server rejects what its context cannot hold
        out = out[out["prompt_tokens"] + out["output_tokens"] <= max_tokens].reset_index(drop=True)
        out["request_id"] = np.arange(len(out))
    return with_slos(out, spec.get("slo", {}))


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
