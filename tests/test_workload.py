"""Workload generation: arrival processes, ASR request pools and traces, job-size estimates, CLI."""

import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from schedlab.contracts import TRACE_COLUMNS, TRACE_OPTIONAL
from schedlab.data.whisper_tokens import PROMPT_TOKENS
from schedlab.errors import SchedlabError
from schedlab.estimate import job_sizes
from schedlab.workload.arrivals import arrival_times
from schedlab.workload.asr import UNIFORM_DURATIONS, WHISPER_MAX_POSITIONS, asr_trace, uniform_pool


def _rng(seed=0):
    return np.random.default_rng(seed)


def _cv(x):
    return float(np.std(x) / np.mean(x))


# -- arrival_times ----------------------------------------------------------------------------
def test_poisson_gaps_have_mean_one_over_rate_and_unit_cv():
    rate = 5.0
    t = arrival_times(rate, rng=_rng(1), n_requests=50_000)
    gaps = np.diff(t)
    assert gaps.mean() == pytest.approx(1 / rate, rel=0.03)
    assert _cv(gaps) == pytest.approx(1.0, abs=0.03)


@pytest.mark.parametrize("burstiness", [0.25, 4.0])
def test_gamma_gaps_cv_is_one_over_sqrt_shape(burstiness):
    rate = 3.0
    gaps = np.diff(arrival_times(rate, rng=_rng(2), n_requests=50_000, burstiness=burstiness))
    assert gaps.mean() == pytest.approx(1 / rate, rel=0.03)
    assert _cv(gaps) == pytest.approx(1 / math.sqrt(burstiness), rel=0.05)


def test_n_requests_mode_returns_exactly_n_sorted_from_zero():
    for n in (1, 2, 17, 1000):
        t = arrival_times(2.0, rng=_rng(n), n_requests=n)
        assert len(t) == n
        assert t[0] == 0.0
        assert np.all(np.diff(t) >= 0)


def test_duration_mode_stays_in_window_and_starts_at_zero():
    rate, duration = 50.0, 200.0
    t = arrival_times(rate, rng=_rng(3), duration_s=duration)
    assert t[0] == 0.0
    assert t.min() >= 0.0 and t.max() < duration
    assert np.all(np.diff(t) > 0)
    # Poisson count: mean rate * duration, sd sqrt(10,000) = 100.
    assert abs(len(t) - rate * duration) < 400


def test_duration_mode_is_the_same_process_across_chunks():
    """Duration mode draws in chunks; it must continue one process, not restart it per chunk."""
    rate, duration, burstiness = 2.0, 5.0, 0.25
    spanned_chunks = 0
    for seed in range(60):
        t = arrival_times(rate, rng=_rng(seed), duration_s=duration, burstiness=burstiness)
        ref = arrival_times(rate, rng=_rng(seed), n_requests=2000, burstiness=burstiness)
        ref = ref[ref < duration]
        assert len(t) == len(ref)
        np.testing.assert_allclose(t, ref, rtol=0, atol=1e-9)
        assert t.size == 0 or (t[0] == 0.0 and t.max() < duration)
        spanned_chunks += len(t) > 16  # the first chunk holds max(16, 1.2 * rate * duration)
    assert spanned_chunks > 0, "no seed exercised the multi-chunk path"


def test_infinite_rate_is_a_burst_at_zero():
    t = arrival_times(math.inf, rng=_rng(), n_requests=7)
    np.testing.assert_array_equal(t, np.zeros(7))
    with pytest.raises(SchedlabError):
        arrival_times(math.inf, rng=_rng(), duration_s=10.0)


def test_arrivals_are_seeded():
    a = arrival_times(4.0, rng=_rng(11), n_requests=500, burstiness=0.5)
    b = arrival_times(4.0, rng=_rng(11), n_requests=500, burstiness=0.5)
    c = arrival_times(4.0, rng=_rng(12), n_requests=500, burstiness=0.5)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    d1 = arrival_times(4.0, rng=_rng(11), duration_s=60.0)
    d2 = arrival_times(4.0, rng=_rng(11), duration_s=60.0)
    d3 = arrival_times(4.0, rng=_rng(12), duration_s=60.0)
    np.testing.assert_array_equal(d1, d2)
    assert not (len(d1) == len(d3) and np.array_equal(d1, d3))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"rate": 0.0, "n_requests": 5},
        {"rate": -1.0, "n_requests": 5},
        {"rate": float("nan"), "n_requests": 5},
        {"rate": 1.0, "n_requests": 5, "burstiness": 0.0},
        {"rate": 1.0, "n_requests": 5, "burstiness": -0.5},
        {"rate": 1.0, "n_requests": 5, "burstiness": float("nan")},
        {"rate": 1.0},
        {"rate": 1.0, "n_requests": 5, "duration_s": 10.0},
    ],
)
def test_invalid_arrival_arguments_raise(kwargs):
    with pytest.raises(SchedlabError):
        arrival_times(rng=_rng(), **kwargs)


