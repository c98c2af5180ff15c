"""The front end's measured CPU cost per Whisper request (schedlab.fit.front_end_cost): the
fit's exact numbers on a toy table, the station's closed-form wait against the engine's own
station, bad fit files refused in one line, and a real measurement of vLLM's audio decoding and
the model's feature extractor through the command line."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from schedlab.engine.steptime import StepTimeModel
from schedlab.errors import SchedlabError
from schedlab.fit.front_end_cost import COLUMNS, fit_front_end, front_end_service, md1_wait
from schedlab.workload.arrivals import arrival_times


def _table(totals: dict[float, list[float]], wall_factor: float = 1.0) -> pd.DataFrame:
    rows = [(d, i, 1.0, t - 1.0, t, t * wall_factor) for d, ts in totals.items() for i, t in enumerate(ts)]
    return pd.DataFrame(rows, columns=list(COLUMNS))


def test_the_fit_is_ols_of_the_cost_on_the_clip_duration():
    """Costs of 20 ms + 0.5 ms per second of audio, +-1 ms of noise at each duration: intercept
    20, slope 0.5, and a 10 s mean clip served in 25 ms; calls whose wall time is twice their CPU time are counted as
    contended."""
    table = _table({2.0: [20.0, 22.0], 10.0: [24.0, 26.0], 30.0: [34.0, 36.0]})
    fit = fit_front_end(table, mean_duration_s=10.0)
    assert fit["intercept_ms"] == pytest.approx(20.0)
    assert fit["per_s_ms"] == pytest.approx(0.5)
    assert fit["service_s"] == pytest.approx(25.0 / 1e3)
    assert fit["calls"] == 6 and fit["contended"] == 0.0
    assert fit["ci95"]["per_s_ms"][0] < 0.5 < fit["ci95"]["per_s_ms"][1]
    assert fit_front_end(_table({2.0: [20.0], 30.0: [34.0]}, wall_factor=2.0), 5.0)["contended"] == 1.0
    with pytest.raises(SchedlabError, match="two clip durations"):
        fit_front_end(_table({2.0: [20.0, 21.0]}), 5.0)


def test_the_stations_closed_form_wait_is_the_engines_station():
    """md1_wait against the engine's own station (Lindley's recursion) at load 0.5."""
    rate, service = 12.5, 0.04
    arrivals = arrival_times(rate, rng=np.random.default_rng(2), n_requests=200_000)
    waits = StepTimeModel(intercept=0.0, frontend_service_s=service).visible_times(arrivals) - arrivals - service
    assert md1_wait(rate, service) == pytest.approx(0.5 * 0.04 / (2 * 0.5))
    assert waits.mean() == pytest.approx(md1_wait(rate, service), rel=0.03)
    assert md1_wait(25.0, service) == float("inf")


@pytest.mark.parametrize("text", ['{"service_s": 0}', '{"service_s": "fast"}', '{"service_s": true}', '[1]', '{}'])
def test_a_file_that_is_not_a_front_end_fit_is_refused_in_one_line(tmp_path, text):
    path = tmp_path / "fit.json"
    path.write_text(text)
    with pytest.raises(SchedlabError, match="not a front-end fit"):
        front_end_service(path)


@pytest.mark.slow
def test_the_command_times_vllms_audio_decoding_and_the_models_features(tmp_path):
    """A real measurement: vLLM's load_audio and whisper-tiny's feature extractor on WAVs of 1
    and 30 s; every call took CPU time, the parts add up, and the fit's service time is the
    fitted line at the utterances' mean duration."""
    utterances = tmp_path / "u.parquet"
    pd.DataFrame({"utterance_id": ["a", "b"], "duration_s": [4.0, 6.0], "transcript": ["A", "B"]}).to_parquet(utterances)
    out, fit_path = tmp_path / "t.parquet", tmp_path / "f.json"
    subprocess.run([sys.executable, "-m", "schedlab.cli", "front-end-cost", "--model", "whisper-tiny", "--durations", "1",
                    "30", "--repeats", "2", "--utterances", str(utterances), "--out", str(out), "--out-fit", str(fit_path)],
                   check=True, capture_output=True, text=True, timeout=600)
    table, fit = pd.read_parquet(out), json.loads(fit_path.read_text())
    assert list(table.columns) == list(COLUMNS) and len(table) == 4
    assert (table[["decode_ms", "features_ms"]] > 0).all().all()
    np.testing.assert_allclose(table["total_ms"], table["decode_ms"] + table["features_ms"])
    assert fit["model"] == "whisper-tiny" and fit["mean_duration_s"] == 5.0
    assert fit["service_s"] * 1e3 == pytest.approx(fit["intercept_ms"] + 5.0 * fit["per_s_ms"])
    assert front_end_service(fit_path) == fit["service_s"]
