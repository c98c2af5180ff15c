"""Fuzzed bad input (hypothesis): whatever is generated, the validators raise one-line errors
and `schedlab simulate` exits 2 with one line on stderr, never a traceback or a hang."""

from __future__ import annotations

import importlib.util
import json
import math
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedlab.errors import SchedlabError
from schedlab.validation import check_trace, parse
from schedlab.validation.documents import StepTimeTerms

from test_hostile import (
    FILE_KINDS,
    FOLDER_KINDS,
    KAPPA,
    N,
    STEPTIME,
    WRITERS,
    _hostile,
    _materialise,
    _numeric_options,
    _state,
    run_cli,
    simulate,
    time_limit,
    trace_frame,
)

#: vLLM's scheduler backend where vLLM is installed.
BACKENDS = ["sim", "vllm-sim"] if importlib.util.find_spec("vllm") else ["sim"]
#: Seconds any one case may take (a hang fails instead of blocking the suite).
CASE_TIMEOUT_S = 20
FUZZ = settings(max_examples=40, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])




# -- bad traces: one cell, or one column's order or type, made wrong ----------------------------
BAD_CELL = {
    "arrival_s": (st.sampled_from([math.nan, math.inf, -math.inf]) | st.floats(max_value=-1e-9, allow_nan=False)
                  | st.floats(min_value=1.01e8, allow_infinity=False)),
    "request_id": st.sampled_from([math.nan, 0.5, -math.inf, 1e300, -1e300]),
    "prompt_tokens": st.sampled_from([0, -3, 1.5, math.nan, math.inf, 1e18, 1e308]),
    "output_tokens": st.sampled_from([0, -1, 2.25, math.nan, 5000, 10**9, 1e308]),
    "audio_duration_s": st.sampled_from([-1.0, math.inf, -math.inf]) | st.floats(min_value=1.01e5, allow_infinity=False),
}


@st.composite
def bad_traces(draw) -> pd.DataFrame:
    trace = trace_frame()
    how = draw(st.sampled_from(["cell", "unsorted", "duplicate", "text", "missing", "empty"]))
    if how == "empty":
        return trace.iloc[:0]
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


# -- bad kappa files: a language's fit out of range, mistyped or malformed --------------------
@st.composite
def bad_kappas(draw) -> dict:
    fits = {lang: dict(fit) for lang, fit in KAPPA.items()}
    lang = draw(st.sampled_from(["en", "hi", "x" * 3]))
    fits[lang] = {"status": "fitted", "kappa": draw(st.sampled_from([0, -1.0, 1e308, 1001.0, math.nan, math.inf])
                                                    | st.floats(min_value=1000.5, allow_infinity=False)
                                                    | st.text(max_size=4) | st.none() | st.booleans())}
    return fits


@settings(FUZZ, max_examples=20)
@given(kappa=bad_kappas())
def test_simulate_rejects_any_bad_kappa_file(capsys, kappa):
    """(A kappa of 1e308 once overflowed sizing every request.)"""
    with tempfile.TemporaryDirectory() as folder:
        files = _files(Path(folder))
        files["kappa"].write_text(json.dumps(kappa))
        _assert_cli_rejects(capsys, files)


# -- every command: numbers past their bounds, hostile outputs ----------------------------------
NUMERIC = [p.values for p in _numeric_options()]
#: Anything that is not a finite number within most bounds, as text.
NUMBER_TEXT = (st.floats().map(repr) | st.integers(min_value=-(10**30), max_value=10**30).map(str)
               | st.sampled_from(["nan", "-inf", "inf", "1e400", "-0", "0x10", "1_000", "", " ", "1,", ",1", "1e-400"]))


@settings(FUZZ, max_examples=60)
@given(case=st.sampled_from(NUMERIC), text=NUMBER_TEXT)
def test_any_command_refuses_any_number_past_its_bounds(capsys, case, text):
    """A random numeric option of a random command, given a random number or non-number: when
    its type refuses it, the command exits 2 with one line naming the option, and writes
    nothing. (Values the option accepts would run the command: they are left to the tests of
    each command.)"""
    import argparse

    from schedlab.cli import build_parser
    from test_hostile import _subparser

    command, option, _ = case
    action = next(a for a in _subparser(build_parser(), command)._actions if option in a.option_strings)
    try:
        action.type(text)
        return  # accepted
    except argparse.ArgumentTypeError:
        pass
    with tempfile.TemporaryDirectory() as folder:
        files = _command_files(Path(folder))
        argv = _materialise(command, files, f"{folder}/")[0]
        with time_limit(CASE_TIMEOUT_S):
            rc, out, err = run_cli(capsys, [*argv, option, text])
        assert rc == 2 and err.count("\n") == 1 and option in err, (text, err)
        assert not any((Path(folder) / "out").iterdir())