# -- uniform_pool -----------------------------------------------------------------------------
def _utterances(n=100, seed=0, rate=None):
    """A synthetic utterance table; ``rate`` fixes tokens per second, else it varies per clip."""
    rng = _rng(seed)
    dur = rng.uniform(2.0, 12.0, n)
    per_s = np.full(n, rate, float) if rate is not None else rng.uniform(2.0, 4.0, n)
    tokens = per_s * dur
    return pd.DataFrame(
        {
            "utterance_id": [f"utt-{i}" for i in range(n)],
            "duration_s": dur,
            "transcript": ["x"] * n,
            "text_tokens": np.round(tokens).astype(np.int64) - 1,
            "output_tokens": tokens,  # kept fractional so token counts are proportional exactly
        }
    )


def test_uniform_pool_has_equal_shares_of_each_target():
    pool = uniform_pool(_utterances(), rng=_rng(5), clips_per_duration=20)
    assert list(pool.columns) == ["audio_duration_s", "output_tokens"]
    assert len(pool) == 20 * len(UNIFORM_DURATIONS)
    counts = pool["audio_duration_s"].value_counts()
    assert sorted(counts.index) == [float(d) for d in UNIFORM_DURATIONS]
    assert set(counts) == {20}
    # Shuffled, not grouped by duration.
    assert not pool["audio_duration_s"].is_monotonic_increasing


def test_uniform_pool_rows_hold_exactly_their_target_of_speech():
    """At a constant 3 tokens/s, a row's tokens are 3 x its target only if the clips it
    concatenates (the last one trimmed) add up to exactly the target."""
    pool = uniform_pool(_utterances(rate=3.0), rng=_rng(6), clips_per_duration=10, durations=(5, 7.4, 30))
    np.testing.assert_array_equal(pool["output_tokens"], np.round(3.0 * pool["audio_duration_s"]))
    assert sorted(set(pool["audio_duration_s"])) == [5.0, 7.4, 30.0]


def test_uniform_pool_token_rate_matches_source():
    utts = _utterances(n=100, seed=1)
    pool = uniform_pool(utts, rng=_rng(7), clips_per_duration=30)
    source_rate = utts["output_tokens"].sum() / utts["duration_s"].sum()
    pool_rate = pool["output_tokens"].sum() / pool["audio_duration_s"].sum()
    assert pool_rate == pytest.approx(source_rate, rel=0.03)
    # Tokens grow with duration: the mean per target rises monotonically.
    means = pool.groupby("audio_duration_s")["output_tokens"].mean()
    assert np.all(np.diff(means.to_numpy()) > 0)
    assert (pool["output_tokens"] >= 1).all()


def test_uniform_pool_is_seeded():
    utts = _utterances()
    a = uniform_pool(utts, rng=_rng(9), clips_per_duration=10)
    b = uniform_pool(utts, rng=_rng(9), clips_per_duration=10)
    c = uniform_pool(utts, rng=_rng(10), clips_per_duration=10)
    pd.testing.assert_frame_equal(a, b)
    assert not a.equals(c)


# -- asr_trace --------------------------------------------------------------------------------
def _pool(n=7):
    """Pool rows identifiable by duration; tokens tied to the row so pairing can be checked."""
    return pd.DataFrame({"audio_duration_s": np.arange(n) + 0.5, "output_tokens": 10 * np.arange(n) + 3})


def test_asr_trace_is_a_permutation_when_n_equals_pool_size():
    pool = _pool(7)
    trace = asr_trace(pool, np.linspace(0, 6, 7), rng=_rng(1))
    assert sorted(trace["audio_duration_s"]) == sorted(pool["audio_duration_s"])
    assert not np.array_equal(trace["audio_duration_s"], pool["audio_duration_s"])


def test_asr_trace_uses_every_row_once_before_repeats():
    pool = _pool(7)
    n = 17
    trace = asr_trace(pool, np.arange(n, dtype=float), rng=_rng(2))
    rows = (trace["audio_duration_s"] - 0.5).astype(int).to_numpy()
    assert sorted(rows[:7]) == list(range(7))
    assert sorted(rows[7:14]) == list(range(7))
    assert len(set(rows[14:])) == 3
    # Each trace row keeps its pool row's output length.
    np.testing.assert_array_equal(trace["output_tokens"], 10 * rows + 3)


