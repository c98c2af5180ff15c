"""The engine: toy numbers, queueing closed forms, invariants, determinism and fast-forward for
every scheduler of every paper, and the ``simulate`` CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from schedlab.contracts import RESULT_COLUMNS, SUMMARY_KEYS
from schedlab.errors import SchedlabError
from schedlab.estimate import job_sizes
from schedlab.examples import TOY_STEP, toy_trace
from schedlab.io import write_json, write_parquet
from schedlab.metrics import summarize
from schedlab import registry
from schedlab.engine import Arena, EngineConfig, engine_config, run
from schedlab.engine.core import Engine
from schedlab.engine.steptime import StepTimeModel
from schedlab.validation import read_steptime, write_steptime
from schedlab.simulate import run_summary, scheduler_for
from schedlab.builders.sarathi import Sarathi
from schedlab.workload.arrivals import arrival_times
from traces import two_class_trace
from schedlab.workload.synthetic import random_lengths_trace
from schedlab.workload.asr import asr_trace, librispeech_pool

POLICY_NAMES = ("fcfs", "sjf", "hrrn")

#: A calibrated-style Whisper step model: ~50 ms steps at load, saturation near 18 req/s.
CALIBRATED = StepTimeModel(
    intercept=0.006, n_encoder=0.031, n_prefill_tokens=0.0009, n_decode=0.00066, ctx_tokens=4e-7
)


def simulate(trace, policy, step_time, config, sizes, **options):
    """``policy`` under continuous batching, with ``sizes`` as the requests' job-size hints."""
    trace = trace.assign(priority=np.asarray(sizes, float))
    return run(trace, scheduler_for(policy), Arena(step_time, config), **options)


#: Every registered scheduler that needs nothing of the run in advance: queue policies under
#: continuous batching, and the batch builders.
ALL_SCHEDULERS = {e.name: (lambda n=e.name: scheduler_for(n)) for e in registry.entries() if not e.needs}


def librispeech_like_utterances(n: int, seed: int) -> pd.DataFrame:
    """Lognormal durations with LibriSpeech test-clean's mean (7.4 s) and sd (5.15 s)."""
    rng = np.random.default_rng(seed)
    s2 = np.log(1 + (5.15 / 7.4) ** 2)
    dur = np.clip(rng.lognormal(np.log(7.4) - s2 / 2, np.sqrt(s2), n), 1.285, 34.955)
    tokens = np.maximum(1, np.round(3.0 * dur * rng.uniform(0.8, 1.2, n))).astype(np.int64)
    return pd.DataFrame({"duration_s": dur, "output_tokens": tokens})


def asr_like_trace(rate: float, n: int, seed: int) -> pd.DataFrame:
    pool = librispeech_pool(librispeech_like_utterances(1000, seed))
    arrivals = arrival_times(rate, rng=np.random.default_rng([seed, 0]), n_requests=n)
    return asr_trace(pool, arrivals, rng=np.random.default_rng([seed, 1]))


def random_trace(n: int, rate: float, seed: int) -> tuple[pd.DataFrame, np.ndarray]:
    """Generic LLM-ish requests with shuffled, non-contiguous ids and noisy size estimates."""
    rng = np.random.default_rng(seed)
    trace = pd.DataFrame(
        {
            "request_id": 1000 + rng.permutation(n) * 3,
            "arrival_s": arrival_times(rate, rng=rng, n_requests=n),
            "prompt_tokens": rng.integers(1, 120, n),
            "output_tokens": rng.integers(1, 200, n),
        }
    )
    sizes = trace["output_tokens"].to_numpy() * rng.uniform(0.7, 1.3, n)
    return trace, sizes


# -- paper A's toy example ------------------------------------------------------------------
TOY_ENGINE = EngineConfig(max_num_seqs=1, encoder_frames=1, block_size=16)


# Each request costs 1 s of encoder + 0.2 s per generated token (the one-token prefill step
# yields the first token): 9, 5 and 3 s of service.
# FCFS: 0..9, 9..14, 14..17. SJF: 2 (0..3), 1 (3..8), 0 (8..17).
# HRRN: at t=0 every R = 1, the tie goes to the earliest arrival then the lowest id, so request
# 0 runs first (0..9); at t=9 request 2 (R = 1 + 9/10) beats request 1 (R = 1 + 9/20): 9..12,
# then request 1: 12..17.
TOY_EXPECTED = {
    "fcfs": {"first_scheduled_s": [0, 9, 14], "finish_s": [9, 14, 17]},
    "sjf": {"first_scheduled_s": [8, 3, 0], "finish_s": [17, 8, 3]},
    "hrrn": {"first_scheduled_s": [0, 12, 9], "finish_s": [9, 17, 12]},
}