def _command_files(folder: Path) -> dict[str, Path]:
    """The inputs every command of the table reads (as the hostile tests' ``files``)."""
    files = _files(folder)
    files["pool"] = folder / "pool.parquet"
    pd.DataFrame({"prompt_tokens": [100, 200], "output_tokens": [10, 20]}).to_parquet(files["pool"])
    (folder / "model").mkdir()
    return files


SLOTS = [(name, i) for name, argv in WRITERS.items() for i, a in enumerate(argv)
         if isinstance(a, tuple) and a[0] in ("out", "folder")]


@st.composite
def hostile_targets(draw):
    """A command, one of its outputs, and what that output path turns out to be: a device,
    FIFO, socket or folder reached directly or through a chain of symbolic links, a path under
    a file, an input reached through links, '..' or a hard link, or another output."""
    command, slot = draw(st.sampled_from(SLOTS))
    folder_slot = WRITERS[command][slot][0] == "folder"
    kind = draw(st.sampled_from(FOLDER_KINDS if folder_slot else FILE_KINDS))
    if kind == "another output" and sum(1 for a in WRITERS[command] if isinstance(a, tuple) and a[0] == "out") < 2:
        kind = "FIFO"
    links = draw(st.integers(0, 3)) if kind not in ("under a file", "another output") else 0
    via = draw(st.sampled_from(["path", "dotdot", "hardlink"])) if kind == "an input" else "path"
    return command, slot, kind, links, via


@settings(FUZZ, max_examples=60)
@given(case=hostile_targets())
def test_no_command_writes_through_any_hostile_path(capsys, case):
    """However an output path reaches a device, a FIFO, a socket, a folder, a file where a
    folder is, an input or another output (symbolic links, '..', hard links), the command exits
    2 in one line before any work and the thing it reaches is unchanged."""
    import os

    command, slot, kind, links, via = case
    if kind == "device" and os.geteuid() != 0:
        kind = "FIFO"
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        files = _command_files(root)
        argv, an_input = _materialise(command, files, f"{folder}/")
        if an_input is None and kind == "an input":
            kind = "socket"
        target = Path(argv[slot])
        if kind == "under a file":
            _hostile("file", root / "out" / "plain")
            argv[slot], target = str(root / "out" / "plain" / "deeper" / "x"), root / "out" / "plain"
        elif kind == "another output":
            argv[slot] = next(a for j, a in enumerate(argv) if j != slot and a.startswith(f"{folder}/out/"))
            target = None
        elif kind == "an input":
            target = Path(an_input)
            argv[slot] = {"path": an_input, "dotdot": f"{folder}/out/../{target.name}"}.get(via, str(root / "out" / "hard"))
            if via == "hardlink":
                os.link(target, argv[slot])
        else:
            _hostile(kind if kind != "file" else "file", target)
        if links and target is not None and kind not in ("under a file",):
            end = Path(argv[slot])
            for k in range(links):
                link = root / "out" / f"link{k}"
                link.symlink_to(end)
                end = link
            argv[slot] = str(end)
        before = _state(target) if target is not None else None
        listing = sorted(str(p) for p in root.rglob("*"))
        with time_limit(60):
            rc, out, err = run_cli(capsys, argv)
        assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err, (case, err)
        if target is not None:
            assert _state(target) == before
        assert sorted(str(p) for p in root.rglob("*")) == listing


# -- the pipeline's config: any number made NaN, infinite, negative or huge ---------------------
def _numeric_leaves(value, path=()):
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _numeric_leaves(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _numeric_leaves(v, (*path, i))
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield path


CONFIG = __import__("yaml").safe_load((Path(__file__).resolve().parents[1] / "config.yaml").read_text())
LEAVES = list(_numeric_leaves(CONFIG))


@settings(FUZZ, max_examples=60)
@given(leaf=st.sampled_from(LEAVES), bad=st.sampled_from([math.nan, math.inf, -math.inf, -1, -1e-9, 1e308, -1e308])
       | st.floats(min_value=1e19, allow_infinity=False))
def test_any_config_number_made_nan_infinite_negative_or_huge_is_one_line_naming_its_key(capsys, leaf, bad):
    """(A burst's .inf is an asr experiment's rate, the one place an infinity is a value.)"""
    import copy

    from schedlab.snakemake_start import _key, check_config

    if bad == math.inf and leaf[:2] == ("asr", "experiments") and leaf[3] == "rates":
        return
    config = copy.deepcopy(CONFIG)
    node = config
    for part in leaf[:-1]:
        node = node[part]
    node[leaf[-1]] = bad
    with pytest.raises(SystemExit) as stop:
        check_config(config, Path(__file__).resolve().parents[1] / "workflow" / "schemas" / "config.schema.yaml")
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"schedlab: error: config key {_key(leaf)}: "), (leaf, err)
