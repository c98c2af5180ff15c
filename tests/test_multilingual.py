"""Multilingual ASR mix and per-language vs global kappa (paper A's endpoint-kappa extension)."""

import math

import numpy as np
import pandas as pd
import pytest

from schedlab.data import fleurs
from schedlab.data.whisper_tokens import PROMPT_TOKENS, count_text_tokens
from schedlab.errors import SchedlabError
from schedlab.estimate import job_sizes
from schedlab.fit.kappa import fit_kappa
from schedlab.extensions.language_kappa import (
    estimate_quality,
    estimator_kappas,
    kappa_for,
    kappa_study,
    language_pools,
    mix,
)
from schedlab.metrics import latency_columns
from schedlab.engine import Arena, engine_config
from schedlab.simulate import run_summary
from schedlab.engine.steptime import StepTimeModel
from schedlab.workload.asr import WHISPER_MAX_POSITIONS
from schedlab.workload.multilingual import fleurs_tables, mix_trace, stand_in_pool

STEP = StepTimeModel(intercept=0.0012, n_encoder=0.045, n_prefill_tokens=0.0013, n_decode=0.00015, ctx_tokens=1e-7)
ENGINE = engine_config("A100-40GB", "whisper-large-v3", max_num_batched_tokens=2048)
SHARES = {"en": 0.5, "hi": 0.5}
#: Columns that time the host, not the simulation.
CLOCKS = ["wall_s", "sched_overhead_us_per_req"]


@pytest.fixture(scope="module")
def utts():
    """English-like utterances: right-skewed durations, about 3 text tokens per second."""
    rng = np.random.default_rng(7)
    dur = np.clip(rng.lognormal(1.8, 0.6, 600), 1.3, 35.0)
    tokens = np.maximum(1, np.round(3 * dur * rng.lognormal(0, 0.15, dur.size))).astype(int)
    return pd.DataFrame({"duration_s": dur, "text_tokens": tokens})


def _kappa(pool):
    return fit_kappa(pool["audio_duration_s"], pool["text_tokens"])["kappa"]


@pytest.mark.parametrize("ratio", [1.5, 3.0])
def test_stand_in_pool_fit_recovers_the_ratio(utts, ratio):
    english, other = stand_in_pool(utts, 1.0), stand_in_pool(utts, ratio)
    assert _kappa(other) / _kappa(english) == pytest.approx(ratio, rel=0.01)
    np.testing.assert_array_equal(other["audio_duration_s"], utts["duration_s"])
    np.testing.assert_array_equal(other["output_tokens"], other["text_tokens"] + 1)
    # The per-utterance spread is kept: tokens per second scale utterance by utterance.
    rounding = 0.5 / english["text_tokens"].min() + 1e-12
    np.testing.assert_allclose(other["text_tokens"] / english["text_tokens"], ratio, atol=rounding)


def test_each_request_is_sized_with_its_languages_kappa():
    trace = pd.DataFrame({
        "language": ["en", "hi", "es", "hi"],
        "audio_duration_s": [10.0, 10.0, 10.0, 2.5],
        "output_tokens": [400, 400, 400, 400],
    })
    per_language = kappa_for(["en", "hi", "es"], {"en": 3.0, "hi": 7.5}, default=4.2)
    assert per_language == {"en": 3.0, "hi": 7.5, "es": 4.2}
    np.testing.assert_array_equal(job_sizes(trace, per_language), [30, 75, 42, 18])
    one = kappa_for(["en", "hi", "es"], {}, default=3.0)
    np.testing.assert_array_equal(job_sizes(trace, one), [30, 30, 30, 7])


def test_mix_trace_draws_languages_by_share_and_keeps_draws_across_ratios(utts):
    shares = {"en": 0.7, "hi": 0.2, "ar": 0.1}
    traces = [mix(language_pools(utts, shares, r)[0], shares, 40.0, seed=3, duration_s=60.0) for r in (1.0, 20.0)]
    low, high = traces
    for col in ("request_id", "arrival_s", "language", "audio_duration_s", "prompt_tokens"):
        np.testing.assert_array_equal(low[col], high[col])
    np.testing.assert_array_equal(low["request_id"], np.arange(len(low)))
    assert np.all(np.diff(low["arrival_s"]) >= 0)
    frac = low["language"].value_counts(normalize=True)
    assert frac["en"] == pytest.approx(0.7, abs=0.05) and frac["ar"] == pytest.approx(0.1, abs=0.03)
    assert set(low["audio_duration_s"]) <= set(utts["duration_s"])
    # Ratio 20 pushes long clips past Whisper's decoder: output is capped as asr_trace caps it.
    cap = WHISPER_MAX_POSITIONS - PROMPT_TOKENS
    assert high["output_tokens"].max() == cap and (low["output_tokens"] < cap).all()
    english = (low["language"] == "en").to_numpy()
    np.testing.assert_array_equal(low["output_tokens"][english], high["output_tokens"][english])


