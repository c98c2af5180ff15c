"""Fuzzed bad input (hypothesis): whatever is generated, the validators raise one-line errors
and `schedlab simulate` exits 2 with one line on stderr, never a traceback or a hang."""

from __future__ import annotations

import importlib.util
import json
import math
import signal
import tempfile
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedlab.errors import SchedlabError
from schedlab.validation import check_trace, parse
from schedlab.validation.documents import StepTimeTerms

from test_hostile import N, STEPTIME, run_cli, simulate, trace_frame

#: vLLM's scheduler backend where vLLM is installed.
BACKENDS = ["sim", "vllm-sim"] if importlib.util.find_spec("vllm") else ["sim"]
#: Seconds any one case may take (a hang fails instead of blocking the suite).
CASE_TIMEOUT_S = 20
FUZZ = settings(max_examples=40, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@contextmanager
def time_limit(seconds: int):
    def expire(*_):
        raise TimeoutError(f"case took over {seconds} s")

    old = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# -- bad traces: one cell, or one column's order or type, made wrong ----------------------------
BAD_CELL = {
    "arrival_s": st.sampled_from([math.nan, math.inf, -math.inf]) | st.floats(max_value=-1e-9, allow_nan=False),
    "request_id": st.sampled_from([math.nan, 0.5, -math.inf]),
    "prompt_tokens": st.sampled_from([0, -3, 1.5, math.nan, math.inf]),
    "output_tokens": st.sampled_from([0, -1, 2.25, math.nan, 5000, 10**9]),
    "audio_duration_s": st.sampled_from([-1.0, math.inf, -math.inf]),
}


@st.composite
def bad_traces(draw) -> pd.DataFrame:
    trace = trace_frame()
    how = draw(st.sampled_from(["cell", "unsorted", "duplicate", "text", "missing"]))
    if how == "cell":
        column = draw(st.sampled_from(sorted(BAD_CELL)))
        values = trace[column].to_numpy(float).copy()
        values[draw(st.integers(0, N - 1))] = draw(BAD_CELL[column])
        return trace.assign(**{column: values})
    if how == "unsorted":
        row = draw(st.integers(2, N - 1))  # rows 0 and 1 arrive at 0 and 0.25: row >= 2 can go back
        arrivals = trace["arrival_s"].to_numpy().copy()
        arrivals[row] = draw(st.floats(0, arrivals[row - 1], exclude_max=True))
        return trace.assign(arrival_s=arrivals)
    if how == "duplicate":
        ids = trace["request_id"].to_numpy().copy()
        i, j = sorted(draw(st.lists(st.integers(0, N - 1), min_size=2, max_size=2, unique=True)))
        ids[j] = ids[i]
        return trace.assign(request_id=ids)
    if how == "text":
        column = draw(st.sampled_from(["request_id", "arrival_s", "prompt_tokens", "output_tokens"]))
        return trace.assign(**{column: draw(st.lists(st.text(max_size=5), min_size=N, max_size=N))})
    return trace.drop(columns=draw(st.sampled_from(["request_id", "arrival_s", "prompt_tokens", "output_tokens"])))


# -- bad step-time models: one key wrong, unknown or missing ----------------------------------
BAD_VALUES = (st.floats(max_value=-1e-12, allow_nan=False) | st.text(max_size=8) | st.none() | st.booleans()
              | st.lists(st.integers(), max_size=2) | st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


@st.composite
def bad_steptimes(draw) -> dict:
    model = dict(STEPTIME)
    how = draw(st.sampled_from(["value", "unknown", "missing"]))
    if how == "value":
        model[draw(st.sampled_from([*STEPTIME, "frontend_s", "tile"]))] = draw(BAD_VALUES)
    elif how == "unknown":
        model[draw(st.text(min_size=1, max_size=12).filter(lambda k: k not in StepTimeTerms.model_fields))] = 1.0
    else:
        del model["intercept"]
    return model


@FUZZ
@given(trace=bad_traces())
def test_trace_validator_rejects_in_one_line(trace):
    with pytest.raises(SchedlabError) as err, time_limit(CASE_TIMEOUT_S):
        check_trace(trace, "fuzz.parquet", context=448)
    assert "\n" not in str(err.value) and str(err.value).startswith("fuzz.parquet: ")


@FUZZ
@given(model=bad_steptimes())
def test_steptime_validator_rejects_in_one_line(model):
    with pytest.raises(SchedlabError) as err, time_limit(CASE_TIMEOUT_S):
        parse(StepTimeTerms, model, "fuzz.json")
    assert "\n" not in str(err.value) and str(err.value).startswith("fuzz.json")


def _files(folder: Path) -> dict[str, Path]:
    out = folder / "out"
    out.mkdir()
    paths = {"trace": folder / "trace.parquet", "steptime": folder / "steptime.json", "kappa": folder / "kappa.json"}
    trace_frame().to_parquet(paths["trace"])
    paths["steptime"].write_text(json.dumps(STEPTIME))
    paths["kappa"].write_text(json.dumps({"en": {"status": "fitted", "kappa": 3.0}}))
    return {**paths, "out": out}


def _assert_cli_rejects(capsys, files, backend="sim"):
    with time_limit(CASE_TIMEOUT_S):
        rc, out, err = run_cli(capsys, simulate(files, backend=backend))
    assert rc == 2 and err.count("\n") == 1 and err.startswith("schedlab: error: "), err
    assert not any(files["out"].iterdir())


@settings(FUZZ, max_examples=20)
@given(trace=bad_traces(), backend=st.sampled_from(BACKENDS))
def test_simulate_rejects_any_bad_trace(capsys, trace, backend):
    with tempfile.TemporaryDirectory() as folder:
        files = _files(Path(folder))
        trace.to_parquet(files["trace"])
        _assert_cli_rejects(capsys, files, backend)


@settings(FUZZ, max_examples=20)
@given(model=bad_steptimes() | st.binary(max_size=40).map(lambda b: b.decode("latin-1")))
def test_simulate_rejects_any_bad_steptime_file(capsys, model):
    with tempfile.TemporaryDirectory() as folder:
        files = _files(Path(folder))
        files["steptime"].write_text(model if isinstance(model, str) else json.dumps(model))
        if isinstance(model, str):  # random bytes: skip the rare text that is a valid model
            try:
                parse(StepTimeTerms, json.loads(model), "x")
                return
            except (ValueError, SchedlabError):
                pass
        _assert_cli_rejects(capsys, files)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_nan_arrival_no_longer_hangs(capsys, tmp_path, backend):
    """The hang the fuzzing is about: a NaN arrival once looped forever on sim and vllm-sim."""
    files = _files(tmp_path)
    arrivals = trace_frame()["arrival_s"].to_numpy().copy()
    arrivals[N // 2] = np.nan
    trace_frame(arrival_s=arrivals).to_parquet(files["trace"])
    _assert_cli_rejects(capsys, files, backend)
