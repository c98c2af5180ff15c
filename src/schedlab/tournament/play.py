"""One entrant on one trace, on the arena's engine, scored on the tournament's metrics.

Metrics: the run summary's P50/P90/P99 TTFT and E2EL, P99 TBT (``p99_itl_ms``, every token gap
of every request), throughput; SLO attainment (share of requests that finished within every
target that applies to them) and paper D's ``G`` (requests on time per second of summed
end-to-end latency).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd

from schedlab.batching.engine import BatchEngine, KVConfig
from schedlab.batching.prefill_priority import PrefillPriority
from schedlab.batching.registry import make_builder
from schedlab.errors import SchedlabError
from schedlab.estimate import job_sizes
from schedlab.fit.kappa import kappas
from schedlab.latency.catalogue import model_arch
from schedlab.metrics import latency_columns, summarize
from schedlab.policies import make_policy
from schedlab.sim.engine import EngineConfig, Simulator
from schedlab.sim.setup import engine_config
from schedlab.sim.steptime import StepTimeModel
from schedlab.slo.online import OnlineMapper, predictor_for
from schedlab.tournament.entrants import BATCH, Entrant
from schedlab.tournament.workloads import trace as workload_trace


@dataclass(frozen=True)
class Arena:
    """One calibrated engine: its step-time model and limits, what waiting-queue policies and
    batch builders share; ``kappa`` turns audio durations into job sizes; ``max_tokens`` is the
    model's context (longer requests are rejected)."""

    step_time: StepTimeModel
    engine: EngineConfig
    kappa: dict[str, float]
    max_tokens: int | None = None

    @classmethod
    def from_spec(cls, spec: dict, modality: str) -> "Arena":
        """From an engine spec: ``steptime`` (file), ``hardware``, ``model``, engine limits
        and, for ASR, a ``kappa`` fit (file)."""
        missing = [k for k in ("steptime", "hardware", "model") if k not in spec]
        if missing:
            raise SchedlabError(f"the engine spec lacks {', '.join(missing)}")
        for key in ("steptime", "kappa"):
            if spec.get(key) and not Path(spec[key]).is_file():
                raise SchedlabError(f"file not found: {spec[key]}")
        limits = {k: spec[k] for k in ("max_num_seqs", "max_num_batched_tokens", "block_size", "gpu_memory_utilization") if k in spec}
        kappa = kappas(json.loads(Path(spec["kappa"]).read_text())) if spec.get("kappa") else {}
        context = model_arch(spec["model"]).max_target_positions if modality == "llm" else None
        return cls(StepTimeModel.load(spec["steptime"]), engine_config(spec["hardware"], spec["model"], **limits), kappa, context)

    @property
    def kv(self) -> KVConfig:
        return KVConfig(self.engine.block_size, self.engine.kv_capacity_blocks)

    @cached_property
    def predictor(self):
        """Paper D's latency predictor, fitted to this engine's step-time model."""
        return predictor_for(self.step_time)


def play(entrant: Entrant, trace: pd.DataFrame, arena: Arena):
    """Per-request results and the token-gap histogram of ``entrant`` serving ``trace``."""
    if entrant.engine == BATCH:
        run = BatchEngine(trace, _builder(entrant, arena), arena.step_time, arena.kv).run()
        return run.requests, run.gaps["all"]
    policy = OnlineMapper(trace, arena.predictor) if entrant.name == "slo-sa" else make_policy(entrant.name)
    result = Simulator(trace, policy, arena.step_time, arena.engine, job_sizes(trace, arena.kappa)).run()
    return result.requests, result.gaps


def _builder(entrant: Entrant, arena: Arena):
    """Paper C's builder; without chunked prefill a step must hold the longest prompt, so the
    vLLM-style one gets the model's context as its token limit, as vLLM sets it."""
    if entrant.name == "vllm" and arena.max_tokens:
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
    row = summarize(requests, gaps, policy=entrant.name, paper=entrant.paper, engine=entrant.engine, **identity)
    row.update(slo_score(requests, trace))
    row["preemptions"] = int(requests["preemptions"].sum())
    row["wall_s"] = time.perf_counter() - t0
    return row


def capacity(spec: dict, pools: dict[str, pd.DataFrame], arena: Arena, reference: Entrant) -> float:
    """Requests per second ``reference`` sustains on a backlog of the workload's requests."""
    backlog = workload_trace(spec, pools, float("inf"), max_tokens=arena.max_tokens)
    requests, _ = play(reference, backlog, arena)
    return len(requests) / float(requests["finish_s"].max())
