"""Where a simulator's latency differs from a served engine's: each request's end-to-end
latency in parts, and a step-time model against the engine's decode steps by batch size."""

import numpy as np
import pandas as pd
import pytest

from schedlab.engine.steptime import StepTimeModel
from schedlab.fidelity import LATENCY_PARTS, latency_parts, latency_split, step_error_by_batch


def _engine() -> pd.DataFrame:
    return pd.DataFrame({"request_id": [0, 1, 2], "arrival_s": [0.0, 1.0, 2.0],
                         "first_scheduled_s": [0.01, 1.02, 2.03], "engine_finish_s": [0.51, 1.42, 2.33],
                         "finish_s": [0.52, 1.43, 2.34], "measured": [True, True, False]})


def test_the_parts_add_up_to_each_requests_latency_on_both_sides():
    eng = latency_parts(_engine())
    assert eng["to first scheduled"].tolist() == pytest.approx([0.01, 0.02, 0.03])
    assert eng["service"].tolist() == pytest.approx([0.5, 0.4, 0.3])
    assert eng["way out"].tolist() == pytest.approx([0.01, 0.01, 0.01])
    sim = latency_parts(_engine().drop(columns="engine_finish_s"), output_s=0.004)
    assert sim["way out"].tolist() == pytest.approx([0.004] * 3) and sim["service"][0] == pytest.approx(0.506)
    for parts in (eng, sim):
        assert parts[list(LATENCY_PARTS)].sum(axis=1).to_numpy() == pytest.approx(parts["e2e"].to_numpy())


def test_the_split_compares_the_engines_measured_requests_with_the_same_requests_in_sim():
    """Sim serves request 1 60 ms longer and request 0 20 ms longer, in service alone; its way
    out is its model's 5 ms against the engine's 10 ms; request 2 (not measured) is left out."""
    sim = _engine().drop(columns=["engine_finish_s", "measured"])
    sim["finish_s"] = sim["finish_s"] + [0.015, 0.055, 9.0]  # its way out is 5 ms, not 10
    split = latency_split(_engine(), sim.iloc[::-1], output_s=0.005)  # matched by request id
    assert split["to first scheduled"] == pytest.approx(0.0)
    assert split["service"] == pytest.approx((0.02 + 0.06) / 2 * 1e3)
    assert split["way out"] == pytest.approx(-5.0)
    assert split["e2e"] == pytest.approx((0.015 + 0.055) / 2 * 1e3)


def test_a_model_is_held_against_decode_steps_by_batch_size():
    """Steps of 1 and 2 decodes (a prefill step is not a decode step): the model's line
    against their means, and the time between steps inside each."""
    steps = pd.DataFrame({"n_encoder": 0, "n_prefill_tokens": [0, 0, 0, 64], "n_decode": [1, 1, 2, 2],
                          "ctx_tokens": 0, "prefill_pairs": 0, "time_s": [0.010, 0.012, 0.010, 0.050],
                          "t_schedule": [0.0, 1.0, 2.0, 3.0], "t_update": [0.0099, 1.0119, 2.0098, 3.05]})
    model = StepTimeModel(intercept=0.008, n_decode=0.002)
    table = step_error_by_batch(steps, model)
    assert table.index.tolist() == [1, 2] and table["steps"].tolist() == [2, 1]
    assert table["measured_ms"].tolist() == pytest.approx([11.0, 10.0])
    assert table["predicted_ms"].tolist() == pytest.approx([10.0, 12.0])
    assert table["error_pct"].tolist() == pytest.approx([10 / 11 * 100 - 100, 20.0])
    assert table["between_ms"].tolist() == pytest.approx([0.1, 0.2])
    assert np.isfinite(table.to_numpy(float)).all()