@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_toy_example_exact(policy):
    trace = toy_trace()
    sizes = job_sizes(trace, {"en": 5.0})
    np.testing.assert_array_equal(sizes, [40, 20, 10])
    res = simulate(trace, policy, TOY_STEP, TOY_ENGINE, sizes)
    req = res.requests
    exp = TOY_EXPECTED[policy]
    np.testing.assert_allclose(req["first_scheduled_s"], exp["first_scheduled_s"], rtol=0, atol=1e-9)
    np.testing.assert_allclose(req["first_token_s"], np.add(exp["first_scheduled_s"], 1.2), atol=1e-9)
    np.testing.assert_allclose(req["finish_s"], exp["finish_s"], rtol=0, atol=1e-9)
    assert res.steps == 70  # one step per generated token, one request at a time
    assert res.busy_s == pytest.approx(17.0, abs=1e-9)
    assert (req["preemptions"] == 0).all()
    np.testing.assert_allclose(req["mean_gap_s"], 0.2, atol=1e-12)
    np.testing.assert_allclose(req["max_gap_s"], 0.2, atol=1e-12)
    assert res.gaps.total == 39 + 19 + 9
    assert res.peak_kv_blocks == 1 + 3  # one encoder block + 40 tokens in 16-token blocks


def test_toy_example_means_and_summary():
    trace = toy_trace()
    means = {}
    for policy in POLICY_NAMES:
        _, summary = run_summary(trace, policy, Arena(TOY_STEP, TOY_ENGINE, {"en": 5.0}), identity={"seed": 7})
        assert summary["policy"] == policy and summary["backend"] == "sim" and summary["seed"] == 7
        assert summary["completed"] == 3
        assert summary["throughput_rps"] == pytest.approx(3 / 17)
        assert summary["throughput_tok_s"] == pytest.approx(70 / 17)
        assert summary["p50_e2el_ms"] == pytest.approx(np.median(TOY_EXPECTED[policy]["finish_s"]) * 1e3)
        assert summary["p50_tpot_ms"] == pytest.approx(200.0)
        means[policy] = np.mean(TOY_EXPECTED[policy]["finish_s"])
    assert means["fcfs"] == pytest.approx(40 / 3)
    assert means["sjf"] == pytest.approx(28 / 3)
    assert means["hrrn"] == pytest.approx(38 / 3)
    assert means["fcfs"] / means["sjf"] == pytest.approx(1.4286, abs=1e-4)


def test_toy_frontend_delay_shifts_every_time():
    """``frontend_s`` holds each request back before the scheduler sees it."""
    step = StepTimeModel(intercept=0.0, n_encoder=1.0, n_prefill_tokens=0.2, n_decode=0.2, frontend_s=0.5)
    trace = toy_trace()
    req = simulate(trace, "sjf", step, TOY_ENGINE, [40, 20, 10]).requests
    np.testing.assert_allclose(req["first_scheduled_s"], np.add(TOY_EXPECTED["sjf"]["first_scheduled_s"], 0.5), atol=1e-9)
    np.testing.assert_allclose(req["finish_s"], np.add(TOY_EXPECTED["sjf"]["finish_s"], 0.5), atol=1e-9)
    np.testing.assert_array_equal(req["arrival_s"], 0.0)


def test_toy_output_delay_moves_what_the_client_sees_and_nothing_else():
    """``output_s`` is the way out to the client: first token and finish move by it, the
    scheduler's times and the token gaps do not."""
    trace = toy_trace()
    base = simulate(trace, "sjf", TOY_STEP, TOY_ENGINE, [40, 20, 10])
    late = simulate(trace, "sjf", replace(TOY_STEP, output_s=0.25), TOY_ENGINE, [40, 20, 10])
    np.testing.assert_allclose(late.requests["first_token_s"], base.requests["first_token_s"] + 0.25, atol=1e-12)
    np.testing.assert_allclose(late.requests["finish_s"], np.add(TOY_EXPECTED["sjf"]["finish_s"], 0.25), atol=1e-9)
    pd.testing.assert_series_equal(late.requests["first_scheduled_s"], base.requests["first_scheduled_s"])
    pd.testing.assert_series_equal(late.requests["mean_gap_s"], base.requests["mean_gap_s"])


def test_toy_without_size_estimates_falls_back_to_max_tokens():
    """Without a duration a job's size is its max_tokens (the forced output length)."""
    trace = toy_trace().drop(columns=["audio_duration_s"])
    sizes = job_sizes(trace, {"en": 5.0})
    np.testing.assert_array_equal(sizes, trace["output_tokens"])
    req = simulate(trace, "sjf", TOY_STEP, TOY_ENGINE, sizes).requests
    np.testing.assert_allclose(req["finish_s"], TOY_EXPECTED["sjf"]["finish_s"], atol=1e-9)
    # With equal max_tokens every policy falls back to arrival order.
    same = trace.assign(output_tokens=20)
    for policy in POLICY_NAMES:
        req = simulate(same, policy, TOY_STEP, TOY_ENGINE, job_sizes(same, {"en": 5.0})).requests
        np.testing.assert_allclose(req["finish_s"], [5, 10, 15], atol=1e-9)


