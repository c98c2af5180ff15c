"""The paper-vs-ours tables: errors, the tolerance, the count, and paper A's rows."""

import numpy as np
import pytest

from schedlab.report import asr_rows, paper_vs_ours, reported_asr_table1, within_count


def test_paper_vs_ours_computes_errors_on_a_toy_table():
    rows = [
        {"quantity": "a", "unit": "ms", "paper": 100.0, "ours": 110.0, "role": "fitted", "group": "g1"},
        {"quantity": "b", "unit": "ms", "paper": 200.0, "ours": 140.0, "role": "predicted", "group": "g1"},
        {"quantity": "c", "unit": "% vs FCFS", "paper": -73.0, "ours": -60.0, "role": "predicted", "group": "g2"},
        {"quantity": "d", "unit": "% vs FCFS", "paper": 79.0, "ours": -41.0, "role": "predicted", "group": "g2"},
        {"quantity": "e", "unit": "req/s", "paper": 1.15, "ours": np.nan, "role": "fitted", "group": "g3"},
        {"quantity": "f", "unit": "req/s", "paper": 1.0, "ours": 1.15, "role": "fitted", "group": "g3"},
    ]
    t = paper_vs_ours(rows, why={"g1": "too slow", "g2": "starvation", "g3": "no run"}).set_index("quantity")
    assert t["error"].to_dict() == pytest.approx({"a": 10.0, "b": -30.0, "c": 13.0, "d": -120.0, "e": np.nan, "f": 15.0},
                                                 nan_ok=True)
    assert list(t["error unit"]) == ["%", "%", "points", "points", "%", "%"]
    assert list(t["within"]) == ["yes", "no", "yes", "no", "no", "yes"]  # 15 % exactly is within
    assert list(t["why"]) == ["", "too slow", "", "starvation", "no run", ""]
    assert within_count(t) == "3 of 6 within 15 %"
    assert within_count(t, tolerance=10) == "3 of 6 within 10 %"


def test_asr_rows_cover_table1_changes_and_saturation():
    rep = reported_asr_table1()
    ours = rep.set_index(["rate", "policy"]).assign(throughput_rps=18.0)
    ours.loc[(25, "fcfs"), "p50_e2el_ms"] *= 2  # one cell off by 100 %
    t = paper_vs_ours(asr_rows(ours, rep))
    assert len(t) == len(rep) * 3 + 2 * 2 * 2 + 1
    off = t[t["within"] == "no"]
    # SJF's change moves by 13.7 points (within), HRRN's by 36 (not).
    assert list(off["quantity"]) == ["FCFS median E2E latency at 25 req/s", "HRRN median E2E latency change vs FCFS at 25 req/s"]
    assert off["error"].iloc[0] == pytest.approx(100.0)
    sjf = t.set_index("quantity").loc["SJF median E2E latency change vs FCFS at 25 req/s"]
    assert sjf["paper"] == pytest.approx((1486.8 / 5423.8 - 1) * 100)
    assert sjf["ours"] == pytest.approx((1486.8 / (2 * 5423.8) - 1) * 100)
    assert set(t.loc[t["quantity"].str.startswith("FCFS"), "role"]) == {"fitted"}
    assert set(t.loc[t["quantity"].str.startswith(("SJF", "HRRN")), "role"]) == {"predicted"}
