"""The notebooks' shared tables: the simulators' fidelity against a real engine (the
paper-vs-ours counting: tests/test_counting.py)."""

import numpy as np
import pandas as pd
import pytest



def _engine_summary():
    """Two rates, one policy: the engine (three repeats each, one of rate 2's interfered) and the
    simulators with the profile's fit (50% slow) and with the engine's own steps (5% fast)."""
    rows = []
    key = {"workload": "w", "model": "m", "policy": "fcfs", "seed": 0}
    for rate in (1.0, 2.0):
        for rep, (e2el, share) in enumerate([(100.0, 0.01), (110.0, 0.02), (900.0, 0.5 if rate == 2 else 0.0)]):
            rows.append({**key, "rate": rate, "backend": "vllm", "repeat": rep, "foreign_cpu_share": share,
                         "p50_ttft_ms": 10.0, "p90_ttft_ms": 20.0, "p50_e2el_ms": e2el, "p90_e2el_ms": 2 * e2el,
                         "throughput_rps": rate})
        median = 110.0 if rate == 1 else 105.0
        for backend in ("sim", "vllm-sim"):
            for fit, factor in (("profile", 1.5), ("own steps, rate held out", 0.95)):
                rows.append({**key, "rate": rate, "backend": backend, "steptime_fit": fit, "p50_ttft_ms": 10.0,
                             "p90_ttft_ms": 20.0, "p50_e2el_ms": factor * median, "p90_e2el_ms": factor * 2 * median,
                             "throughput_rps": rate})
    return pd.DataFrame(rows)


def test_engine_fidelity_is_read_per_fit_without_interfered_runs():
    from schedlab.fidelity import engine_view, fidelity_reading, fit_comparison, fit_errors, interference_note

    summary = _engine_summary()
    view, spread, bad, clean = engine_view(summary)
    assert len(bad) == 1 and len(clean) == 5 and bad["rate"].tolist() == [2.0]
    assert spread.loc[("w", "m", "fcfs", 2.0, 0), ("p50_e2el_ms", "max")] == 900.0  # every repeat in the spread
    errs = fit_errors(view)
    assert len(errs) == 2 * 2 * 2  # fits x candidates x rates
    own = errs[errs["fit"] == "own steps, rate held out"]
    np.testing.assert_allclose(own["p50_e2el_ms"], -5.0)
    np.testing.assert_allclose(errs[errs["fit"] == "profile"]["p50_e2el_ms"], 50.0)
    text = fidelity_reading(own, saturation=2.0, label="Decoder engine")
    assert "largest |error| is 5.0% on P50 E2EL" in text and "sim is faster than the engine" in text
    assert "above the engine's in 0% " in text
    assert "outside the 10% target" in fidelity_reading(errs[errs["fit"] == "profile"], 2.0, "x")
    # A miss is set beside the engine's clean repeats there: rate 1's three (100, 110, 900 ms)
    # at 1 req/s (80% of saturation 2 is 1.6); rate 2's interfered repeat is not among them.
    missed = fidelity_reading(errs[errs["fit"] == "profile"], 2.0, "x", repeats=clean)
    assert "+50.0% on median E2E latency at 1 req/s under fcfs" in missed
    assert "3 clean repeats there, which span 727% of their median (100 to 900)" in missed
    assert "clean repeats" not in fidelity_reading(own, 2.0, "x", repeats=clean)  # within target: no span
    compared = fit_comparison(errs, "Decoder engine")
    assert "5.0% on P50 E2EL" in compared and "against 50.0%" in compared and ": closer to the engine" in compared
    note = interference_note(summary[summary["backend"] == "vllm"], "Decoder engine")
    assert "1 of 6 engine runs" in note and "left out" in note
    everything = summary.assign(foreign_cpu_share=0.9)
    v, _, b, _ = engine_view(everything)
    assert "not a result" in interference_note(everything[everything["backend"] == "vllm"], "x")
    assert fidelity_reading(fit_errors(v), 2.0, "x") == "x: no clean engine run to compare with."


