"""Paper B on a real engine: the paper's engine scaled to a smaller one, the workload's lengths
scaled with it, and the throughput table and verdict the notebook reads."""

import numpy as np
import pandas as pd
import pytest

from schedlab.engine.arena import EngineConfig
from schedlab.errors import SchedlabError
from schedlab.ewsjf.report import engine_throughput, engine_verdict
from schedlab.ewsjf.scaled import scaled_engine
from schedlab.workload.kinds import scale_lengths


def test_the_scaled_engine_keeps_the_cache_and_budget_ratios_to_the_prompts():
    paper = EngineConfig(max_num_seqs=256, max_num_batched_tokens=8192, block_size=16, kv_capacity_blocks=20_000)
    small = scaled_engine(paper, kv_tokens=40_000)  # an eighth of the paper's 320,000 tokens
    assert small.prompt_scale == 0.125 and small.max_num_seqs == 256 and small.max_num_batched_tokens == 1024
    with pytest.raises(SchedlabError, match="not smaller"):
        scaled_engine(paper, kv_tokens=400_000)
    with pytest.raises(SchedlabError, match="below the sequence cap"):
        scaled_engine(paper, kv_tokens=8_000)  # a 205-token budget for 256 sequences


def test_lengths_scale_by_their_own_factors_and_never_below_one_token():
    trace = pd.DataFrame({"request_id": [0, 1], "arrival_s": [0.0, 1.0], "prompt_tokens": [1000, 3],
                          "output_tokens": [11, 1]})
    out = scale_lengths(trace, prompt=0.126)
    assert out["prompt_tokens"].tolist() == [126, 1] and out["output_tokens"].tolist() == [11, 1]
    assert scale_lengths(trace, output=0.5)["output_tokens"].tolist() == [6, 1]
    with pytest.raises(SchedlabError, match="within"):
        scale_lengths(trace, prompt=1.5)
    with pytest.raises(SchedlabError, match="sharing data"):
        scale_lengths(trace.assign(token_ids=[np.arange(1000), np.arange(3)]), prompt=0.5)
    with pytest.raises(SchedlabError, match="speech"):
        scale_lengths(trace.assign(audio_duration_s=[3.0, 4.0]), prompt=0.5)


def _runs(ewsjf_rps):
    engine = pd.DataFrame({"policy": ["fcfs", "fcfs", "ewsjf", "ewsjf"], "throughput_rps": [10.0, 10.4, *ewsjf_rps],
                           "throughput_tok_s": [100.0, 104.0, 110.0, 112.0]})
    sim = pd.DataFrame({"policy": ["fcfs", "ewsjf"], "throughput_rps": [10.0, 10.05]})
    return engine_throughput(engine, sim)


def test_the_table_gives_each_policys_median_range_and_change_against_fcfs():
    table = _runs([11.0, 11.4])
    assert table.index.tolist() == ["fcfs", "ewsjf"]
    assert table.loc["fcfs", "engine req/s"] == pytest.approx(10.2) and table.loc["ewsjf", "engine max"] == 11.4
    assert table.loc["ewsjf", "engine vs fcfs (%)"] == pytest.approx((11.2 / 10.2 - 1) * 100)
    assert table.loc["ewsjf", "sim vs fcfs (%)"] == pytest.approx(0.5) and table.loc["fcfs", "repeats"] == 2


def test_the_verdict_counts_a_gain_only_where_the_repeats_stand_apart():
    assert "ranges overlap" in engine_verdict(_runs([10.3, 10.6]))  # EWSJF's 10.3 is inside FCFS's 10.0-10.4
    assert "sim does not hold" in engine_verdict(_runs([11.0, 11.4]))  # +9.8 % on the engine, +0.5 % on sim
    table = _runs([11.0, 11.4])
    table.loc["ewsjf", "sim vs fcfs (%)"] = 9.0
    assert "sim shows it too" in engine_verdict(table)
