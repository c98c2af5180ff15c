"""Numerical failures in one line: a root finder, a least-squares fit or a capacity search whose
target cannot be reached says which input makes it so and what range would work (exit 2, nothing
written), and step-time models and profiles are bounded where a step keeps its meaning."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from test_hostile import assert_rejected, files, run_cli, simulate  # noqa: F401 (a fixture)

BACKENDS = ["sim", "vllm-sim"] if __import__("importlib").util.find_spec("vllm") else ["sim"]


@pytest.fixture
def utterances(files):  # noqa: F811
    path = files["dir"] / "utterances.parquet"
    rng = np.random.default_rng(0)
    seconds = rng.uniform(2, 20, 300)
    pd.DataFrame({"duration_s": seconds, "output_tokens": np.round(seconds * 3).astype(int) + 1}).to_parquet(path)
    return path


def _calibrate(files, utterances, base, *extra):  # noqa: F811
    return ["fit", "calibrate", "--base", str(base), "--utterances", str(utterances), "--kappa", str(files["kappa"]),
            "--hardware", "A100-40GB", "--model", "whisper-tiny", "--requests-per-rate", "20", "--n-requests", "60",
            "--fit-only", "--out", str(files["out"] / "c.json"), *extra]


def _ewsjf_calibrate(files, base, *extra):  # noqa: F811
    return ["ewsjf", "calibrate", "--base", str(base), "--short", str(files["pool"]), "--long", str(files["pool"]),
            "--n-requests", "50", "--out", str(files["out"] / "c.json"), *extra]


def test_a_saturation_target_below_reach_names_the_range_that_works(capsys, files, utterances):  # noqa: F811
    """(scipy's "f(a) and f(b) must have different signs" before.)"""
    err = assert_rejected(capsys, files, _calibrate(files, utterances, files["steptime"], "--saturation-rps", "0.001"),
                   "0.001 req/s saturation target", "can be fitted")
    low, high = (float(x) for x in err.split("targets from ")[1].split(" req/s")[0].split(" to "))
    assert 0.001 < low < high
    assert_rejected(capsys, files, _ewsjf_calibrate(files, files["steptime"], "--saturation-rps", "1e-4"), "can be fitted")
    assert_rejected(capsys, files, _ewsjf_calibrate(files, files["steptime"], "--saturation-rps", "1e5"),
             "offer a higher overload rate")


@pytest.mark.parametrize("command", ["fit calibrate", "ewsjf calibrate"])
def test_a_model_with_no_cost_to_scale_isassert_rejected(capsys, files, utterances, command):  # noqa: F811
    """``{"intercept": 0.0}``, which the schema allows, crashed both calibrations."""
    base = files["dir"] / "zero.json"
    base.write_text(json.dumps({"intercept": 0.0}))
    argv = (_calibrate(files, utterances, base, "--saturation-rps", "18") if command == "fit calibrate"
            else _ewsjf_calibrate(files, base))
    assert_rejected(capsys, files, argv, "--base", "no compute-bound cost")


@pytest.mark.parametrize("hardware", ["100000xA100-40GB", "1000000xA100-40GB"])
def test_a_roofline_that_cannot_match_the_reference_says_why(capsys, files, hardware):  # noqa: F811
    """A roofline so fast that no efficiency down to 1e-4 slows it to the reference's time
    (scipy's "f(a) and f(b) must have different signs" before)."""
    assert_rejected(capsys, files, ["slosa", "profile", "--source", "roofline", "--calibrate", "--hardware", hardware,
                             "--out", str(files["out"] / "p.parquet")], hardware, "bw_eff", "from 0.0001 to 1")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("terms", [{"intercept": 1.7e308, "n_decode": 1.7e308}, {"intercept": 1e300},
                                   {"intercept": 0.002, "ctx_tokens": 1001.0}])
def test_step_time_terms_past_a_steps_meaning_areassert_rejected(capsys, files, backend, terms):  # noqa: F811
    """Terms of 1.7e308 (finite) crashed sim (IndexError) and vllm-sim (TypeError); 1e300 gave
    latencies of 1e305 ms with exit 0."""
    files["steptime"].write_text(json.dumps(terms))
    key = next(k for k, v in terms.items() if v > 1000)
    assert_rejected(capsys, files, simulate(files, backend=backend), str(files["steptime"]), key, "1000")


def _profile(n: int = 40, **columns) -> pd.DataFrame:
    rng = np.random.default_rng(1)
    p = pd.DataFrame({"source": "t", "hardware": "h", "model": "m", "n_encoder": rng.integers(0, 4, n).astype(float),
                      "n_prefill_tokens": rng.integers(0, 500, n).astype(float),
                      "n_decode": rng.integers(0, 64, n).astype(float), "ctx_tokens": rng.integers(0, 9000, n).astype(float)})
    p["time_s"] = 0.002 + 0.01 * p["n_encoder"] + 1e-5 * p["n_prefill_tokens"] + 1e-4 * p["n_decode"] + 1e-8 * p["ctx_tokens"]
    return p.assign(**columns)


PROFILES = {
    "times of 1e300 s": (lambda: _profile(time_s=1e300), "time_s"),
    "one time of 1e308 s": (lambda: _profile().assign(time_s=lambda p: np.where(p.index == 3, 1e308, p["time_s"])),
                            "row 3"),
    "a context of 1e300 tokens": (lambda: _profile().assign(ctx_tokens=lambda p: np.where(p.index == 2, 1e300,
                                                                                        p["ctx_tokens"])), "ctx_tokens"),
    "a fit of 2000 s per context token": (lambda: _profile(ctx_tokens=np.arange(40) % 2 * 1e-3,
                                                           time_s=np.arange(40) % 2 * 2.0), "not written"),
}


@pytest.mark.parametrize("tile", ["0", "128"])
@pytest.mark.parametrize("make, named", PROFILES.values(), ids=PROFILES.keys())
def test_a_step_time_fit_never_writes_a_model_it_could_not_read(capsys, files, make, named, tile):  # noqa: F811
    """(`fit steptime` wrote Infinity into its JSON, and statsmodels' warnings, before.)"""
    profile = files["dir"] / "profile.parquet"
    make().to_parquet(profile)
    assert_rejected(capsys, files, ["fit", "steptime", "--profile", str(profile), "--tile", tile,
                             "--out", str(files["out"] / "f.json")], named)


def test_a_flat_profile_fits_without_a_warning(capsys, files):  # noqa: F811
    profile = files["dir"] / "profile.parquet"
    _profile(time_s=1e-320).to_parquet(profile)
    rc, _, err = run_cli(capsys, ["fit", "steptime", "--profile", str(profile), "--out", str(files["out"] / "f.json")])
    assert rc == 0 and err == "", err
    assert math.isfinite(json.loads((files["out"] / "f.json").read_text())["intercept"])


def test_bracketed_root_checks_its_ends_once_each():
    from schedlab.errors import SchedlabError
    from schedlab.fit.roots import bracketed_root

    calls = []

    def f(x):
        calls.append(x)
        return x - 0.25

    assert bracketed_root(f, 0.0, 1.0, unreachable=lambda a, b: "") == pytest.approx(0.25)
    assert calls.count(0.0) == calls.count(1.0) == 1
    with pytest.raises(SchedlabError, match="from 1 to 2"):
        bracketed_root(f, 1.0, 2.0, unreachable=lambda a, b: f"from {a + 0.25:g} to {b + 0.25:g}")
    with pytest.raises(SchedlabError, match="nan"):
        bracketed_root(lambda x: math.nan, 0.0, 1.0, unreachable=lambda a, b: f"{a}")


def test_a_fit_whose_start_gives_no_finite_residual_is_one_line():
    """(scipy's "Residuals are not finite in the initial point" ended `fit calibrate` in a
    traceback.) A reported cell of 0 ms: its log residual is infinite wherever the fit starts."""
    from schedlab.engine import Arena, EngineConfig
    from schedlab.engine.steptime import StepTimeModel
    from schedlab.errors import SchedlabError
    from schedlab.fit.calibrate import BASELINE_METRICS, calibrate
    from schedlab.workload.arrivals import arrival_times

    def trace(rate, n, seed):
        arrivals = arrival_times(rate, rng=np.random.default_rng(seed), n_requests=n)
        return pd.DataFrame({"request_id": np.arange(n), "arrival_s": arrivals, "prompt_tokens": 4,
                             "output_tokens": 20, "audio_duration_s": 6.0})

    arena = Arena(StepTimeModel(0.002, n_encoder=0.01, n_decode=1e-4), EngineConfig(max_num_seqs=32,
                  max_num_batched_tokens=4096, kv_capacity_blocks=4000, encoder_frames=1500), {"en": 3.0})
    baseline = pd.DataFrame({m: [100.0, 200.0] for m in BASELINE_METRICS}, index=pd.Index([1.0, 4.0], name="rate"))
    baseline.loc[4.0, "p50_ttft_ms"] = 0.0
    with pytest.raises(SchedlabError, match="the fit cannot start .*Residuals are not finite"):
        calibrate(arena, baseline=baseline, traces={r: trace(r, 40, 1) for r in baseline.index},
                  overload_trace=trace(60.0, 200, 2), saturation_rps=20.0)


def test_a_cluster_on_step_time_terms_past_a_steps_meaning_isassert_rejected(capsys, files):  # noqa: F811
    """(Terms of 1e300 gave a `cluster` summary of `completed: 0` with exit 0.)"""
    files["steptime"].write_text(json.dumps({"intercept": 1e300}))
    out = files["out"]
    assert_rejected(capsys, files, ["cluster", "--trace", str(files["trace"]), "--replicas", "2", "--router", "least-requests",
                             "--policy", "fcfs", "--steptime", str(files["steptime"]), "--hardware", "A100-40GB",
                             "--model", "whisper-tiny", "--out-results", str(out / "r.parquet"),
                             "--out-summary", str(out / "r.json"), "--out-replicas", str(out / "p.parquet")],
             "intercept", "1000")