# -- queueing closed form -------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("rho", [0.5, 0.6, 0.7])
def test_fcfs_single_server_matches_md1(rho):
    """Identical requests served one at a time: an M/D/1 queue.

    Service D = 1 prefill token * 0.1 + 9 decode steps * 0.1 = 1.0 s. Waits must equal the
    Lindley recursion on the same arrivals exactly, and their mean must match
    Pollaczek-Khinchine, W = rho * D / (2 (1 - rho)). Over 20k requests the standard error of
    the mean wait is 2.5-3.6% of W at these loads; seed 0 is fixed, the tolerance is 5%.
    """
    n, D = 20_000, 1.0
    step = StepTimeModel(intercept=0.0, n_prefill_tokens=0.1, n_decode=0.1)
    arrivals = arrival_times(rho / D, rng=np.random.default_rng(0), n_requests=n)
    trace = pd.DataFrame(
        {"request_id": np.arange(n), "arrival_s": arrivals, "prompt_tokens": 1, "output_tokens": 10}
    )
    res = simulate(trace, "fcfs", step, EngineConfig(max_num_seqs=1), np.ones(n))
    req = res.requests
    wait = (req["first_scheduled_s"] - req["arrival_s"]).to_numpy()
    np.testing.assert_allclose(req["finish_s"] - req["first_scheduled_s"], D, atol=1e-9)

    s = np.concatenate([[0.0], np.cumsum(D - np.diff(arrivals))])
    lindley = s - np.minimum(np.minimum.accumulate(s), 0.0)
    np.testing.assert_allclose(wait, lindley, rtol=0, atol=1e-8)

    pk = rho * D / (2 * (1 - rho))
    assert wait.mean() == pytest.approx(pk, rel=0.05)
    assert res.busy_s == pytest.approx(n * D, rel=1e-9)


# -- invariants of every scheduler ----------------------------------------------------------
def class_trace(n: int = 300, rate: float = 4.0, seed: int = 0) -> pd.DataFrame:
    return two_class_trace(n, rate, seed, shuffled_ids=True)


#: A staircase model shaped like paper C's calibrated one (seconds).
STAIRCASE = StepTimeModel(intercept=0.015, n_prefill_tokens=1e-6, ctx_tokens=1.4e-7, prefill_pairs=2e-9,
                          tile_tokens=6e-5, tile=128)


def serve(name: str, trace: pd.DataFrame, capacity: int, encoder_frames: int = 0, **options):
    limits = EngineConfig(max_num_seqs=64, max_num_batched_tokens=1024, kv_capacity_blocks=capacity,
                          encoder_frames=encoder_frames)
    return run(trace, ALL_SCHEDULERS[name](), Arena(STAIRCASE, limits), **options)


