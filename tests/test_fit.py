"""Fits: kappa (tokens per second of audio), step-time OLS, StepTimeModel, calibration."""

import json

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from schedlab.contracts import PROFILE_COLUMNS, STEP_FEATURES
from schedlab.errors import SchedlabError
from schedlab.fit.calibrate import BASELINE_METRICS, baseline_rows, calibrate, implied_saturation
from schedlab.fit.kappa import fit_kappa, fit_languages
from schedlab.fit.steptime import best_knee, fit_held_out, fit_steptime, front_end_at, predict, read_engine_steps
from schedlab.engine import Arena, EngineConfig
from schedlab.simulate import run_summary
from schedlab.engine.steptime import COMPUTE_TERMS, MEMORY_TERMS, StepTimeModel
from schedlab.io import write_json
from schedlab.validation import read_kappa, read_steptime, write_steptime
from schedlab.workload.arrivals import arrival_times
from schedlab.workload.asr import asr_trace


# -- kappa ------------------------------------------------------------------------------------
def _kappa_data(kappa=2.7, n=2000, noise=2.0, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(1.0, 30.0, n)
    return x, kappa * x + rng.normal(0.0, noise, n)


def test_fit_kappa_recovers_known_slope():
    x, y = _kappa_data()
    fit = fit_kappa(x, y)
    assert abs(fit["kappa"] - 2.7) < 3 * fit["se"]
    assert 0 < fit["se"] < 0.01
    lo, hi = fit["ci95"]
    assert lo < 2.7 < hi
    assert fit["n"] == 2000
    assert 0.9 < fit["r2_centered"] < fit["r2_uncentered"] <= 1


def test_fit_kappa_is_ols_through_the_origin():
    x, y = _kappa_data(kappa=4.1, n=50, noise=5.0, seed=1)
    fit = fit_kappa(x, y)
    k = np.sum(x * y) / np.sum(x * x)
    resid = y - k * x
    n = len(x)
    se = np.sqrt(resid @ resid / (n - 1) / np.sum(x * x))
    t = stats.t.ppf(0.975, n - 1)
    assert fit["kappa"] == pytest.approx(k, rel=1e-12)
    assert fit["se"] == pytest.approx(se, rel=1e-10)
    assert fit["ci95"] == pytest.approx([k - t * se, k + t * se], rel=1e-10)
    assert fit["r2_uncentered"] == pytest.approx(1 - resid @ resid / (y @ y), rel=1e-10)
    assert fit["r2_centered"] == pytest.approx(1 - resid @ resid / np.sum((y - y.mean()) ** 2), rel=1e-10)


def test_fit_kappa_ignores_an_offset_it_cannot_model():
    """Through the origin, an intercept in the data biases kappa rather than being fitted."""
    x = np.array([1.0, 2.0, 3.0, 4.0])
    y = 2.0 * x + 3.0
    assert fit_kappa(x, y)["kappa"] == pytest.approx(np.sum(x * y) / np.sum(x * x), rel=1e-12)
    assert fit_kappa(x, y)["kappa"] > 2.0


def test_fit_languages_keeps_reasons_and_the_kappa_file_reads_fitted_only(tmp_path):
    x, y = _kappa_data(kappa=3.0, n=200, noise=1.0, seed=2)
    x2, y2 = _kappa_data(kappa=5.0, n=200, noise=1.0, seed=3)
    reason = "FLEURS hi not available offline (no mirror)"
    fit = fit_languages(
        {
            "en": pd.DataFrame({"duration_s": x, "text_tokens": y}),
            "hi": reason,
            "es": pd.DataFrame({"duration_s": x2, "text_tokens": y2}),
        }
    )
    assert fit["hi"] == {"status": "not reproduced", "reason": reason}
    assert fit["en"]["status"] == "fitted" and fit["es"]["status"] == "fitted"
    assert fit["en"]["kappa"] == pytest.approx(fit_kappa(x, y)["kappa"], rel=1e-12)
    assert {"se", "ci95", "r2_uncentered", "n"} <= set(fit["es"])
    write_json(fit, tmp_path / "kappa.json")
    k = read_kappa(tmp_path / "kappa.json")
    assert set(k) == {"en", "es"}
    assert k["en"] == fit["en"]["kappa"] and k["es"] == fit["es"]["kappa"]
    write_json({"ar": {"status": "not reproduced", "reason": "x"}}, tmp_path / "none.json")
    assert read_kappa(tmp_path / "none.json") == {}


# -- step-time OLS ----------------------------------------------------------------------------
TRUE = {"const": 2e-3, "n_encoder": 8e-3, "n_prefill_tokens": 2e-6, "n_decode": 3e-5, "ctx_tokens": 1e-8}


def _profile(n=400, seed=0, noise=1e-4, **fixed):
    """Features drawn independently; ``fixed`` holds a feature at one value."""
    rng = np.random.default_rng(seed)
    cols = {
        "n_encoder": rng.integers(0, 5, n),
        "n_prefill_tokens": rng.integers(0, 4000, n),
        "n_decode": rng.integers(0, 256, n),
        "ctx_tokens": rng.integers(0, 100_000, n),
    }
    for f, v in fixed.items():
        cols[f] = np.full(n, v)
    time_s = TRUE["const"] + sum(TRUE[f] * cols[f] for f in STEP_FEATURES) + rng.normal(0, noise, n)
    return pd.DataFrame(
        {"source": "roofline", "hardware": "A100-40GB", "model": "whisper-tiny", **cols, "time_s": time_s}
    )[list(PROFILE_COLUMNS)]


def test_fit_steptime_recovers_coefficients_within_their_cis():
    profile = _profile()
    model = fit_steptime(profile)
    ci = model.meta["ci95"]
    assert set(ci) == {"const", *STEP_FEATURES}
    fitted = {"const": model.intercept, **{f: getattr(model, f) for f in STEP_FEATURES}}
    for name, true in TRUE.items():
        lo, hi = ci[name]
        assert lo <= fitted[name] <= hi
        assert lo <= true <= hi, (name, true, ci[name])
    # Exactly the least-squares solution.
    X = np.column_stack([np.ones(len(profile))] + [profile[f].to_numpy(float) for f in STEP_FEATURES])
    beta = np.linalg.lstsq(X, profile["time_s"].to_numpy(), rcond=None)[0]
    np.testing.assert_allclose([fitted[k] for k in TRUE], beta, rtol=1e-6, atol=1e-12)
    assert model.meta["r2"] > 0.99
    assert model.meta["resid_sd_s"] == pytest.approx(1e-4, rel=0.15)
    assert model.meta["n_rows"] == 400
    assert (model.meta["source"], model.meta["hardware"], model.meta["model"]) == (
        "roofline",
        "A100-40GB",
        "whisper-tiny",
    )
    assert model.frontend_s == 0.0
    resid = profile["time_s"] - predict(model, profile)
    assert np.std(resid) == pytest.approx(1e-4, rel=0.15)


def test_fit_steptime_constant_feature_gets_zero():
    no_prefill = fit_steptime(_profile(n_prefill_tokens=0, seed=1))
    assert no_prefill.n_prefill_tokens == 0.0
    assert "n_prefill_tokens" not in no_prefill.meta["ci95"]
    assert no_prefill.n_decode == pytest.approx(TRUE["n_decode"], rel=0.02)
    # A constant non-zero feature is absorbed by the intercept.
    one_clip = fit_steptime(_profile(n_encoder=1, seed=2))
    assert one_clip.n_encoder == 0.0
    lo, hi = one_clip.meta["ci95"]["const"]
    assert lo <= TRUE["const"] + TRUE["n_encoder"] <= hi


def test_fit_steptime_needs_enough_rows():
    full = _profile(n=50, seed=3)
    with pytest.raises(SchedlabError, match="too few"):
        fit_steptime(full.iloc[:5])  # 5 coefficients from 5 rows leaves no residual
    fit_steptime(full.iloc[:6])
    # Fewer varying features need fewer rows.
    with pytest.raises(SchedlabError):
        fit_steptime(_profile(n=2, seed=4, n_encoder=0, n_prefill_tokens=0, n_decode=0))
    fit_steptime(_profile(n=3, seed=4, n_encoder=0, n_prefill_tokens=0, n_decode=0))


@pytest.mark.parametrize("column", ["ctx_tokens", "time_s", "source"])
def test_fit_steptime_rejects_missing_columns(column):
    with pytest.raises(SchedlabError, match=column):
        fit_steptime(_profile(n=50).drop(columns=column))


def _flat_then_linear(knee=6, floor=0.015, per_token=0.0012, noise=2e-4, n=3000, seed=0):
    """A small decoder on a CPU: steps of 1-24 decodes, flat up to ``knee`` tokens, then
    ``per_token`` seconds a token more."""
    rng = np.random.default_rng(seed)
    n_decode = rng.integers(1, 25, n)
    time_s = floor + per_token * np.maximum(n_decode - knee, 0) + rng.normal(0, noise, n)
    return pd.DataFrame({"source": "vllm-served", "hardware": "cpu", "model": "small-llama", "n_encoder": 0,
                         "n_prefill_tokens": 0, "n_decode": n_decode, "ctx_tokens": 0, "time_s": time_s})


def test_a_knee_is_found_where_the_step_stops_being_flat(tmp_path):
    profile = _flat_then_linear()
    assert best_knee(profile) == 6
    model = fit_steptime(profile, knee=6)
    assert model.knee == 6 and model.knee_tokens == pytest.approx(0.0012, rel=0.01)
    assert model.intercept + model.n_decode * 6 == pytest.approx(0.015, abs=2e-4)  # the floor
    assert model(0, 0, 24, 0) == pytest.approx(0.015 + 18 * 0.0012, abs=3e-4)
    write_steptime(model, tmp_path / "m.json")
    assert read_steptime(tmp_path / "m.json") == model
    line = fit_steptime(profile)  # one line through it: 3 ms fast at one token
    assert line(0, 0, 1, 0) < 0.015 - 2e-3 and line.meta["resid_sd_s"] > 5 * model.meta["resid_sd_s"]
    # A straight line has no knee worth its term.
    assert best_knee(_profile(n=400, seed=7)) == 0
    assert best_knee(_flat_then_linear(knee=6, per_token=0.0)) == 0


def test_a_term_fitted_below_zero_is_left_out_and_the_rest_refitted():
    """Below a knee the decode slope is flat; with the knee term the fit would give it a small
    negative cost, so it is left out and the fit is the least-squares one without it."""
    profile = _flat_then_linear(per_token=0.002, noise=1e-5)
    profile["time_s"] -= 1e-4 * np.minimum(profile["n_decode"], 6)  # slightly faster as it fills up to the knee
    model = fit_steptime(profile, knee=6)
    assert model.meta["clipped"]["n_decode"] < 0 and model.n_decode == 0.0
    X = np.column_stack([np.ones(len(profile)), np.maximum(profile["n_decode"] - 6, 0)])
    beta = np.linalg.lstsq(X, profile["time_s"].to_numpy(), rcond=None)[0]
    assert [model.intercept, model.knee_tokens] == pytest.approx(beta, rel=1e-9)


# -- held out by rate (served engine steps) ---------------------------------------------------
def _served_steps(tmp_path, seed=0, speed=1.0):
    """Step tables of three rates, as `schedlab vllm-serve` writes them for the server started
    with ``seed``, its steps ``speed`` times TRUE's cost: rates 1 and 2 follow it, rate 3's cost
    ten times as much (and carry prefill pairs the fit must not use)."""
    paths = []
    for k, rate in enumerate((1.0, 2.0, 3.0)):
        steps = _profile(n=200, seed=10 + k, noise=1e-6).assign(source="vllm-served", rate=rate, policy="fcfs",
                                                                seed=seed, prefill_pairs=np.arange(200) * 7)
        steps["time_s"] *= speed * (10 if rate == 3.0 else 1)
        paths.append(tmp_path / f"rate{rate:g}_seed{seed}_rep0.steps.parquet")
        steps.to_parquet(paths[-1])
    return paths


def test_held_out_fit_leaves_out_the_held_out_rates_steps(tmp_path):
    _served_steps(tmp_path)
    steps = read_engine_steps([tmp_path])
    assert len(steps) == 600
    clean = fit_held_out(steps, 3.0)  # fitted on rates 1 and 2 only: TRUE exactly
    assert clean.meta["held_out_rate"] == 3.0 and clean.meta["rates"] == [1.0, 2.0]
    assert clean.meta["n_steps_by_rate"] == {"1": 200, "2": 200} and clean.meta["n_rows"] == 400
    assert clean.intercept == pytest.approx(TRUE["const"], rel=1e-3)
    assert clean.n_decode == pytest.approx(TRUE["n_decode"], rel=1e-3)
    assert clean.prefill_pairs == 0.0 and "prefill_pairs" not in clean.meta["ci95"]  # the profile fit's terms
    assert clean.meta["r2"] > 0.999
    # Holding out rate 1 keeps rate 3's costlier steps: a different, worse fit.
    mixed = fit_held_out(steps, 1.0)
    assert mixed.meta["rates"] == [2.0, 3.0] and mixed.meta["r2"] < 0.99
    everything = fit_held_out(steps, None)
    assert everything.meta["held_out_rate"] is None and everything.meta["n_rows"] == 600
    with pytest.raises(SchedlabError, match="no steps at rate 4"):
        fit_held_out(steps, 4.0)
    with pytest.raises(SchedlabError, match="another rate"):
        fit_held_out(steps[steps["rate"] == 1.0], 1.0)


def test_held_out_fit_takes_the_front_end_from_the_other_rates_replays():
    """Each replay's mean time per request outside the scheduler is one point (whatever its step
    count); ``frontend_s`` at the held-out rate is the least-squares line through the other
    rates' medians where they show a trend (here 20 ms a request per req/s), never the
    held-out replay's own."""
    rows = []
    # 20 ms a request per req/s offered (each rate's median; rate 1's first replay has the most
    # steps, and counts once); rate 3's is wild.
    for rate, repeat, to_core_s, n in ((1.0, 0, 0.010, 50), (1.0, 1, 0.020, 10), (1.0, 2, 0.030, 10),
                                         (2.0, 0, 0.035, 10), (2.0, 1, 0.040, 10), (2.0, 2, 0.045, 10),
                                         (3.0, 0, 5.0, 10), (4.0, 0, 0.080, 10)):
        rows.append(_profile(n=n, seed=n + repeat).assign(rate=rate, policy="fcfs", seed=0, repeat=repeat,
                                                          to_core_s=to_core_s, way_out_s=0.004))
    steps = pd.concat(rows, ignore_index=True)
    model = fit_held_out(steps, 3.0)
    assert model.frontend_s == pytest.approx(0.060)
    assert model.meta["frontend_s_from"].startswith("a line in the offered rate through each rate's median (trend p = ")
    assert "at 3 req/s over 7 replays" in model.meta["frontend_s_from"]
    one_rate = fit_held_out(steps[steps["rate"].isin([1.0, 3.0])], 3.0)
    assert one_rate.frontend_s == pytest.approx(0.020)  # one other rate: the median of 10, 20 and 30 ms
    assert fit_held_out(steps, None).frontend_s == pytest.approx(0.0375)  # no rate to predict: the median
    assert model.output_s == pytest.approx(0.004)  # the way out has no trend: the replays' median
    assert model.meta["output_s_from"].startswith("median (no trend in the offered rate")
    bare = fit_held_out(steps.drop(columns=["to_core_s", "way_out_s"]), 3.0)
    assert bare.frontend_s == bare.output_s == 0.0 and "frontend_s_from" not in bare.meta  # no record: none
    # A replay whose front end lagged (more than 25% of its time outside the scheduler) is no
    # measure of the front end's usual delay: left out, unless every kept replay lagged.
    lag = _profile(n=10, seed=99).assign(rate=4.0, policy="fcfs", seed=0, repeat=1, to_core_s=5.0, way_out_s=0.004)
    lagging = pd.concat([steps, lag], ignore_index=True)
    lagging["outside_engine_share"] = np.where(lagging["repeat"].eq(1) & lagging["rate"].eq(4.0), 0.9, 0.05)
    model = fit_held_out(lagging, 3.0)
    assert model.frontend_s == pytest.approx(0.060)
    assert "(1 left out as not measuring the engine)" in model.meta["frontend_s_from"]
    assert fit_held_out(lagging.assign(outside_engine_share=0.9), 3.0).frontend_s > 1.0  # all lagged: all kept
    # So is one that other processes interfered with, or whose client fell behind its trace.
    for flaw in ({"foreign_cpu_share": 0.5}, {"send_lag_max_ms": 900.0}):
        column, value = next(iter(flaw.items()))
        flawed = lagging.assign(outside_engine_share=0.05)
        flawed[column] = np.where(flawed["repeat"].eq(1) & flawed["rate"].eq(4.0), value, 0.0)
        assert fit_held_out(flawed, 3.0).frontend_s == pytest.approx(0.060), column


def test_the_front_end_follows_the_rate_only_where_the_replays_show_a_trend():
    """Whisper's front end grows with the load; a decoder's stays within its noise. A line is
    read off only where the replays' ranks show a trend (Kendall's tau), through each rate's
    median, so a slow replay (60 ms among 20-22) neither hides the trend nor tilts the line; noise gives the replays' median, never an
    extrapolated line."""
    grows = pd.DataFrame({"rate": [1.0] * 3 + [2.0] * 3 + [3.0] * 3,
                          "to_core_s": [0.010, 0.011, 0.012, 0.020, 0.021, 0.060, 0.030, 0.031, 0.032]})
    value, how = front_end_at(grows, 4.0)
    assert value == pytest.approx(0.041)  # medians 11, 21, 31 ms: +10 ms per req/s
    assert how.startswith("a line in the offered rate through each rate's median (trend p = ")
    noise = pd.DataFrame({"rate": [5.0] * 3 + [15.0] * 2 + [25.0],
                          "to_core_s": [0.032, 0.054, 0.025, 0.036, 0.056, 0.025]})
    value, how = front_end_at(noise[noise["rate"] > 5], 5.0)  # a line through 15 and 25 would give 67 ms
    assert value == pytest.approx(0.036) and how.startswith("median (no trend in the offered rate, p = ")
    two = pd.DataFrame({"rate": [2.0, 3.0], "to_core_s": [0.010, 0.030]})  # two points: no evidence of a trend
    assert front_end_at(two, 1.0) == (pytest.approx(0.020), "median (no trend in the offered rate, p = 1)")


def test_the_front_end_line_never_goes_below_zero():
    replays = pd.DataFrame({"rate": [2.0, 2.0, 3.0, 3.0, 4.0, 4.0],
                            "to_core_s": [0.010, 0.011, 0.030, 0.031, 0.050, 0.051]})
    assert front_end_at(replays, 2.5)[0] == pytest.approx(0.0205)
    assert front_end_at(replays, 1.0)[0] == 0.0  # the line is at -9.5 ms there


def test_fit_engine_steps_cli_writes_one_fit_per_held_out_rate(tmp_path):
    from schedlab.cli import main

    _served_steps(tmp_path)
    outs = [tmp_path / f"without{r}.json" for r in (1, 2, 3)]
    assert main(["fit", "engine-steps", "--steps", str(tmp_path), "--held-out", "1", "2", "3",
                 "--out", *map(str, outs), "--out-all", str(tmp_path / "all.json")]) == 0
    for rate, out in zip((1.0, 2.0, 3.0), outs):
        model = read_steptime(out)
        assert model.meta["held_out_rate"] == rate and rate not in model.meta["rates"]
    assert read_steptime(tmp_path / "all.json").meta["rates"] == [1.0, 2.0, 3.0]
    assert main(["fit", "engine-steps", "--steps", str(tmp_path / "none"), "--held-out", "1", "--out", "x.json"]) == 2
    # a fit on every step alone (one server at one rate: paper B's engine run), and nothing asked
    assert main(["fit", "engine-steps", "--steps", str(tmp_path), "--out-all", str(tmp_path / "only.json")]) == 0
    assert read_steptime(tmp_path / "only.json") == read_steptime(tmp_path / "all.json")
    assert main(["fit", "engine-steps", "--steps", str(tmp_path)]) == 2


def test_fit_engine_steps_fits_one_server_of_several(tmp_path, capsys):
    """Two servers of one job (seeds 0 and 1), the second 10% slower throughout: ``--seed``
    fits each on its own steps, so each recovers its own speed; pooled, neither would."""
    from schedlab.cli import main

    _served_steps(tmp_path, seed=0)
    _served_steps(tmp_path, seed=1, speed=1.1)
    for seed, speed in ((0, 1.0), (1, 1.1)):
        out = tmp_path / f"seed{seed}.json"
        assert main(["fit", "engine-steps", "--steps", str(tmp_path), "--seed", str(seed), "--held-out", "3",
                     "--out", str(out)]) == 0
        model = read_steptime(out)
        assert model.meta["n_rows"] == 400 and model.meta["servers"] == [["fcfs", seed]]
        assert model.n_decode == pytest.approx(TRUE["n_decode"] * speed, rel=1e-3)
    assert main(["fit", "engine-steps", "--steps", str(tmp_path), "--seed", "2", "--held-out", "3",
                 "--out", str(tmp_path / "x.json")]) == 2
    assert "no steps of seed 2" in capsys.readouterr().err and not (tmp_path / "x.json").exists()


# -- StepTimeModel ----------------------------------------------------------------------------
def test_steptime_model_save_load_round_trip(tmp_path):
    model = fit_steptime(_profile(n=60, seed=5))
    path = tmp_path / "sub" / "model.json"
    write_steptime(model, path)
    loaded = read_steptime(path)
    assert loaded == model
    assert loaded.coefficients == model.coefficients
    assert loaded.meta == json.loads(json.dumps(model.meta))
    calibrated = model.scaled(3.0, 1.5, 0.02, calibration={"compute": 3.0})
    write_steptime(calibrated, path)
    again = read_steptime(path)
    assert again == calibrated and again.frontend_s == 0.02
    assert again.meta["calibration"] == {"compute": 3.0}


def test_steptime_model_load_errors(tmp_path):
    with pytest.raises(SchedlabError, match="not found"):
        read_steptime(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"intercept": 1.0, "slope": 2.0}))
    with pytest.raises(SchedlabError):
        read_steptime(bad)


