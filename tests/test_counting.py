"""The counting of a paper's numbers against ours (schedlab.counting): roles, the seed band, the
two judgements, and each paper's rule for which rows are fitted, derived or predicted."""

import numpy as np
import pandas as pd
import pytest

from schedlab.counting import count_line, counts, derived_rows, paper_vs_ours, seed_band, unchanged_on_every_seed

BAND = {"low": 90.0, "high": 130.0, "seeds": 10}


def _toy():
    return [
        {"quantity": "a", "unit": "ms", "paper": 100.0, "ours": 110.0, "role": "fitted", "group": "g1"},
        {"quantity": "b", "unit": "ms", "paper": 200.0, "ours": 140.0, "role": "predicted", "group": "g1",
         "low": 120.0, "high": 210.0, "seeds": 10},
        {"quantity": "c", "unit": "ms", "paper": 100.0, "ours": 114.0, "role": "predicted", "group": "g1", **BAND},
        # a change 5 points off whose paper value our seeds cannot reach: a miss
        {"quantity": "d", "unit": "% vs FCFS", "paper": -73.0, "ours": -78.0, "role": "predicted", "group": "g2",
         "low": -82.0, "high": -75.0, "seeds": 10},
        # a change 30 points off that one run's arrivals can explain: a match
        {"quantity": "e", "unit": "% vs FCFS", "paper": 40.0, "ours": 10.0, "role": "predicted", "group": "g2",
         "low": -20.0, "high": 60.0, "seeds": 10},
        # a change on two seeds: no band, not judged
        {"quantity": "f", "unit": "% vs FCFS", "paper": 40.0, "ours": 41.0, "role": "predicted", "group": "g2",
         "low": 39.0, "high": 42.0, "seeds": 2},
        {"quantity": "g", "unit": "ms", "paper": 80.6, "ours": 80.6, "role": "derived", "reason": "no queue", "group": "g1"},
        {"quantity": "h", "unit": "ms", "paper": 0.48, "ours": 0.9, "role": "bound", "bound": "<= 1", "group": "g4"},
        {"quantity": "i", "unit": "%", "paper": 99.0, "ours": 97.5, "role": "bound", "bound": ">= 99", "group": "g4"},
        {"quantity": "j", "unit": "ms", "paper": 5.7, "ours": 0.3, "role": "not identified", "group": "g5"},
    ]


def test_each_kind_is_judged_by_its_own_rule():
    t = paper_vs_ours(_toy(), why={"g1": "too slow", "g2": "order", "g4": "slower", "g5": "collinear"}).set_index("quantity")
    assert list(t["kind"]) == ["absolute"] * 3 + ["change"] * 3 + ["absolute"] * 4
    assert t["error"].to_dict() == pytest.approx({"a": 10.0, "b": -30.0, "c": 14.0, "d": -5.0, "e": -30.0, "f": 1.0,
                                                  "g": 0.0, "h": 87.5, "i": -1.5, "j": -94.7368}, rel=1e-4)
    # absolute numbers: within 15 % of our median; the paper's value in our band is apart
    assert list(t["within"]) == ["yes", "no", "yes", "", "", "", "yes", "yes", "no", "no"]
    assert list(t["in_band"]) == ["", "yes", "yes", "no", "yes", "", "", "", "", ""]
    # changes by the band alone (d is 5 points off yet a miss, e 30 off yet a match); bounds
    # by the bound; not identified rows and a change on too few seeds are not judged
    assert list(t["match"]) == ["yes", "no", "yes", "no", "yes", "", "yes", "yes", "no", ""]
    assert list(t["why"]) == ["", "too slow", "", "order", "", "", "", "", "slower", ""]
    assert t.loc["g", "reason"] == "no queue"


def test_counts_keep_every_role_and_kind_apart():
    t = paper_vs_ours(_toy())
    assert counts(t) == {"fitted": (1, 1), "derived": 1, "predicted": (1, 2, 2), "changes": (1, 2, 3), "bound": (1, 2),
                         "not identified": 1}
    assert counts(t.to_dict(orient="records")) == counts(t)  # as the results page reads them
    assert count_line(t) == (
        "predicted: 1 of 2 within 15 % of our median, the paper's value inside our seed band for 2; "
        "changes vs the baseline: the paper's inside our seed band for 1 of 2 judged (1 on too few seeds to judge); "
        "bounds met: 1 of 2; fitted: 1 of 1 within 15 %; derived from the fit: 1; not identified: 1")
    assert list(derived_rows(t)["quantity"]) == ["g"]


def test_bad_rows_are_refused():
    with pytest.raises(ValueError, match="unknown roles"):
        paper_vs_ours([dict(_toy()[0], role="guessed")])
    with pytest.raises(ValueError, match="derived rows need a reason: g"):
        paper_vs_ours([{k: v for k, v in _toy()[6].items() if k != "reason"}])


def test_seed_band_is_the_median_and_the_5_95_percentiles():
    band = seed_band([float(v) for v in range(1, 12)] + [np.nan])
    assert band == {"ours": 6.0, "low": 1.5, "high": 10.5, "seeds": 11}
    empty = seed_band([])
    assert empty["seeds"] == 0 and np.isnan(empty["ours"])


