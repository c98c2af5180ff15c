"""The tournament: timed replays, the online mapper, scoring, Pareto fronts, and whole matches."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from schedlab.data.llm_traces import azure_lengths, mooncake_lengths
from schedlab.errors import SchedlabError
from schedlab.engine import EngineConfig
from schedlab.policies import Job
from schedlab.engine.steptime import StepTimeModel
from schedlab.validation import write_steptime
from schedlab.slosa.online import OnlineMapper, predictor_for
from schedlab.tournament.entrants import lineup

#: The shipped config's entrants.
ENTRANTS = lineup(yaml.safe_load((Path(__file__).parents[1] / "config.yaml").read_text())["tournament"]["entrants"], "llm")
from schedlab.tournament.pareto import front, on_front
from schedlab.engine import Arena
from schedlab.tournament.play import capacity, match, slo_score
from schedlab.tournament.workloads import trace
from schedlab.workload.replay import native_rate, replay_trace

STEP = StepTimeModel(intercept=0.01, n_prefill_tokens=5e-5, n_decode=2e-4, ctx_tokens=2e-7)
ARENA = Arena(STEP, EngineConfig(max_num_seqs=64, max_num_batched_tokens=2048, kv_capacity_blocks=4000), max_tokens=8192)


def _timed_pool(n: int = 400, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "prompt_tokens": rng.integers(20, 3000, n), "output_tokens": rng.integers(2, 400, n),
        "source": "test", "timestamp_s": np.cumsum(rng.exponential(0.5, n)),
    })


# -- replays ----------------------------------------------------------------------------------
def test_replay_scales_time_to_the_rate_and_keeps_the_pattern():
    pool = _timed_pool()
    out = replay_trace(pool, 3.0, 200, start=50)
    assert len(out) == 200 and out["request_id"].tolist() == list(range(200))
    assert (len(out) - 1) / out["arrival_s"].iloc[-1] == pytest.approx(3.0)
    gaps = np.diff(pool["timestamp_s"].to_numpy()[50:250])
    assert np.diff(out["arrival_s"]) == pytest.approx(gaps * native_rate(pool, 200, 50) / 3.0)
    assert out["prompt_tokens"].tolist() == pool["prompt_tokens"].iloc[50:250].tolist()


def test_replay_drops_what_the_context_cannot_hold_and_rejects_bad_input():
    pool = _timed_pool()
    out = trace({"kind": "azure-code", "n_requests": 300}, {"azure-code": pool}, 2.0, max_tokens=1500)
    assert (out["prompt_tokens"] + out["output_tokens"] <= 1500).all()
    assert len(out) == int((pool.iloc[:300].eval("prompt_tokens + output_tokens") <= 1500).sum())
    with pytest.raises(SchedlabError, match="timestamp_s"):
        replay_trace(pool.drop(columns="timestamp_s"), 1.0, 10)
    with pytest.raises(SchedlabError, match="cannot take"):
        replay_trace(pool, 1.0, 300, start=200)
    with pytest.raises(SchedlabError, match="positive"):
        replay_trace(pool, 0.0, 10)


def test_trace_loaders_keep_timestamps_in_seconds_from_the_first(tmp_path):
    azure = tmp_path / "azure.csv"
    pd.DataFrame({"TIMESTAMP": ["2023-11-16 18:17:04.5", "2023-11-16 18:17:03.0", "2023-11-16 18:18:03.0"],
                  "ContextTokens": [10, 20, 30], "GeneratedTokens": [1, 2, 3]}).to_csv(azure, index=False)
    assert azure_lengths("code", azure)["timestamp_s"].tolist() == pytest.approx([1.5, 0.0, 60.0])
    moon = tmp_path / "mooncake.jsonl"
    pd.DataFrame({"timestamp": [1000, 3500], "input_length": [5, 6], "output_length": [1, 2]}).to_json(
        moon, orient="records", lines=True)
    assert mooncake_lengths(moon)["timestamp_s"].tolist() == [0.0, 2.5]
    bad = tmp_path / "bad.csv"
    pd.DataFrame({"TIMESTAMP": ["yesterday"], "ContextTokens": [1], "GeneratedTokens": [1]}).to_csv(bad, index=False)
    with pytest.raises(SchedlabError, match="TIMESTAMP"):
        azure_lengths("code", bad)


# -- the online mapper ------------------------------------------------------------------------
def test_predictor_fitted_to_a_bilinear_step_model_recovers_its_terms():
    # prefill of b prompts of l tokens: 0.01 + 5e-5*b*l; a decode step: 0.01 + 2e-4*b + 2e-7*b*l
    p = predictor_for(STEP)
    assert (p.prefill.a, p.prefill.beta, p.prefill.g, p.prefill.d) == pytest.approx((5e-5, 0, 0, 0.01), abs=1e-9)
    assert (p.decode.a, p.decode.beta, p.decode.g, p.decode.d) == pytest.approx((2e-7, 2e-4, 0, 0.01), abs=1e-9)


def _requests(slo_e2e, slo_ttft, prompts, outputs) -> pd.DataFrame:
    n = len(prompts)
    return pd.DataFrame({"request_id": np.arange(n), "prompt_tokens": prompts, "output_tokens": outputs,
                         "slo_ttft_s": slo_ttft, "slo_tpot_s": np.full(n, np.nan), "slo_e2e_s": slo_e2e})


def test_mapper_puts_the_request_that_can_still_make_its_slo_first():
    # Request 0 arrived first but is long and has no deadline; request 1 is short with a tight
    # e2e target that only holds if it goes first.
    req = _requests([np.nan, 0.5], [np.nan, np.nan], [1500, 100], [300, 5])
    mapper = OnlineMapper(req, predictor_for(STEP), max_batch=1)
    jobs = [Job(i, float(i) * 0.01, 1.0, int(p), i) for i, p in enumerate(req["prompt_tokens"])]
    for j in jobs:
        mapper.push(j)
    assert mapper.peek(0.02) is jobs[1]
    assert mapper.pop(0.02) is jobs[1] and mapper.pop(0.02) is jobs[0] and len(mapper) == 0


def test_mapper_loses_and_duplicates_nothing_and_replans_on_arrivals():
    rng = np.random.default_rng(3)
    n = 60
    req = _requests(np.where(rng.random(n) < 0.5, 30.0, np.nan), np.full(n, 10.0), rng.integers(50, 2000, n),
                    rng.integers(1, 400, n))
    mapper = OnlineMapper(req, predictor_for(STEP), window=8)
    jobs = [Job(i, i * 0.1, 1.0, int(req["prompt_tokens"][i]), i) for i in range(n)]
    popped = []
    for k, j in enumerate(jobs):
        mapper.push(j)
        if k % 3 == 2:
            now = j.arrival_s
            assert mapper.peek(now) is mapper.peek(now)
            popped.append(mapper.pop(now))
    mapper.remove(jobs[-1])
    while len(mapper):
        popped.append(mapper.pop(10.0))
    ids = [j.request_id for j in popped]
    assert sorted(ids) == list(range(n - 1))
    with pytest.raises(SchedlabError, match="slo_e2e_s"):
        OnlineMapper(req.drop(columns="slo_e2e_s"), predictor_for(STEP))


# -- scoring ----------------------------------------------------------------------------------
def test_slo_score_counts_every_target_that_applies():
    tr = pd.DataFrame({"request_id": [0, 1, 2, 3], "slo_ttft_s": [1.0, 1.0, np.nan, 1.0],
                       "slo_tpot_s": [0.1, 0.1, np.nan, 0.1], "slo_e2e_s": [np.nan, np.nan, 2.0, np.nan]})
    served = pd.DataFrame({"request_id": [0, 1, 2, 3], "arrival_s": [0.0, 0.0, 0.0, 0.0],
                           "first_token_s": [0.5, 0.5, 1.0, np.nan], "finish_s": [1.4, 2.5, 3.0, np.nan],
                           "output_tokens": [10, 11, 5, 5]})
    # 0: TTFT 0.5 and TPOT 0.1 meet; 1: TPOT 0.2 misses; 2: e2e 3 > 2 misses; 3: never finished.
    score = slo_score(served, tr)
    assert score["slo_attainment"] == 0.25
    assert score["g_per_s"] == pytest.approx(1 / (1.4 + 2.5 + 3.0))


def test_pareto_front_keeps_the_undominated():
    x, y = np.array([1.0, 2.0, 3.0, 2.0, np.nan]), np.array([5.0, 2.0, 1.0, 3.0, 0.0])
    assert front(x, y).tolist() == [True, True, True, False, False]
    table = pd.DataFrame({"workload": ["a"] * 3 + ["b"] * 2, "load": 0.5, "p50_e2el_ms": [1, 2, 3, 1, 1],
                          "p99_e2el_ms": [3, 2, 4, 2, 2]})
    assert on_front(table)["pareto"].tolist() == [True, True, False, True, True]


# -- whole matches ----------------------------------------------------------------------------
def test_asr_lineup_is_paper_a_only_and_every_llm_entrant_plays():
    names = [e.name for e in ENTRANTS]
    assert [e.name for e in lineup(names, "asr")] == ["fcfs", "sjf", "hrrn", "adaptive"]
    assert len(lineup(names, "llm")) == len(ENTRANTS)
    with pytest.raises(SchedlabError, match="unknown scheduler 'fifo'"):
        lineup(["fifo"], "llm")


@pytest.fixture(scope="module")
def matches():
    pools = {"azure-code": _timed_pool(300, 1)}
    spec = {"kind": "azure-code", "n_requests": 150, "slo": {"e2e_s": 20.0}}
    cap = capacity(spec, pools, ARENA, lineup(["fcfs"], "llm")[0])
    served = trace(spec, pools, 0.8 * cap, max_tokens=ARENA.max_tokens)
    rows = [match(e, served, ARENA, workload="w", load=0.8) for e in ENTRANTS]
    return cap, served, pd.DataFrame(rows)


def test_every_entrant_serves_every_request_of_the_same_trace(matches):
    cap, served, table = matches
    assert cap > 0
    assert (table["arrived"] == len(served)).all() and (table["completed"] == len(served)).all()
    assert table["policy"].tolist() == [e.name for e in ENTRANTS]
    assert table["slo_attainment"].between(0, 1).all() and (table["g_per_s"] > 0).all()


def test_chunked_prefill_keeps_token_gaps_short_where_prefill_priority_stalls(matches):
    _, _, table = matches
    tbt = table.set_index("policy")["p99_itl_ms"]
    assert tbt["sarathi-fcfs"] < tbt["prefill-priority"]


def test_tournament_cli_rejects_bad_input_in_one_line(tmp_path):
    out = tmp_path / "t.parquet"
    proc = subprocess.run(
        [sys.executable, "-m", "schedlab.cli", "tournament", "play", "--workload", "w", "--spec",
         '{"kind": "azure-code", "n_requests": 10}', "--arena", '{"steptime": "nope.json", "hardware": "A100-40GB", "model": "mistral-7b"}',
         "--pool", f"azure-code={tmp_path / 'none.parquet'}", "--loads", "0.5", "--entrants", "fcfs", "--out", str(out)],
        capture_output=True, text=True)
    assert proc.returncode != 0 and len(proc.stderr.strip().splitlines()) == 1
    assert not out.exists()


# -- the workloads that share tokens, with the prefix cache off and on -------------------------
def test_multi_turn_prompts_hold_the_earlier_turns_and_answers():
    from schedlab.sharing import OUTPUT_TOKEN

    answers = pd.DataFrame({"output_tokens": np.arange(5, 300)})
    out = trace({"kind": "multi-turn", "n_requests": 200}, {"openchat": answers}, 2.0, max_tokens=8192)
    assert len(out) == 200 and (out["prompt_tokens"] + out["output_tokens"] <= 8192).all()
    by_turn = out.set_index(["conversation", "turn"])
    for (conv, turn), row in by_turn.iterrows():
        if turn and (conv, turn - 1) in by_turn.index:
            prev = by_turn.loc[(conv, turn - 1)]
            head = np.concatenate([prev["token_ids"], np.full(prev["output_tokens"], OUTPUT_TOKEN)])
            assert (row["token_ids"][: head.size] == head).all() and row["prompt_tokens"] > head.size
            assert row["arrival_s"] >= prev["arrival_s"]
    assert np.diff(out["arrival_s"]).min() >= 0 and out["turn"].max() >= 2


def test_the_cache_serves_the_conversations_earlier_turns_and_raises_capacity():
    answers = pd.DataFrame({"output_tokens": np.arange(5, 300)})
    spec = {"kind": "multi-turn", "n_requests": 150, "slo": {"ttft_s": 10.0}}
    pools = {"openchat": answers}
    fcfs, sjf_u = lineup(["fcfs", "sjf-uncached"], "llm")
    on = ARENA.with_limits(prefix_caching=True)
    cap_off, cap_on = capacity(spec, pools, ARENA, fcfs), capacity(spec, pools, on, fcfs)
    assert cap_on > 1.2 * cap_off
    served = trace(spec, pools, 0.8 * cap_off, max_tokens=ARENA.max_tokens)
    off_row = match(fcfs, served, ARENA, workload="w", load=0.8)
    on_rows = [match(e, served, on, workload="w", load=0.8) for e in (fcfs, sjf_u)]
    assert off_row["cached_tokens"] == 0 and all(r["prefix_cache_hit_rate"] > 0.5 for r in on_rows)
    assert on_rows[0]["p50_ttft_ms"] < off_row["p50_ttft_ms"]


def test_mooncake_pool_keeps_its_hash_ids_through_the_replay():
    rng = np.random.default_rng(3)
    prompt = rng.integers(100, 2000, 60)
    pool = pd.DataFrame({"prompt_tokens": prompt, "output_tokens": rng.integers(2, 50, 60), "source": "m",
                         "timestamp_s": np.cumsum(rng.exponential(1.0, 60)),
                         "hash_ids": [[0, *range(100 * k + 1, 100 * k + -(-p // 512))] for k, p in enumerate(prompt)]})
    out = trace({"kind": "mooncake", "n_requests": 50}, {"mooncake": pool}, 2.0, max_tokens=8192)
    assert [list(v) for v in out["hash_ids"]] == [list(v) for v in pool["hash_ids"].iloc[:50]]
    hits = match(lineup(["fcfs"], "llm")[0], out, ARENA.with_limits(prefix_caching=True), workload="w", load=1)
    assert hits["cached_tokens"] > 0  # the shared first block (512 tokens) of every prompt that has one


# -- the cluster study ------------------------------------------------------------------------
def test_a_cluster_with_the_prefix_cache_serves_every_turn_and_finds_earlier_turns_cached():
    """Conversations on 4 replicas with the cache on: every turn is served, and each replica's
    cache finds earlier turns whichever router sends them (their system prompts at least)."""
    from schedlab.tournament.play import cluster_match

    answers = pd.DataFrame({"output_tokens": np.arange(5, 300)})
    spec = {"kind": "multi-turn", "n_requests": 150, "slo": {"ttft_s": 10.0}}
    pools = {"openchat": answers}
    fcfs = lineup(["fcfs"], "llm")[0]
    on = ARENA.with_limits(prefix_caching=True)
    served = trace(spec, pools, 4 * 0.8 * capacity(spec, pools, ARENA, fcfs), max_tokens=ARENA.max_tokens)
    rows = pd.DataFrame([cluster_match(fcfs, served, on, router, 4, workload="w", load=0.8)
                         for router in ("round-robin", "prefix-affinity")]).set_index("router")
    assert (rows["completed"] == len(served)).all() and (rows["replicas"] == 4).all()
    assert (rows["prefix_cache_hit_rate"] > 0.3).all()
    off = cluster_match(fcfs, served, ARENA, "round-robin", 4, workload="w", load=0.8)
    assert off["prefix_cache_hit_rate"] == 0 and off["p50_ttft_ms"] > rows.loc["round-robin", "p50_ttft_ms"]


def test_the_cluster_study_plays_every_router_and_entrant_and_marks_fronts_per_replica_count(tmp_path):
    from schedlab.cli import main

    _timed_pool(300, 1).to_parquet(tmp_path / "pool.parquet")
    write_steptime(STEP, tmp_path / "step.json")
    arena = f'{{"steptime": "{tmp_path / "step.json"}", "hardware": "A100-40GB", "model": "mistral-7b", "max_num_seqs": 64}}'
    argv = ["tournament", "cluster", "--workload", "w", "--spec", '{"kind": "azure-code", "n_requests": 120}',
            "--arena", arena, "--pool", f"azure-code={tmp_path / 'pool.parquet'}", "--replicas", "1", "2",
            "--routers", "round-robin", "least-tokens", "--loads", "0.8", "--entrants", "fcfs", "sjf",
            "--out", str(tmp_path / "runs.parquet")]
    assert main(argv) == 0
    runs = pd.read_parquet(tmp_path / "runs.parquet")
    assert len(runs) == 2 * 2 * 2 and (runs["completed"] == runs["offered"]).all()
    assert sorted(set(zip(runs["replicas"], runs["router"], runs["policy"]))) == sorted(
        (n, r, p) for n in (1, 2) for r in ("round-robin", "least-tokens") for p in ("fcfs", "sjf"))
    one = runs[runs["replicas"] == 1].set_index(["router", "policy"])["p99_e2el_ms"]
    assert one.loc[("round-robin", "fcfs")] == one.loc[("least-tokens", "fcfs")]  # one replica: routing is moot
    assert main(["tournament", "table", "--runs", str(tmp_path / "runs.parquet"), "--out", str(tmp_path / "t.parquet")]) == 0
    table = pd.read_parquet(tmp_path / "t.parquet")
    for _, group in table.groupby(["replicas"]):
        assert group["pareto"].any()
    assert main([*argv[:-2], "--routers", "nearest", "--out", str(tmp_path / "bad.parquet")]) == 2
    assert not (tmp_path / "bad.parquet").exists()


def test_the_cluster_reading_names_the_best_pairs_from_the_numbers():
    from schedlab.tournament.report import cluster_reading

    rows = [("rr", "round-robin", "fcfs", 9000, 0.90), ("lt", "least-tokens", "fcfs", 6000, 0.95),
            ("lt", "least-tokens", "sjf", 7000, 0.97), ("small", "least-tokens", "sjf", 1000, 1.0)]
    table = pd.DataFrame([{"workload": "w", "load": 0.9, "replicas": 4 if key != "small" else 2, "router": router,
                           "policy": policy, "p99_e2el_ms": p99, "slo_attainment": slo}
                          for key, router, policy, p99, slo in rows])
    assert cluster_reading(table) == [
        "w, 4 replicas at load 0.9: the lowest P99 E2E latency is least-tokens with fcfs (6.0 s); the highest SLO "
        "attainment is least-tokens with sjf (97.0%); under fcfs, round-robin's P99 is 9.0 s (1.50x)."]