def test_scaled_multiplies_compute_and_memory_terms_and_sets_frontend():
    base = StepTimeModel(intercept=1e-3, n_encoder=2e-2, n_prefill_tokens=3e-6, n_decode=4e-5,
                         ctx_tokens=5e-9, meta={"source": "roofline"})
    s = base.scaled(2.5, 1.5, 0.04, calibration={"compute": 2.5})
    for name, value in base.coefficients.items():
        factor = 2.5 if name in COMPUTE_TERMS else 1.5
        assert s.coefficients[name] == pytest.approx(factor * value, rel=1e-15)
    assert set(COMPUTE_TERMS) | set(MEMORY_TERMS) == set(base.coefficients)
    assert s.frontend_s == 0.04
    assert s.meta == {"source": "roofline", "calibration": {"compute": 2.5}}
    assert base.meta == {"source": "roofline"}  # the original is untouched
    rng = np.random.default_rng(0)
    feats = [rng.integers(0, 1000, 20) for _ in STEP_FEATURES]
    np.testing.assert_allclose(base.scaled(2.5, 2.5)(*feats), 2.5 * base(*feats), rtol=1e-12)
    assert base.scaled(1.0).frontend_s == 0.0
    assert s.scaled(1.0).frontend_s == 0.04  # kept unless replaced


