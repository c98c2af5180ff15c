"""A mapping served by an engine: batches are submitted in order, ``gap_s`` apart, each request
carrying its batch index as its ``priority`` (lower first; SJF keyed by that index is priority
scheduling, as vLLM's ``priority`` policy does). ``max_num_seqs`` is the mapping's maximum
batch size, so batches do not merge. The engine is the ``sim`` backend or vLLM's scheduler
(``vllm-sim``); on a real vLLM engine the same trace, replayed with ``schedlab vllm-run
--policy sjf``, carries the priority to schedlab's scheduler class in each request's
``vllm_xargs``."""

from __future__ import annotations


import numpy as np
import pandas as pd

from schedlab.fit.latency_predictor import REFERENCE, calibrate_roofline
from schedlab.fit.steptime import roofline_grid_steptime
from schedlab.latency.catalogue import Hardware, ModelArch, kv_capacity_blocks
from schedlab.engine import Arena, EngineConfig
from schedlab.simulate import run_summary
from schedlab.slosa.objective import Mapping, Score
from schedlab.slosa.problem import CHAT_SLO, CODE_SLO

GAP_S = 0.01


def paper_engine(hw: Hardware, arch: ModelArch) -> Arena:
    """The arena mappings are served in: the roofline calibrated to the paper's reference
    times, and engine limits with ``hw``'s KV capacity."""
    eff = calibrate_roofline(REFERENCE, hw, arch)
    return Arena(roofline_grid_steptime(hw, arch, **eff), EngineConfig(kv_capacity_blocks=kv_capacity_blocks(hw, arch)))


def serve(
    requests: pd.DataFrame,
    mapping: Mapping,
    arena: Arena,
    gap_s: float = GAP_S,
    *,
    backend: str = "sim",
    model: str | None = None,
) -> pd.DataFrame:
    """Per-request results of serving ``mapping`` (times from the decision at t = 0) on
    ``backend`` (``vllm-sim`` needs the ``model``'s architecture)."""
    rank = mapping.rank()
    trace = requests.assign(arrival_s=rank * gap_s, priority=rank).iloc[np.argsort(rank, kind="stable")]
    batched = arena.with_limits(max_num_seqs=int(mapping.sizes.max()))
    result, _ = run_summary(trace.reset_index(drop=True), "sjf", batched, identity={}, backend=backend, model=model)
    out = result.requests.assign(task=trace["task"].to_numpy())
    return out.sort_values("request_id").reset_index(drop=True)


def served_score(served: pd.DataFrame) -> Score:
    """G of served requests against the paper's SLOs (e2e measured from the decision)."""
    e2e = served["finish_s"].to_numpy(float)
    ttft = served["first_token_s"].to_numpy(float)
    o = served["output_tokens"].to_numpy(float)
    tpot = np.where(o > 1, (e2e - ttft) / np.maximum(o - 1, 1), 0.0)
    chat = (served["task"] == "chat").to_numpy()
    on_time = np.where(chat, (ttft <= CHAT_SLO["ttft_s"]) & (tpot <= CHAT_SLO["tpot_s"]), e2e <= CODE_SLO["e2e_s"])
    return Score(int(on_time.sum()), float(e2e.sum()), len(served))