@pytest.mark.parametrize("name", sorted(ALL_SCHEDULERS))
def test_invariants_of_every_scheduler_under_kv_pressure(name):
    trace = class_trace()
    cap = 1500
    res = serve(name, trace, cap, record=True)
    req = res.requests
    assert tuple(req.columns[: len(RESULT_COLUMNS)]) == RESULT_COLUMNS
    # every request completes exactly once, under its own id, in trace order
    assert len(req) == len(trace) and req["request_id"].is_unique
    np.testing.assert_array_equal(req["request_id"], trace["request_id"])
    np.testing.assert_array_equal(req["output_tokens"], trace["output_tokens"])
    assert req["finish_s"].notna().all()
    assert res.requests["preemptions"].sum() > 0 or name in ("request-level", "algorithm2")
    for i, times in enumerate(res.token_times):
        assert len(times) == trace["output_tokens"].iloc[i]  # preempted requests re-emit nothing twice
        assert np.all(np.diff(times) > 0)
        assert times[0] == req["first_token_s"].iloc[i] > req["first_scheduled_s"].iloc[i] >= trace["arrival_s"].iloc[i]
        assert times[-1] == req["finish_s"].iloc[i]
    # KV never over capacity; the clock only moves forward, step by step
    log = res.step_log
    assert (log["kv_blocks"] <= cap).all() and 0 < res.peak_kv_blocks <= cap
    assert np.all(np.diff(log["start_s"]) >= log["dt_s"].to_numpy()[:-1] - 1e-12)
    assert (log["dt_s"] > 0).all()
    # every token's gap is logged once, in its class
    assert res.gaps.total == int((req["output_tokens"] - 1).sum())
    assert sum(h.total for h in res.class_gaps.values()) == res.gaps.total
    multi = req[req["output_tokens"] > 1]
    np.testing.assert_allclose(multi["mean_gap_s"] * (multi["output_tokens"] - 1),
                               multi["finish_s"] - multi["first_token_s"], rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("encoder_frames", [0, 32])
@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_invariants_under_preemption_with_an_encoder(policy, encoder_frames):
    trace, sizes = random_trace(600, rate=40.0, seed=7)
    cap = 60
    cfg = EngineConfig(max_num_seqs=32, max_num_batched_tokens=256, block_size=16, kv_capacity_blocks=cap,
                       encoder_frames=encoder_frames)
    step = StepTimeModel(intercept=0.005, n_encoder=0.02, n_prefill_tokens=1e-4, n_decode=2e-4, ctx_tokens=1e-6)
    res = simulate(trace, policy, step, cfg, sizes)
    req = res.requests
    for col in ("first_scheduled_s", "first_token_s", "finish_s"):
        assert np.isfinite(req[col]).all(), col
    assert (req["arrival_s"] <= req["first_scheduled_s"]).all()
    assert (req["first_scheduled_s"] < req["first_token_s"]).all()
    one = req["output_tokens"] == 1
    np.testing.assert_array_equal(req.loc[one, "first_token_s"], req.loc[one, "finish_s"])
    assert (req.loc[~one, "first_token_s"] < req.loc[~one, "finish_s"]).all()
    assert 0 < res.peak_kv_blocks <= cap and req["preemptions"].sum() > 0
    assert res.gaps.total == int((req["output_tokens"] - 1).sum())
    assert req.loc[one, "mean_gap_s"].isna().all()
    # busy time fits inside the run, and every step costs at least the intercept
    assert 0 < res.busy_s <= req["finish_s"].max() - req["arrival_s"].min() + 1e-9
    assert res.busy_s >= res.steps * step.intercept - 1e-9
    assert res.steps >= int(req["output_tokens"].max())


@pytest.mark.parametrize("name", sorted(ALL_SCHEDULERS))
def test_schedulers_read_the_engine_and_never_change_it(name, monkeypatch):
    """A scheduler returns a plan; the engine's state is the same before and after it decides."""
    real = Engine._step
    seen = []

    def checked(self, plan):
        seen.append(plan.n_scheduled)
        return real(self, plan)

    def snapshot(e):
        return (e.seq.copy(), e.computed.copy(), e.blocks.copy(), list(e.running), e.free, e.now)

    engine = Engine(class_trace(120), ALL_SCHEDULERS[name](), Arena(STAIRCASE, EngineConfig(kv_capacity_blocks=900)))
    inner = engine.scheduler.schedule

    def schedule():
        before = snapshot(engine)
        plan = inner()
        after = snapshot(engine)
        for a, b in zip(before, after):
            assert np.array_equal(a, b)
        return plan

    engine.scheduler.schedule = schedule
    monkeypatch.setattr(Engine, "_step", checked)
    engine.run()
    assert seen


def test_fcfs_under_continuous_batching_is_sarathi_fcfs_with_equal_budgets():
    """vLLM v1's running pass serves decodes before the one partial prefill (admission order),
    so with the same token budget, sequence cap and KV cache the two are one schedule."""
    trace = class_trace(400, rate=3.0, seed=2)
    for cap in (1 << 40, 600, 400):
        arena = Arena(STAIRCASE, EngineConfig(max_num_seqs=128, max_num_batched_tokens=512, kv_capacity_blocks=cap))
        a = run(trace, scheduler_for("fcfs"), arena).requests
        b = run(trace, Sarathi(budget=512, max_active=128, order="fcfs"), arena).requests
        pd.testing.assert_frame_equal(a, b)
        assert cap > 1e6 or a["preemptions"].sum() > 0


@pytest.mark.parametrize("encoder_frames", [0, 1500])
def test_busy_time_is_the_sum_of_step_costs_without_preemption(encoder_frames):
    """With ample memory every request is encoded once, prefilled once (in chunks), and
    decoded output-1 times at context prompt+1 .. prompt+output-1, so the busy time is a
    closed form in the trace and the number of steps."""
    rng = np.random.default_rng(11)
    n = 300
    trace = random_lengths_trace(arrival_times(6.0, rng=rng, n_requests=n), rng=rng, prompt=(1, 300), output=(1, 120))
    step = StepTimeModel(intercept=0.003, n_encoder=0.02, n_prefill_tokens=1e-4, n_decode=5e-4, ctx_tokens=1e-6)
    cfg = EngineConfig(max_num_seqs=16, max_num_batched_tokens=128, encoder_frames=encoder_frames)
    for policy in POLICY_NAMES:
        res = simulate(trace, policy, step, cfg, trace["output_tokens"])
        assert res.requests["preemptions"].sum() == 0
        p = trace["prompt_tokens"].to_numpy(float)
        o = trace["output_tokens"].to_numpy(float)
        expected = (
            step.intercept * res.steps
            + step.n_encoder * (n if encoder_frames else 0)
            + step.n_prefill_tokens * p.sum()
            + step.n_decode * (o - 1).sum()
            + step.ctx_tokens * ((o - 1) * p + (o - 1) * o / 2).sum()
        )
        assert res.busy_s == pytest.approx(expected, rel=1e-9)


# -- KV capacity and bad traces ------------------------------------------------------------
def test_kv_capacity_below_one_request_raises():
    trace = pd.DataFrame(
        {"request_id": [0, 1], "arrival_s": [0.0, 1.0], "prompt_tokens": [10, 4], "output_tokens": [30, 4]}
    )
    # 1500 encoder frames -> 94 blocks of 16; 10 + 30 tokens -> 3 blocks
    need = 94 + 3
    step = StepTimeModel(intercept=0.01, n_decode=0.001)
    ok = EngineConfig(block_size=16, kv_capacity_blocks=need, encoder_frames=1500)
    res = simulate(trace, "fcfs", step, ok, [1, 1])
    assert np.isfinite(res.requests["finish_s"]).all()
    assert res.peak_kv_blocks == need
    with pytest.raises(SchedlabError, match=rf"needs {need} KV blocks .* holds {need - 1}"):
        simulate(trace, "fcfs", step, EngineConfig(block_size=16, kv_capacity_blocks=need - 1, encoder_frames=1500), [1, 1])
    for name in ("sjf", "sarathi-fcfs", "rad"):
        with pytest.raises(SchedlabError, match="KV blocks"):
            run(trace, ALL_SCHEDULERS[name](), Arena(step, EngineConfig(block_size=16, kv_capacity_blocks=2)))


@pytest.mark.parametrize("bad, message", [
    ({"arrival_s": [1.0, 0.0]}, "sorted"),
    ({"arrival_s": [0.0, np.nan]}, "finite"),
    ({"arrival_s": [-1.0, 0.0]}, ">= 0"),
    ({"arrival_s": [0.0, np.inf]}, "finite"),
    ({"output_tokens": [1, 0]}, "output_tokens >= 1"),
])
def test_bad_traces_raise(bad, message):
    good = pd.DataFrame({"request_id": [0, 1], "arrival_s": [0.0, 1.0], "prompt_tokens": [1, 1], "output_tokens": [1, 1]})
    for name in ("fcfs", "sarathi-fcfs"):
        with pytest.raises(SchedlabError, match=message):
            run(good.assign(**bad), ALL_SCHEDULERS[name](), Arena(StepTimeModel(intercept=0.01), EngineConfig()))


def test_a_stalled_scheduler_fails_instead_of_hanging():
    class Idle(Sarathi):
        def schedule(self):
            from schedlab.engine.plan import Planner
            return Planner(self.engine, self, 0).plan()

    trace = class_trace(5)
    with pytest.raises(SchedlabError, match="stalled"):
        run(trace, Idle(), Arena(STAIRCASE, EngineConfig()))


def test_a_scheduler_that_loses_its_requests_fails_instead_of_hanging():
    """Every request arrived, none waits, runs or finished: the run fails as stalled."""
    class Forgetful(Sarathi):
        def arrive(self, i):
            pass  # the request is never queued

    with pytest.raises(SchedlabError, match="stalled"):
        run(class_trace(5), Forgetful(), Arena(STAIRCASE, EngineConfig()))


# -- determinism ----------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(ALL_SCHEDULERS))
def test_same_inputs_same_results(name):
    trace = class_trace(200, rate=6.0, seed=3)
    a, b = serve(name, trace, 1200), serve(name, trace, 1200)
    pd.testing.assert_frame_equal(a.requests, b.requests)
    np.testing.assert_array_equal(a.gaps.counts, b.gaps.counts)
    assert (a.steps, a.busy_s, a.peak_kv_blocks) == (b.steps, b.busy_s, b.peak_kv_blocks)


@pytest.fixture
def cli_inputs(tmp_path):
    """A trace built by the workload helpers, a step-time JSON and a kappa JSON."""
    utts = librispeech_like_utterances(300, seed=1)
    pool = librispeech_pool(utts)
    arrivals = arrival_times(20.0, rng=np.random.default_rng([1, 0]), n_requests=300)
    trace = asr_trace(pool, arrivals, rng=np.random.default_rng([1, 1]))
    paths = {
        "trace": tmp_path / "trace.parquet",
        "steptime": tmp_path / "steptime.json",
        "kappa": tmp_path / "kappa.json",
    }
    write_parquet(trace, paths["trace"])
    write_steptime(CALIBRATED, paths["steptime"])
    write_json({"en": {"status": "fitted", "kappa": 3.0}, "es": {"status": "not reproduced"}}, paths["kappa"])
    return trace, paths


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "schedlab.cli", *args], capture_output=True, text=True, timeout=120
    )