# -- calibration ------------------------------------------------------------------------------
ENGINE = EngineConfig(max_num_batched_tokens=2048, encoder_frames=1500, kv_capacity_blocks=1 << 30)
BASE = StepTimeModel(intercept=2e-3, n_encoder=5e-3, n_prefill_tokens=1e-6, n_decode=2e-4, ctx_tokens=1e-8)
KAPPA = {"en": 3.0}


def _pool(n=300, seed=7):
    rng = np.random.default_rng(seed)
    dur = np.clip(rng.lognormal(np.log(6.0), 0.5, n), 1.0, 30.0)
    return pd.DataFrame({"audio_duration_s": dur, "output_tokens": np.maximum(1, np.round(3 * dur * rng.uniform(0.8, 1.2, n)))})


def _trace(pool, rate, n, seed):
    arrivals = arrival_times(rate, rng=np.random.default_rng([seed, 0]), n_requests=n)
    return asr_trace(pool, arrivals, rng=np.random.default_rng([seed, 1]))


def _fcfs(trace, model):
    return run_summary(trace, "fcfs", Arena(model, ENGINE, KAPPA), identity={})[1]


@pytest.mark.slow
def test_joint_fit_recovers_known_parameters():
    """Reported FCFS rows simulated with known factors: the fit finds them, with residuals near
    zero and confidence intervals that hold the estimate."""
    pool = _pool()
    truth = {"compute": 4.0, "memory": 2.5, "frontend_s": 0.02}
    true_model = BASE.scaled(*truth.values())
    rates = [1.0, 4.0, 8.0, 11.0, 14.0]
    traces = {r: _trace(pool, r, 300, 3) for r in rates}
    overload = _trace(pool, 60.0, 400, 1)
    saturation = _fcfs(overload, true_model)["throughput_rps"]
    reported = pd.DataFrame([{"rate": r, "policy": p, **{m: _fcfs(traces[r], true_model)[m] * (1 if p == "fcfs" else 0.5)
                                                         for m in BASELINE_METRICS}}
                             for r in rates for p in ("fcfs", "sjf")])
    assert _fcfs(overload, BASE)["throughput_rps"] > 1.5 * saturation  # the start is far off
    model, record = calibrate(Arena(BASE, ENGINE, KAPPA), baseline=baseline_rows(reported), traces=traces,
                              overload_trace=overload, saturation_rps=saturation)
    for name, value in truth.items():
        assert record[name] == pytest.approx(value, rel=0.1), name
        lo, hi = record["uncertainty"][name]["ci95"]
        assert lo <= record[name] <= hi and record["uncertainty"][name]["se"] > 0
    assert max(abs(r["error_pct"]) for r in record["residuals"]) < 5
    assert len(record["residuals"]) == len(rates) * len(BASELINE_METRICS)
    assert record["achieved"]["saturation_rps"] == pytest.approx(saturation, rel=0.02)
    assert model.meta["calibration"] is record and model.frontend_s == record["frontend_s"]
    for name, value in BASE.coefficients.items():
        factor = record["compute"] if name in COMPUTE_TERMS else record["memory"]
        assert model.coefficients[name] == pytest.approx(factor * value, rel=1e-12)