def test_replays_whose_front_end_lagged_are_left_out_of_the_comparison():
    """A replay that spent most of its time outside the engine's scheduler measures the served
    system's front end: out of the medians like an interfered one, in the spread, with its reason."""
    from schedlab.fidelity import engine_view, fit_errors

    summary = _engine_summary().assign(outside_engine_share=0.08)
    engine = summary["backend"] == "vllm"
    summary.loc[engine & (summary["rate"] == 1.0) & (summary["repeat"] == 2), "outside_engine_share"] = 0.6
    view, spread, bad, _ = engine_view(summary)
    assert sorted(zip(bad["rate"], bad["left_out"])) == [(1.0, "front end lagged"), (2.0, "interference")]
    assert spread.loc[("w", "m", "fcfs", 1.0, 0), ("p50_e2el_ms", "max")] == 900.0
    own = fit_errors(view).query("fit == 'own steps, rate held out'")
    np.testing.assert_allclose(own["p50_e2el_ms"], [0.95 * 110 / 105 * 100 - 100, -5.0] * 2)  # rate 1: 100, 110


def test_a_replay_whose_client_fell_behind_is_left_out_and_interference_names_first():
    """A replay whose client sent a request more than 100 ms late did not offer the trace's
    arrivals: left out as "client late"; of several flaws the comparison names interference,
    then the front end, then the client."""
    from schedlab.backends.served.quality import replay_flaws
    from schedlab.fidelity import engine_view

    summary = _engine_summary().assign(outside_engine_share=0.05, send_lag_max_ms=4.0)
    engine = summary["backend"] == "vllm"
    summary.loc[engine & (summary["rate"] == 1.0) & (summary["repeat"] == 0), "send_lag_max_ms"] = 250.0
    _, _, bad, _ = engine_view(summary)
    assert sorted(zip(bad["rate"], bad["repeat"], bad["left_out"])) == [(1.0, 0, "client late"), (2.0, 2, "interference")]
    runs = pd.DataFrame({"foreign_cpu_share": [0.5, 0.0, 0.0, 0.0, 0.0], "outside_engine_share": [0.9, 0.9, 0.1, 0.1, 0.1],
                         "send_lag_max_ms": [900.0, 900.0, 900.0, 100.0, float("nan")]})
    assert replay_flaws(runs).tolist() == ["interference", "front end lagged", "client late", "", ""]
    assert replay_flaws(runs, client_lag_ms=50.0).tolist()[3] == "client late"
    assert (replay_flaws(pd.DataFrame({"rate": [1.0]})) == "").all()  # nothing recorded: nothing flawed


def test_the_replayed_note_counts_attempts_set_aside_and_why():
    from schedlab.fidelity import replayed_note

    runs = pd.DataFrame({"policy": ["fcfs", "fcfs", "sjf", "sjf"], "rate": [5.0, 15.0, 15.0, 15.0],
                         "attempts": [1, 3, 2, 1],
                         "replayed_for": ["", "front end lagged; client late", "front end lagged", ""]})
    note = replayed_note(runs, "Decoder engine")
    assert note == ("Decoder engine: 2 of 4 replays were run again (fcfs at 15 req/s, sjf at 15 req/s); the 3 "
                    "attempts set aside: 2 front end lagged, 1 client late.")
    assert "first attempt" in replayed_note(runs.assign(attempts=1, replayed_for=""), "x")
    assert "do not record" in replayed_note(runs.drop(columns="attempts"), "x")
    # Summaries that counted attempts before they kept the reasons.
    assert replayed_note(runs.drop(columns="replayed_for"), "x").endswith("the 3 attempts set aside: reasons not recorded.")