def test_asr_trace_columns_ids_arrivals_and_prompt():
    pool = _pool(5)
    arrivals = np.array([0.0, 0.1, 0.1, 0.7, 2.0, 2.5])
    trace = asr_trace(pool, arrivals, rng=_rng(3))
    assert set(TRACE_COLUMNS) <= set(trace.columns)
    assert set(trace.columns) - set(TRACE_COLUMNS) <= set(TRACE_OPTIONAL)
    np.testing.assert_array_equal(trace["request_id"], np.arange(len(arrivals)))
    np.testing.assert_array_equal(trace["arrival_s"], arrivals)
    assert (trace["prompt_tokens"] == PROMPT_TOKENS).all()
    assert (trace["language"] == "en").all()


def test_asr_trace_caps_output_at_whisper_positions():
    assert WHISPER_MAX_POSITIONS - PROMPT_TOKENS == 448 - 4
    pool = pd.DataFrame({"audio_duration_s": [1.0, 2.0, 3.0, 4.0], "output_tokens": [443, 444, 445, 5000]})
    trace = asr_trace(pool, np.zeros(4), rng=_rng(4))
    by_dur = dict(zip(trace["audio_duration_s"], trace["output_tokens"]))
    assert by_dur == {1.0: 443, 2.0: 444, 3.0: 444, 4.0: 444}
    assert (trace["prompt_tokens"] + trace["output_tokens"] <= 448).all()


def test_asr_trace_rejects_an_empty_pool():
    with pytest.raises(SchedlabError):
        asr_trace(_pool(0), np.zeros(3), rng=_rng())


def test_asr_trace_is_seeded():
    pool = _pool(9)
    a = asr_trace(pool, np.arange(20.0), rng=_rng(5))
    b = asr_trace(pool, np.arange(20.0), rng=_rng(5))
    c = asr_trace(pool, np.arange(20.0), rng=_rng(6))
    pd.testing.assert_frame_equal(a, b)
    assert not a.equals(c)


# -- job_sizes --------------------------------------------------------------------------------
def test_job_sizes_floor_duration_times_kappa_with_fallbacks():
    trace = pd.DataFrame(
        {
            "audio_duration_s": [1.0, 2.5, np.nan, 3.3, 0.1, 10.0],
            "language": ["en", "en", "en", "xx", "en", "es"],
            "output_tokens": [10, 20, 444, 300, 5, 50],
        }
    )
    kappa = {"en": 2.9, "es": 4.25}
    sizes = job_sizes(trace, kappa)
    # floor(2.9), floor(7.25), no duration -> its max_tokens, unknown language -> its max_tokens,
    # max(1, floor(0.29)), floor(42.5)
    np.testing.assert_array_equal(sizes, [2, 7, 444, 300, 1, 42])


def test_job_sizes_default_language_and_missing_duration_column():
    sizes = job_sizes(pd.DataFrame({"audio_duration_s": [4.0, 0.0], "output_tokens": [9, 9]}), {"en": 3.5})
    np.testing.assert_array_equal(sizes, [14, 1])
    no_audio = pd.DataFrame({"request_id": [0, 1, 2], "output_tokens": [100, 7, 30]})
    np.testing.assert_array_equal(job_sizes(no_audio, {"en": 3.5}), [100, 7, 30])
    # Without any kappa every request falls back.
    np.testing.assert_array_equal(
        job_sizes(pd.DataFrame({"audio_duration_s": [4.0], "output_tokens": [77]}), {}), [77]
    )


def test_a_trace_priority_is_the_job_size_where_set():
    trace = pd.DataFrame({"audio_duration_s": [4.0, 4.0, np.nan], "priority": [2.0, np.nan, 0.0], "output_tokens": [9, 9, 9]})
    np.testing.assert_array_equal(job_sizes(trace, {"en": 3.5}), [2, 14, 0])


# -- `schedlab workload` ----------------------------------------------------------------------
def _cli(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "schedlab.cli", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
    )


@pytest.fixture
def utterances_parquet(tmp_path):
    utts = _utterances(n=40, seed=3)
    utts["output_tokens"] = np.round(utts["output_tokens"]).astype(np.int64)
    utts["text_tokens"] = utts["output_tokens"] - 1
    path = tmp_path / "in" / "utterances.parquet"
    path.parent.mkdir()
    utts.to_parquet(path, index=False)
    return path


@pytest.mark.slow
def test_cli_workload_is_byte_reproducible(utterances_parquet, tmp_path):
    common = ["workload", "--kind", "uniform", "--utterances", utterances_parquet, "--rate", "4",
              "--duration-s", "30", "--clips-per-duration", "5", "--burstiness", "0.5"]
    outs = {}
    for name, seed in (("a", 3), ("b", 3), ("c", 4)):
        outs[name] = tmp_path / "out" / f"{name}.parquet"
        r = _cli(*common, "--seed", seed, "--out", outs[name])
        assert r.returncode == 0, r.stderr
    assert outs["a"].read_bytes() == outs["b"].read_bytes()
    a, c = pd.read_parquet(outs["a"]), pd.read_parquet(outs["c"])
    assert not a.equals(c)
    assert set(TRACE_COLUMNS) <= set(a.columns)
    assert a["arrival_s"].iloc[0] == 0.0 and a["arrival_s"].max() < 30
    assert set(a["audio_duration_s"]) <= {float(d) for d in UNIFORM_DURATIONS}