def simulate_args(paths, policy: str, out: Path) -> list[str]:
    return [
        "simulate",
        "--trace", str(paths["trace"]),
        "--policy", policy,
        "--steptime", str(paths["steptime"]),
        "--kappa", str(paths["kappa"]),
        "--hardware", "A100-40GB",
        "--model", "whisper-large-v3",
        "--max-num-batched-tokens", "2048",
        "--workload", "librispeech",
        "--rate", "20",
        "--out-results", str(out / "results.parquet"),
        "--out-summary", str(out / "summary.json"),
    ]  # fmt: skip


@pytest.mark.slow
def test_cli_simulate_is_byte_identical_and_matches_in_process(cli_inputs, tmp_path):
    trace, paths = cli_inputs
    for name in ("a", "b"):
        proc = cli(*simulate_args(paths, "sjf", tmp_path / name))
        assert proc.returncode == 0, proc.stderr
    a = (tmp_path / "a" / "results.parquet").read_bytes()
    b = (tmp_path / "b" / "results.parquet").read_bytes()
    assert a == b

    engine = engine_config("A100-40GB", "whisper-large-v3", max_num_batched_tokens=2048)
    assert engine.encoder_frames == 1500
    result, _ = run_summary(trace, "sjf", Arena(read_steptime(paths["steptime"]), engine, {"en": 3.0}), identity={})
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "a" / "results.parquet"), result.requests)

    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert set(SUMMARY_KEYS) <= set(summary)
    assert summary["policy"] == "sjf" and summary["backend"] == "sim"
    assert summary["workload"] == "librispeech" and summary["rate"] == 20.0
    assert summary["hardware"] == "A100-40GB" and summary["model"] == "whisper-large-v3"
    assert summary["arrived"] == summary["completed"] == len(trace)
    # no temporary files left beside the outputs
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["results.parquet", "summary.json"]