def test_implied_saturation_finds_the_engine_each_overloaded_row_needs():
    """Two overloaded rows, each simulated by an engine of its own speed (compute costs x1.0
    and x0.8 of the fit's): each row alone gives back its engine's speed and that engine's
    saturation, so a reader sees that no single engine matches both."""
    pool = _pool()
    model = BASE.scaled(4.0, 2.5, 0.02)
    traces = {r: _trace(pool, r, 300, 3) for r in (20.0, 25.0)}
    overload = _trace(pool, 60.0, 400, 1)
    speeds = {20.0: 1.0, 25.0: 0.8}
    rows = pd.DataFrame({"p50_e2el_ms": [_fcfs(traces[r], model.scaled(k))["p50_e2el_ms"] for r, k in speeds.items()]},
                        index=pd.Index(list(speeds), name="rate"))
    out = implied_saturation(Arena(BASE, ENGINE, KAPPA), model, rows, traces, overload)
    assert [o["rate"] for o in out] == [20.0, 25.0]
    for o in out:
        assert o["compute_scale"] == pytest.approx(speeds[o["rate"]], rel=0.02)
        assert o["saturation_rps"] == pytest.approx(_fcfs(overload, model.scaled(speeds[o["rate"]]))["throughput_rps"], rel=0.02)
    assert out[1]["saturation_rps"] > out[0]["saturation_rps"]
    far = rows.assign(p50_e2el_ms=rows["p50_e2el_ms"] * 1e4)  # no engine within 4x of the fit: no row
    assert implied_saturation(Arena(BASE, ENGINE, KAPPA), model, far, traces, overload) == []