def test_ratio_one_gives_identical_schedules(utts):
    """The case where per-language kappa cannot help: every language has English's rate."""
    pools, source = language_pools(utts, SHARES, 1.0)
    kappas = estimator_kappas(pools)
    assert source == "stand-in" and kappas["per-language"] == kappas["global"]
    trace = mix(pools, SHARES, 25.0, seed=0, duration_s=20.0)
    for policy in ("sjf", "hrrn"):
        a = run_summary(trace, policy, Arena(STEP, ENGINE, kappas["per-language"]), identity={})[0].requests
        b = run_summary(trace, policy, Arena(STEP, ENGINE, kappas["global"]), identity={})[0].requests
        pd.testing.assert_frame_equal(a, b)


def test_large_ratio_per_language_kappa_ranks_better_and_cuts_sjf_median(utts):
    q = estimate_quality(utts, ratios=(1.0, 3.0), shares=SHARES, n_requests=2000)
    q = q.set_index(["ratio", "estimate", "group"])
    rho = q["spearman"]
    assert rho[1.0, "per-language", "all"] == rho[1.0, "global", "all"]
    assert rho[3.0, "per-language", "all"] > rho[3.0, "global", "all"] + 0.1
    # Within one language any kappa ranks alike; the global one underestimates the other language.
    assert rho[3.0, "per-language", "en"] == rho[3.0, "global", "en"]
    assert q.loc[(3.0, "global", "non_en"), "median_rel_error"] < -0.5
    assert abs(q.loc[(3.0, "per-language", "non_en"), "median_rel_error"]) < 0.15

    pools, _ = language_pools(utts, SHARES, 3.0)
    kappas = estimator_kappas(pools)
    trace = mix(pools, SHARES, 25.0, seed=0, duration_s=30.0)  # past saturation (~17 req/s)
    p50 = {
        est: run_summary(trace, "sjf", Arena(STEP, ENGINE, kappas[est]), identity={})[1]["p50_e2el_ms"]
        for est in ("per-language", "global")
    }
    assert p50["per-language"] < 0.9 * p50["global"]


def test_study_rows_share_arrivals_and_are_deterministic(utts):
    kw = dict(ratios=(1.0, 3.0), shares=SHARES, rates=(8.0, 25.0), duration_s=8.0)
    df = kappa_study(utts, Arena(STEP, ENGINE), **kw)
    assert len(df) == 2 * 2 * 3 * 2
    assert set(df["source"]) == {"stand-in"} and set(df["estimate"]) == {"per-language", "global"}
    # One trace per rate: same arrivals and language split for every ratio, estimate and policy.
    per_rate = df.groupby("rate")[["arrived", "n_en", "n_non_en"]].nunique()
    assert (per_rate == 1).all().all()
    assert (df["n_en"] + df["n_non_en"] == df["arrived"]).all()
    glob = df[df["estimate"] == "global"]
    assert (glob["kappa_hi"] == glob["kappa_en"]).all() and (glob["kappa_en"] == glob["kappa_global"]).all()
    per = df[(df["estimate"] == "per-language") & (df["ratio"] == 3.0)]
    assert (per["kappa_hi"] / per["kappa_en"]).to_numpy() == pytest.approx(3.0, rel=0.01)
    # FCFS ignores sizes, so both estimates give it the same run.
    fcfs = df[df["policy"] == "fcfs"].drop(columns=CLOCKS + ["kappa_hi"]).set_index(["ratio", "rate", "estimate"])
    pd.testing.assert_frame_equal(
        fcfs.xs("per-language", level="estimate").drop(columns=["kappa_en"]),
        fcfs.xs("global", level="estimate").drop(columns=["kappa_en"]),
    )
    again = kappa_study(utts, Arena(STEP, ENGINE), **kw)
    pd.testing.assert_frame_equal(df.drop(columns=CLOCKS), again.drop(columns=CLOCKS))