def test_cli_simulate_takes_one_step_time_model_per_run(cli_inputs, tmp_path):
    """A sweep with one model per run (the fidelity study's fits, each with its rate held out):
    each run advances by its own model, and the fit's name is in every summary."""
    from schedlab.cli import main

    _, paths = cli_inputs
    slow = tmp_path / "slow.json"
    write_steptime(CALIBRATED.scaled(2.0, 2.0), slow)
    args = simulate_args(paths, "fcfs", tmp_path)
    at = args.index("--steptime")
    args[at + 1: at + 2] = [str(paths["steptime"]), str(slow)]
    for flag, values in (("--trace", [paths["trace"]] * 2), ("--rate", ["20", "20"]),
                         ("--out-results", [tmp_path / "a.parquet", tmp_path / "b.parquet"]),
                         ("--out-summary", [tmp_path / "a.json", tmp_path / "b.json"])):
        i = args.index(flag)
        args[i + 1: i + 2] = map(str, values)
    assert main([*args, "--steptime-fit", "held-out"]) == 0
    a, b = (json.loads((tmp_path / f"{k}.json").read_text()) for k in "ab")
    assert a["steptime_fit"] == b["steptime_fit"] == "held-out"
    assert b["p50_e2el_ms"] > 1.5 * a["p50_e2el_ms"]
    at = args.index("--steptime")
    args[at + 1: at + 3] = [str(paths["steptime"])] * 3
    assert main(args) == 2  # neither one model nor one per run


# -- identical arrivals across policies -----------------------------------------------------
def test_same_seed_same_arrivals_and_trace():
    a = arrival_times(12.0, rng=np.random.default_rng([4, 0]), duration_s=60.0)
    b = arrival_times(12.0, rng=np.random.default_rng([4, 0]), duration_s=60.0)
    c = arrival_times(12.0, rng=np.random.default_rng([5, 0]), duration_s=60.0)
    np.testing.assert_array_equal(a, b)
    assert len(a) != len(c) or not np.array_equal(a, c)
    assert a[0] == 0.0 and (np.diff(a) >= 0).all() and a[-1] < 60.0
    pool = librispeech_pool(librispeech_like_utterances(200, seed=4))
    t1 = asr_trace(pool, a, rng=np.random.default_rng([4, 1]))
    t2 = asr_trace(pool, b, rng=np.random.default_rng([4, 1]))
    pd.testing.assert_frame_equal(t1, t2)

    engine = EngineConfig(max_num_batched_tokens=2048, encoder_frames=1500)
    sizes = job_sizes(t1, {"en": 3.0})
    arrivals = [simulate(t1, p, CALIBRATED, engine, sizes).requests["arrival_s"].to_numpy() for p in POLICY_NAMES]
    for arr in arrivals:
        np.testing.assert_array_equal(arr, t1["arrival_s"].to_numpy())


# -- fast-forward ---------------------------------------------------------------------------
def _asr_case(rate):
    trace = asr_like_trace(rate, 400, seed=5)
    return trace, job_sizes(trace, {"en": 3.0})


FF_CASES = {
    # light load: long decode-only stretches between arrivals
    "light": (lambda: _asr_case(5.0), EngineConfig(max_num_batched_tokens=2048, encoder_frames=1500)),
    # a full batch decodes while others wait
    "full-batch": (lambda: _asr_case(30.0), EngineConfig(max_num_seqs=8, max_num_batched_tokens=512)),
    # a full batch outgrowing memory: stretches cut short by KV-block shortage, then preemption
    "kv": (
        lambda: random_trace(400, rate=20.0, seed=5),
        EngineConfig(max_num_seqs=8, max_num_batched_tokens=256, kv_capacity_blocks=60, encoder_frames=32),
    ),
}


def _stretch_counter(monkeypatch) -> list:
    """Record every fast-forward attempt: (whether it ran, whether KV cut it short)."""
    stretches = []
    real = Engine._stretch

    def counting(self, t_stop):
        run_arr = self.running_array()
        ran = real(self, t_stop)
        stretches.append((ran, self.free < len(run_arr)))
        return ran

    monkeypatch.setattr(Engine, "_stretch", counting)
    return stretches


def _assert_same_run(fast, slow):
    f, s = fast.requests, slow.requests
    for col in ("first_scheduled_s", "first_token_s", "finish_s", "max_gap_s", "mean_gap_s"):
        np.testing.assert_allclose(f[col], s[col], rtol=1e-9, atol=0, equal_nan=True, err_msg=col)
    np.testing.assert_array_equal(f["preemptions"], s["preemptions"])
    assert fast.steps == slow.steps
    assert fast.peak_kv_blocks == slow.peak_kv_blocks
    assert fast.busy_s == pytest.approx(slow.busy_s, rel=1e-9)
    assert fast.gaps.total == slow.gaps.total
    for cls, hist in fast.class_gaps.items():
        assert hist.total == slow.class_gaps[cls].total


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(FF_CASES))
@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_fast_forward_matches_step_by_step(policy, case, monkeypatch):
    build, cfg = FF_CASES[case]
    trace, sizes = build()
    stretches = _stretch_counter(monkeypatch)
    fast = simulate(trace, policy, CALIBRATED, cfg, sizes)
    assert sum(ran for ran, _ in stretches) >= 5  # fast-forward did apply
    monkeypatch.setattr(Engine, "_stretch", lambda self, t_stop: False)
    slow = simulate(trace, policy, CALIBRATED, cfg, sizes)
    _assert_same_run(fast, slow)
    if case == "kv":
        assert fast.requests["preemptions"].sum() > 0
        assert fast.peak_kv_blocks == cfg.kv_capacity_blocks