def test_calibration_reads_no_treatment_column():
    """Only FCFS rows and the fitted metrics reach a fit: changing every treatment number (SJF,
    HRRN, any extra column) leaves the fit's input unchanged."""
    from schedlab.asr.report import reported_asr_table1

    table = reported_asr_table1()
    rows = baseline_rows(table)
    assert list(rows.columns) == list(BASELINE_METRICS) and list(rows.index) == [1, 5, 10, 15, 20, 25]
    assert rows.loc[25, "p50_e2el_ms"] == 5423.8
    scrambled = table.assign(sjf_gain_pct=-73.0)
    treated = scrambled["policy"] != "fcfs"
    scrambled.loc[treated, list(BASELINE_METRICS)] = np.nan
    pd.testing.assert_frame_equal(baseline_rows(scrambled), rows)
    with pytest.raises(SchedlabError, match="no FCFS rows"):
        baseline_rows(table[treated])


def test_interval_residual_is_zero_inside_and_the_log_distance_outside():
    from schedlab.fit.calibrate import interval_residual

    assert interval_residual(80.0, 60.0, 100.0) == 0.0
    assert interval_residual(60.0, 60.0, 100.0) == 0.0
    assert interval_residual(30.0, 60.0, 100.0) == pytest.approx(np.log(0.5))
    assert interval_residual(200.0, 60.0, 100.0) == pytest.approx(np.log(2.0))