def test_cli_workload_librispeech_draws_the_utterances(utterances_parquet, tmp_path):
    out = tmp_path / "out" / "ls.parquet"
    r = _cli("workload", "--kind", "librispeech", "--utterances", utterances_parquet, "--rate", "inf",
             "--n-requests", "40", "--out", out)
    assert r.returncode == 0, r.stderr
    trace = pd.read_parquet(out)
    utts = pd.read_parquet(utterances_parquet)
    assert (trace["arrival_s"] == 0).all()
    # 40 requests from 40 utterances: each used exactly once.
    assert sorted(trace["audio_duration_s"]) == sorted(utts["duration_s"])


def test_cli_workload_negative_rate_fails_cleanly(utterances_parquet, tmp_path):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    r = _cli("workload", "--kind", "librispeech", "--utterances", utterances_parquet, "--rate=-2",
             "--n-requests", "10", "--out", out_dir / "t.parquet")
    assert r.returncode != 0
    assert "Traceback" not in r.stderr
    errors = [line for line in r.stderr.splitlines() if "error" in line]
    assert len(errors) == 1
    assert "--rate" in errors[0] and "positive" in errors[0]
    assert list(out_dir.iterdir()) == []


def test_cli_workload_negative_rate_is_a_one_line_error(utterances_parquet, tmp_path):
    r = _cli("workload", "--kind", "librispeech", "--utterances", utterances_parquet, "--rate=-2",
             "--n-requests", "10", "--out", tmp_path / "t.parquet")
    assert r.returncode != 0
    assert r.stderr.strip().count("\n") == 0, r.stderr
    assert r.stderr.startswith("schedlab: error:")


def test_cli_workload_missing_input_is_one_line(tmp_path):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    r = _cli("workload", "--kind", "librispeech", "--utterances", tmp_path / "nope.parquet", "--rate", "2",
             "--n-requests", "10", "--out", out_dir / "t.parquet")
    assert r.returncode != 0
    assert r.stderr.strip().count("\n") == 0
    assert r.stderr.startswith("schedlab: error:") and "nope.parquet" in r.stderr
    assert list(out_dir.iterdir()) == []


# -- the benchmark client's bound -------------------------------------------------------------
def test_in_flight_cap_bounds_requests_in_flight_and_times_from_sending():
    from schedlab.engine import Arena, EngineConfig
    from schedlab.engine.steptime import StepTimeModel
    from schedlab.simulate import run_summary

    rng = np.random.default_rng(3)
    dur = rng.uniform(1, 20, 400)
    pool = pd.DataFrame({"audio_duration_s": dur, "output_tokens": np.maximum(1, np.round(3 * dur)).astype(int)})
    trace = asr_trace(pool, arrival_times(40.0, rng=_rng(1), duration_s=10), rng=_rng(2))
    arena = Arena(StepTimeModel(intercept=5e-3, n_encoder=0.03, n_decode=1e-4, frontend_s=0.01),
                  EngineConfig(max_num_batched_tokens=2048, encoder_frames=1500, kv_capacity_blocks=1 << 30))
    open_run = run_summary(trace, "fcfs", arena, identity={})
    capped = run_summary(trace, "fcfs", arena, identity={}, max_in_flight=8)
    req = capped[0].requests.sort_values("arrival_s")
    sent, done = req["arrival_s"].to_numpy(), req["finish_s"].to_numpy()
    seen = sent + 0.01  # when the scheduler gets each request
    in_flight = [(seen <= t).sum() - (done <= t).sum() for t in seen]
    assert max(in_flight) == 8
    orig = trace.set_index("request_id").loc[req["request_id"], "arrival_s"].to_numpy()
    assert (sent >= orig - 1e-12).all() and (sent > orig + 1).any()  # held at the client
    assert (req["first_token_s"] - req["arrival_s"] >= 0.01).all()  # the front end still counts
    # The queue sits at the client, where it is not timed: latencies far below the open run's.
    assert capped[1]["p50_e2el_ms"] < 0.5 * open_run[1]["p50_e2el_ms"]
    assert capped[1]["completed"] == len(trace)
    with pytest.raises(SchedlabError, match="sim backend only"):
        run_summary(trace, "fcfs", arena, identity={}, backend="vllm-sim", max_in_flight=8)