def test_fast_forward_matches_step_by_step_past_a_knee(monkeypatch):
    """A CPU decoder's model (flat to 6 tokens, then per token): a stretch's closed form holds."""
    trace, sizes = _asr_case(30.0)
    kneed = StepTimeModel(intercept=0.015, n_decode=2e-4, ctx_tokens=1e-7, knee_tokens=1.2e-3, knee=6)
    cfg = EngineConfig(max_num_seqs=16, max_num_batched_tokens=512)
    stretches = _stretch_counter(monkeypatch)
    fast = simulate(trace, "fcfs", kneed, cfg, sizes)
    assert sum(ran for ran, _ in stretches) >= 5
    monkeypatch.setattr(Engine, "_stretch", lambda self, t_stop: False)
    _assert_same_run(fast, simulate(trace, "fcfs", kneed, cfg, sizes))


@pytest.mark.parametrize("name", registry.names(registry.BATCH))
def test_fast_forward_matches_step_by_step_for_every_builder(name, monkeypatch):
    trace = class_trace(300, rate=4.0, seed=1)
    stretches = _stretch_counter(monkeypatch)
    fast = serve(name, trace, 100_000, warmup_s=10.0, sample_s=1.0)
    assert sum(ran for ran, _ in stretches) >= 1
    monkeypatch.setattr(Engine, "_stretch", lambda self, t_stop: False)
    slow = serve(name, trace, 100_000, warmup_s=10.0, sample_s=1.0)
    _assert_same_run(fast, slow)
    pd.testing.assert_frame_equal(fast.timeline, slow.timeline)


# -- paper A's qualitative claim ------------------------------------------------------------
def test_paper_a_overload_sjf_cuts_median_and_raises_tail():
    """Overload (40 req/s against ~18 req/s capacity), one encoder admission per step."""
    engine = EngineConfig(max_num_batched_tokens=2048, encoder_frames=1500)
    assert engine.encoder_per_step == 1
    trace = asr_like_trace(40.0, 1500, seed=3)
    sizes = job_sizes(trace, {"en": 3.0})
    s = {}
    for policy in POLICY_NAMES:
        res = simulate(trace, policy, CALIBRATED, engine, sizes)
        assert res.requests["finish_s"].notna().all()
        s[policy] = summarize(res.requests, res.gaps)
    assert s["sjf"]["p50_e2el_ms"] <= 0.6 * s["fcfs"]["p50_e2el_ms"]
    assert s["sjf"]["p90_e2el_ms"] > s["fcfs"]["p90_e2el_ms"]
    assert s["sjf"]["p50_e2el_ms"] < s["hrrn"]["p50_e2el_ms"] < s["fcfs"]["p50_e2el_ms"]
    assert s["sjf"]["p50_ttft_ms"] < s["fcfs"]["p50_ttft_ms"]
    tput = np.array([s[p]["throughput_rps"] for p in POLICY_NAMES])
    assert tput.max() / tput.min() < 1.02
    assert 10 < tput.mean() < 30  # overloaded: well below the offered 40 req/s


# -- CLI errors -----------------------------------------------------------------------------
def _error_cases(paths, tmp_path, out):
    utts = tmp_path / "utts.parquet"
    write_parquet(librispeech_like_utterances(20, seed=0), utts)
    sim = simulate_args(paths, "fcfs", out)
    missing_trace = list(sim)
    missing_trace[missing_trace.index("--trace") + 1] = str(tmp_path / "no-such-trace.parquet")
    missing_steptime = list(sim)
    missing_steptime[missing_steptime.index("--steptime") + 1] = str(tmp_path / "no-such.json")
    return {
        "unknown-policy": (simulate_args(paths, "lifo", out), "lifo"),
        "missing-trace": (missing_trace, "no-such-trace.parquet"),
        "missing-steptime": (missing_steptime, "no-such.json"),
        "negative-rate": (
            ["workload", "--kind", "librispeech", "--utterances", str(utts), "--rate", "-3",
             "--n-requests", "10", "--out", str(out / "trace.parquet")],
            "--rate",
        ),
    }  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("case", ["unknown-policy", "missing-trace", "missing-steptime", "negative-rate"])
def test_cli_bad_input_fails_with_one_line_and_no_output(case, cli_inputs, tmp_path):
    _, paths = cli_inputs
    out = tmp_path / "out"
    args, mention = _error_cases(paths, tmp_path, out)[case]
    proc = cli(*args)
    assert proc.returncode != 0
    assert not out.exists() or not any(out.iterdir())
    assert proc.stdout == ""
    assert mention in proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr


def test_the_front_end_station_is_lindleys_recursion_on_a_toy():
    """Three requests through one API process of 50 ms, then a 10 ms delay."""
    model = StepTimeModel(intercept=0.01, frontend_s=0.01, frontend_service_s=0.05)
    np.testing.assert_allclose(model.visible_times(np.array([0.0, 0.0, 0.12, 0.13])), [0.06, 0.11, 0.18, 0.23])
    plain = StepTimeModel(intercept=0.01, frontend_s=0.01)
    np.testing.assert_array_equal(plain.visible_times(np.array([0.0, 0.5])), [0.01, 0.51])