@pytest.mark.slow
def test_the_step_time_target_is_fcfs_on_the_overloaded_trace():
    """The step-time target enters the fit as FCFS's mean step on the overloaded trace (no
    treatment's number), recorded with its residual; a model whose step falls inside the
    interval pays nothing for it, and the fit's other parameters then match the plain fit's."""
    pool = _pool()
    truth = BASE.scaled(4.0, 2.5, 0.02)
    rates = [1.0, 8.0, 14.0]
    traces = {r: _trace(pool, r, 200, 3) for r in rates}
    overload = _trace(pool, 60.0, 300, 1)
    over = _fcfs(overload, truth)
    reported = pd.DataFrame([{"rate": r, "policy": "fcfs", **{m: _fcfs(traces[r], truth)[m] for m in BASELINE_METRICS}}
                             for r in rates])
    step = over["mean_step_ms"]
    fits = {}
    for label, interval in (("plain", None), ("inside", (0.5 * step, 2 * step)), ("outside", (3 * step, 4 * step))):
        fits[label] = calibrate(Arena(BASE, ENGINE, KAPPA), baseline=baseline_rows(reported), traces=traces,
                                overload_trace=overload, saturation_rps=over["throughput_rps"], step_ms=interval)[1]
    (target,) = [r for r in fits["inside"]["other_residuals"] if r["metric"] == "mean_step_ms_at_overload"]
    assert target["residual_log"] == 0.0 and target["ours"] == pytest.approx(step, rel=0.05)
    assert fits["inside"]["targets"]["step_ms_at_load"] == [0.5 * step, 2 * step]
    assert fits["inside"]["compute"] == pytest.approx(fits["plain"]["compute"], rel=0.02)
    assert not any(r["metric"] == "mean_step_ms_at_overload" for r in fits["plain"]["other_residuals"])
    # A target the engine cannot meet pulls the fit off the FCFS cells: its cost rises.
    assert fits["outside"]["cost"] > 10 * fits["inside"]["cost"]