def test_per_request_arrivals_are_identical_across_estimates_and_policies(utts):
    pools, _ = language_pools(utts, SHARES, 2.0)
    kappas = estimator_kappas(pools)
    trace = mix(pools, SHARES, 20.0, seed=1, duration_s=5.0)
    runs = [
        run_summary(trace, policy, Arena(STEP, ENGINE, kappas[est]), identity={})[0].requests
        for est in ("per-language", "global")
        for policy in ("fcfs", "sjf", "hrrn")
    ]
    for r in runs[1:]:
        np.testing.assert_array_equal(r["arrival_s"], runs[0]["arrival_s"])
        np.testing.assert_array_equal(r["output_tokens"], runs[0]["output_tokens"])
        assert latency_columns(r)["e2el_ms"].notna().all()


#: FLEURS TSV rows (id, file, raw transcript, transcript, words, samples, gender).
FLEURS_HI = [
    ("1", "a.wav", "नमस्ते दुनिया", "x", "x", "48000", "MALE"),
    ("2", "b.wav", "यह एक परीक्षण वाक्य है", "x", "x", "96000", "FEMALE"),
    ("3", "c.wav", "आज मौसम अच्छा है और हम बाहर जा रहे हैं", "x", "x", "160000", "MALE"),
]


def test_real_fleurs_table_is_used_when_available(utts, tmp_path, data_cache, monkeypatch):
    (tmp_path / "fleurs_hi_in_test.tsv").write_text("".join("\t".join(r) + "\n" for r in FLEURS_HI), encoding="utf-8")
    monkeypatch.setenv("SCHEDLAB_DATA_MIRROR", str(tmp_path))
    monkeypatch.setattr(fleurs, "TSV_URL", "http://127.0.0.1:9/{lang}/test.tsv")
    tables = fleurs_tables(["hi", "ar"])
    assert "not available offline" in tables["ar"]
    hi = tables["hi"]
    np.testing.assert_array_equal(hi["text_tokens"], count_text_tokens(hi["transcript"]))

    shares = {"en": 0.6, "hi": 0.4}
    pools, source = language_pools(utts, shares, 2.0, tables)
    assert source == "fleurs"
    np.testing.assert_array_equal(pools["hi"]["audio_duration_s"], [3.0, 6.0, 10.0])
    q = estimate_quality(utts, ratios=(1.0, 2.0), shares=shares, tables=tables, n_requests=200)
    assert len(q) == 2 * 3 and q["ratio"].isna().all() and set(q["source"]) == {"fleurs"}
    kappa_hi = fit_kappa([3.0, 6.0, 10.0], hi["text_tokens"])["kappa"]
    assert estimator_kappas(pools)["per-language"]["hi"] == pytest.approx(kappa_hi)
    # A language FLEURS could not give is a stand-in, and the rows say so.
    assert language_pools(utts, {"en": 0.5, "ar": 0.5}, 2.0, tables)[1] == "stand-in"


def test_bad_input_is_one_line_errors(utts):
    pools, _ = language_pools(utts, SHARES, 2.0)
    arrivals, rng = np.arange(10.0), np.random.default_rng(0)
    cases = [
        (lambda: mix_trace(pools, {"en": 0.5, "hi": 0.4}, arrivals, rng=rng), "sum to 1"),
        (lambda: kappa_study(utts, Arena(STEP, ENGINE), shares={"en": 1.2, "hi": -0.2}, rates=(1.0,)), "non-negative"),
        (lambda: mix_trace(pools, {"en": 0.5, "fr": 0.5}, arrivals, rng=rng), "no request pool for language"),
        (lambda: kappa_for(["en", "hi"], {"en": 3.0}), "no kappa for language 'hi' and no default"),
    ]
    for bad in (0.0, -1.0, math.nan):
        cases.append((lambda bad=bad: stand_in_pool(utts, bad), "ratio must be positive"))
        cases.append((lambda bad=bad: estimate_quality(utts, ratios=(2.0, bad)), "ratio must be positive"))
    for call, match in cases:
        with pytest.raises(SchedlabError, match=match) as info:
            call()
        assert "\n" not in str(info.value)