def test_an_m_d_1_front_end_waits_as_pollaczek_khinchine_says():
    """Poisson arrivals at 10 req/s into a 60 ms station (load 0.6): the mean wait in its queue
    is rho * s / (2 * (1 - rho)) = 45 ms."""
    lam, s = 10.0, 0.06
    arrivals = arrival_times(lam, rng=np.random.default_rng(4), n_requests=300_000)
    waits = StepTimeModel(intercept=0.0, frontend_service_s=s).visible_times(arrivals) - arrivals - s
    rho = lam * s
    assert waits.min() >= -1e-9  # float rounding of departure - arrival - service
    assert waits.mean() == pytest.approx(rho * s / (2 * (1 - rho)), rel=0.03)


def test_a_front_end_station_delays_the_same_requests_on_both_simulators():
    """The station is in the arrival path of sim and vllm-sim alike: identical per-request times,
    and later first tokens than with the fixed delay alone."""
    pytest.importorskip("vllm")
    trace = asr_like_trace(12.0, 120, seed=2)
    engine = engine_config("A100-40GB", "whisper-large-v3", max_num_batched_tokens=2048)
    step = replace(CALIBRATED, frontend_s=0.01, frontend_service_s=0.06)
    sim = run_summary(trace, "fcfs", Arena(step, engine, {"en": 3.0}), identity={})[0].requests
    vs = run_summary(trace, "fcfs", Arena(step, engine, {"en": 3.0}), identity={}, backend="vllm-sim",
                     model="whisper-large-v3")[0].requests
    for col in ("first_scheduled_s", "first_token_s", "finish_s"):
        np.testing.assert_allclose(vs[col], sim[col], rtol=1e-9, atol=1e-9)
    plain = run_summary(trace, "fcfs", Arena(replace(step, frontend_service_s=0.0), engine, {"en": 3.0}), identity={})[0]
    assert (sim["first_token_s"] >= plain.requests["first_token_s"] - 1e-12).all()
    assert sim["first_token_s"].sum() > plain.requests["first_token_s"].sum()


def test_token_gaps_logged_apart_per_server_and_gathered_are_one_logs_gaps():
    """A routed replay logs each server's token gaps apart on shared per-request arrays
    (RequestLog.sharing) and gathers them: every gap, slot by slot (class, warm-up), is counted
    once, as one log of every request counts it; each server's log holds its requests' only."""
    from schedlab.engine.log import RequestLog

    trace = pd.DataFrame({"request_id": np.arange(6), "arrival_s": [0.0, 0.5, 1.0, 2.0, 3.0, 4.0],
                          "prompt_tokens": 8, "output_tokens": 5, "slo_class": ["a", "b"] * 3})
    server = np.array([0, 1, 1, 0, 1, 0])
    one = RequestLog(trace, warmup_s=0.8)
    whole = RequestLog(trace, warmup_s=0.8)
    parts = [whole.sharing(), whole.sharing()]
    rng = np.random.default_rng(0)
    for t in np.cumsum(rng.uniform(0.01, 0.2, 40)):
        for i in np.flatnonzero(rng.random(6) < 0.6):
            one.tokens(np.array([i]), t)
            parts[server[i]].tokens(np.array([i]), t)
    whole.gather(parts)
    assert whole.gaps.total == one.gaps.total > 0
    assert np.array_equal(whole.gaps.counts, one.gaps.counts)
    for name in ("a", "b"):
        assert np.array_equal(whole.class_gaps[name].counts, one.class_gaps[name].counts)
    assert sum(part.gaps.total for part in parts) == one.gaps.total
    for k, part in enumerate(parts):
        mine = RequestLog(trace, warmup_s=0.8)  # the same events, only this server's requests
        rng = np.random.default_rng(0)
        for t in np.cumsum(rng.uniform(0.01, 0.2, 40)):
            for i in np.flatnonzero(rng.random(6) < 0.6):
                if server[i] == k:
                    mine.tokens(np.array([i]), t)
        assert np.array_equal(part.gaps.counts, mine.gaps.counts)


def test_job_sizes_in_one_pass_are_the_client_hints_estimates():
    """The one-pass sizes of a trace without priorities are size_estimate's on each request's
    hints, bit for bit: missing durations and languages without a kappa fall back to max_tokens."""
    from schedlab.estimate import size_estimate, size_hints

    rng = np.random.default_rng(0)
    n = 2000
    trace = pd.DataFrame({"audio_duration_s": np.where(rng.random(n) < 0.05, np.nan, rng.uniform(0.01, 40, n)),
                          "language": rng.choice(["en", "es", "xx"], n), "output_tokens": rng.integers(1, 300, n)})
    kappa = {"en": 2.93, "es": 3.1}
    for t in (trace, trace.drop(columns="language")):
        hinted = np.array([size_estimate(h, kappa, m) for h, m in zip(size_hints(t), t["output_tokens"])], dtype=float)
        assert np.array_equal(job_sizes(t, kappa), hinted)
    assert (job_sizes(trace, kappa)[trace["language"].eq("xx").to_numpy()] ==
            trace.loc[trace["language"].eq("xx"), "output_tokens"].to_numpy()).all()