@pytest.mark.slow
def test_the_fit_matches_the_median_over_seeds_not_one_draw():
    """Reported FCFS rows that are the median over three trace seeds of a known engine: the fit
    on all three seeds recovers the engine, and its record names the seeds' statistic; the fit
    on one seed alone is another engine."""
    from schedlab.fit.calibrate import simulate_baseline

    pool = _pool()
    truth = BASE.scaled(4.0, 2.5, 0.02)
    rates, seeds = [1.0, 13.0], [0, 1, 2]
    traces = {r: [_trace(pool, r, 120, s) for s in seeds] for r in rates}
    overload = [_trace(pool, 60.0, 200, s) for s in seeds]
    arena = Arena(BASE, ENGINE, KAPPA)
    rows, saturation, _ = simulate_baseline(arena, truth, traces, overload)
    per_seed = [simulate_baseline(arena, truth, {r: t[k] for r, t in traces.items()}, overload[k])[0] for k in range(3)]
    assert rows.loc[13.0, "p90_e2el_ms"] == pytest.approx(np.median([p.loc[13.0, "p90_e2el_ms"] for p in per_seed]))
    reported = rows.reset_index().assign(policy="fcfs")
    _, record = calibrate(arena, baseline=baseline_rows(reported), traces=traces, overload_trace=overload,
                          saturation_rps=saturation)
    assert record["seeds"] == 3 and record["seed_statistic"] == "median"
    for name, value in {"compute": 4.0, "memory": 2.5, "frontend_s": 0.02}.items():
        assert record[name] == pytest.approx(value, rel=0.1), name
    _, one = calibrate(arena, baseline=baseline_rows(reported), traces={r: t[:1] for r, t in traces.items()},
                       overload_trace=overload[:1], saturation_rps=saturation)
    assert one["seeds"] == 1 and one["cost"] > 10 * record["cost"]