def test_a_treatment_is_unchanged_only_when_equal_on_every_seed():
    base = pd.Series([80.6, 81.0, 79.9], index=[0, 1, 2])
    assert unchanged_on_every_seed(base.copy(), base)
    assert not unchanged_on_every_seed(base.where(base.index != 2, 79.8), base)
    assert not unchanged_on_every_seed(pd.Series(dtype=float), base)


# -- each paper's rule ---------------------------------------------------------------------------
def _asr_runs(rates=(1, 5, 10, 15, 20, 25), seeds=range(10)):
    """Paper A's sweep on the engine (sim) at its rates on a synthetic LibriSpeech-like pool and
    a fixed fast model: FCFS, SJF and HRRN on every seed."""
    from schedlab.engine import Arena, EngineConfig
    from schedlab.engine.steptime import StepTimeModel
    from schedlab.simulate import run_summary
    from schedlab.workload.arrivals import arrival_times
    from schedlab.workload.asr import asr_trace

    rng = np.random.default_rng(7)
    dur = np.clip(rng.lognormal(np.log(6.0), 0.5, 400), 1.0, 30.0)
    pool = pd.DataFrame({"audio_duration_s": dur, "output_tokens": np.maximum(1, np.round(3 * dur))})
    model = StepTimeModel(intercept=2e-3, n_encoder=4e-2, n_prefill_tokens=1e-6, n_decode=4e-4, ctx_tokens=1e-8,
                          frontend_s=0.05)
    arena = Arena(model, EngineConfig(max_num_batched_tokens=2048, encoder_frames=1500, kv_capacity_blocks=1 << 30),
                  {"en": 3.0})
    rows = []
    for seed in seeds:
        for rate in rates:
            arrivals = arrival_times(rate, rng=np.random.default_rng([seed, 0]), n_requests=200)
            trace = asr_trace(pool, arrivals, rng=np.random.default_rng([seed, 1]))
            for policy in ("fcfs", "sjf", "hrrn"):
                s = run_summary(trace, policy, arena, identity={})[1]
                rows.append({"rate": float(rate), "policy": policy, "seed": seed, **s})
    return pd.DataFrame(rows)


@pytest.mark.slow
def test_paper_a_treatments_where_no_queue_forms_are_derived():
    """At 1 req/s a clip never waits behind another, so SJF's and HRRN's rows equal FCFS's on
    every seed: derived. Past this engine's saturation the order acts: predicted, with a band."""
    from schedlab.asr.report import NO_QUEUE, asr_rows

    runs = _asr_runs()
    t = paper_vs_ours(asr_rows(runs)).set_index("quantity")
    assert t.loc["SJF median E2E latency at 1 req/s", "role"] == "derived"
    assert t.loc["SJF median E2E latency at 1 req/s", "reason"] == NO_QUEUE
    assert t.loc["SJF median E2E latency at 1 req/s", "ours"] == t.loc["FCFS median E2E latency at 1 req/s", "ours"]
    assert t.loc["HRRN P90 E2E latency at 25 req/s", "role"] == "predicted"
    assert t.loc["SJF median E2E latency change vs FCFS at 25 req/s", "role"] == "predicted"
    assert set(t.loc[t.index.str.startswith("FCFS"), "role"]) == {"fitted"}
    assert (t["seeds"] == 10).all()
    top = t.loc["SJF median E2E latency change vs FCFS at 25 req/s"]
    assert top["low"] <= top["ours"] <= top["high"] and top["low"] < top["high"]


def test_paper_b_fcfs_completion_and_tokens_are_derived_from_the_fitted_rate():
    from schedlab.ewsjf.report import ewsjf_rows, reported_ewsjf_table3

    rep = reported_ewsjf_table3()
    queues = pd.concat([rep.assign(seed=s) for s in range(3)], ignore_index=True)
    t = paper_vs_ours(ewsjf_rows(queues)).set_index("quantity")
    assert t.loc["fcfs throughput (1 queues)", "role"] == "fitted"
    assert t.loc["fcfs completion time (1 queues)", "role"] == "derived"
    assert "arithmetic" in t.loc["fcfs output tokens/s (1 queues)", "reason"]
    assert t.loc["fcfs output tokens/s (1 queues)", "role"] == "derived"
    assert (t.loc[~t.index.str.startswith("fcfs"), "role"] == "predicted").all()
    assert counts(t.reset_index())["predicted"] == (12, 0, 12)  # three seeds: no band


def test_paper_d_rows_at_the_calibration_point_are_fitted():
    from schedlab.fit.latency_predictor import CALIBRATION_LENGTH, REFERENCE
    from schedlab.slosa.report import slosa_rows

    t = paper_vs_ours(slosa_rows(REFERENCE, 99.4, 0.3)).set_index("quantity")
    for phase in ("prefill", "decode"):
        assert t.loc[f"predicted {phase} time, batch 1, {CALIBRATION_LENGTH} tokens", "role"] == "fitted"
        assert t.loc[f"predicted {phase} time, batch 32, {CALIBRATION_LENGTH} tokens", "role"] == "predicted"
        assert t.loc[f"predicted {phase} time, batch 1, 100 tokens", "role"] == "predicted"
    assert t.loc["SA time per decision at N = 10, full anneal", "match"] == "yes"
    c = counts(t.reset_index())
    assert c["fitted"] == (2, 2) and c["predicted"][2] == 14 and c["bound"] == (2, 2) and c["not identified"] == 8