def test_the_front_end_note_names_where_requests_waited_outside_the_engine():
    from schedlab.fidelity import front_end_note

    runs = pd.DataFrame({"policy": ["fcfs"] * 4 + ["sjf"] * 2, "rate": [5.0, 5.0, 25.0, 25.0, 25.0, 25.0],
                         "outside_engine_share": [0.1, 0.2, 0.5, 0.9, 0.05, 0.07]})
    note = front_end_note(runs, "Decoder engine")
    assert "5% to 90% of their time" in note and "(median 15%; most at 25 req/s under fcfs)" in note
    assert "In 2 of 6 replays (fcfs at 25 req/s) it was above 25%" in note and "left out" in note
    assert "at most 25% everywhere" in front_end_note(runs[runs["rate"] == 5.0], "x")
    assert "do not record" in front_end_note(runs.drop(columns="outside_engine_share"), "x")
    assert "the client sent" not in note  # runs from before the client recorded its timing
    timed = runs.assign(send_lag_max_ms=[1, 2, 3, 40, 1, 1], response_p50_ms=[9, 10, 12, 30, 8, 11],
                        response_max_ms=[20, 20, 25, 3100, 20, 30])
    note = front_end_note(timed, "Decoder engine")
    assert ("the client sent each request at most 40 ms after its arrival, and the server began its answer at most "
            "3100 ms after it was sent (median 21 ms; 10 ms in the other replays)") in note
    assert "way in" not in note  # no scheduler times recorded
    both = timed.assign(front_in_p50_ms=[20, 22, 900, 1500, 21, 19], front_in_max_ms=[30, 30, 2500, 4000, 30, 30],
                        way_out_p50_ms=[5, 5, 6, 7, 5, 5], way_out_max_ms=[9, 9, 12, 14, 9, 9])
    assert ("way in to the scheduler took up to 4000 ms (median 1200 ms; 20 ms in the other replays), their way out "
            "from its last token up to 14 ms (median 6 ms; 5 ms)") in front_end_note(both, "x")


def test_seed_changes_are_each_seeds_own_change_vs_fcfs():
    """Two seeds: SJF's change is taken against FCFS on the same seed and rate, never another."""
    from schedlab.asr.report import seed_changes

    runs = [{"bound": f"seed {k}", "rate": r, "policy": p, "p50_e2el_ms": v, "p90_e2el_ms": 2 * v}
            for k, r, p, v in [(0, 20.0, "fcfs", 100.0), (0, 20.0, "sjf", 50.0), (1, 20.0, "fcfs", 200.0),
                               (1, 20.0, "sjf", 150.0), (0, 25.0, "fcfs", 400.0), (0, 25.0, "sjf", 100.0),
                               (1, 25.0, "fcfs", 400.0), (1, 25.0, "sjf", 300.0)]]
    out = seed_changes(runs)
    assert out.loc[(20.0, "sjf"), "p50_e2el_ms"].tolist() == [-50.0, -25.0]
    assert out.loc[(25.0, "sjf"), "p90_e2el_ms"].tolist() == [-75.0, -25.0]
    assert out.index.names == ["rate", "policy", "seed"] and set(out.index.get_level_values("policy")) == {"sjf"}


def test_the_fidelity_table_sets_each_error_beside_the_engines_clean_repeats():
    """The results page's fidelity rows: sim's error per fit, the clean repeats' median, range
    and count (rate 2's interfered repeat is not among them), and where the 10% target applies."""
    from schedlab.fidelity import fidelity_table

    t = fidelity_table(_engine_summary()).set_index(["fit", "rate"])
    assert len(t) == 4 and set(t["policy"]) == {"fcfs"}
    own = t.loc["own steps, rate held out"]
    np.testing.assert_allclose(own["p50_e2el_ms_error_pct"], -5.0)
    assert own.loc[1.0, ["p50_e2el_ms_engine", "p50_e2el_ms_min", "p50_e2el_ms_max", "repeats"]].tolist() == [110, 100, 900, 3]
    assert own.loc[2.0, ["p50_e2el_ms_engine", "p50_e2el_ms_max", "repeats"]].tolist() == [105, 110, 2]
    assert own["below_80"].to_dict() == {1.0: True, 2.0: False}  # 80% of the highest throughput, 2 req/s
    np.testing.assert_allclose(t.loc["profile", "p50_e2el_ms_error_pct"], 50.0)
    assert fidelity_table(_engine_summary().assign(foreign_cpu_share=0.9)).empty  # no clean run