@pytest.mark.slow
def test_the_front_end_station_is_fitted_when_asked_and_recovers_a_known_service_time():
    """Reported FCFS rows simulated with a 30 ms API process in front of the scheduler: the fit
    with the station finds it (within its 95 % interval), from the best of its starts."""
    pool = _pool()
    truth = BASE.scaled(4.0, 2.5, 0.01, 0.03)
    assert truth.frontend_service_s == 0.03
    rates = [1.0, 8.0, 14.0, 20.0]
    traces = {r: _trace(pool, r, 300, 3) for r in rates}
    overload = _trace(pool, 60.0, 300, 1)
    reported = pd.DataFrame([{"rate": r, "policy": "fcfs", **{m: _fcfs(traces[r], truth)[m] for m in BASELINE_METRICS}}
                             for r in rates])
    model, record = calibrate(Arena(BASE, ENGINE, KAPPA), baseline=baseline_rows(reported), traces=traces,
                              overload_trace=overload, saturation_rps=_fcfs(overload, truth)["throughput_rps"],
                              station=True)
    assert record["frontend_service_s"] == pytest.approx(0.03, rel=0.15)
    lo, hi = record["uncertainty"]["frontend_service_s"]["ci95"]
    assert lo <= 0.03 <= hi
    assert model.frontend_service_s == record["frontend_service_s"]
    assert record["cost"] == min(s["cost"] for s in record["station_starts"])
    assert max(abs(r["error_pct"]) for r in record["residuals"]) < 5


@pytest.mark.slow
def test_a_measured_station_is_held_fixed_and_the_other_factors_are_recovered_around_it():
    """The same 30 ms API process, now given as measured: the fit keeps its service time
    exactly, does not list it among its estimates, and finds the three factors that made the
    rows."""
    pool = _pool()
    truth = BASE.scaled(4.0, 2.5, 0.01, 0.03)
    rates = [1.0, 8.0, 14.0, 20.0]
    traces = {r: _trace(pool, r, 300, 3) for r in rates}
    overload = _trace(pool, 60.0, 300, 1)
    reported = pd.DataFrame([{"rate": r, "policy": "fcfs", **{m: _fcfs(traces[r], truth)[m] for m in BASELINE_METRICS}}
                             for r in rates])
    kwargs = dict(baseline=baseline_rows(reported), traces=traces, overload_trace=overload,
                  saturation_rps=_fcfs(overload, truth)["throughput_rps"])
    model, record = calibrate(Arena(BASE, ENGINE, KAPPA), station_service_s=0.03, **kwargs)
    assert model.frontend_service_s == record["frontend_service_s"] == 0.03 and record["station_measured"]
    assert set(record["uncertainty"]) == {"compute", "memory", "frontend_s"}
    for name, value in {"compute": 4.0, "memory": 2.5, "frontend_s": 0.01}.items():
        assert record[name] == pytest.approx(value, rel=0.1), name
    assert max(abs(r["error_pct"]) for r in record["residuals"]) < 5
    with pytest.raises(SchedlabError, match="either fitted or measured"):
        calibrate(Arena(BASE, ENGINE, KAPPA), station=True, station_service_s=0.03, **kwargs)
