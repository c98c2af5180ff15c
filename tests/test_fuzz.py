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


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
@settings(FUZZ, max_examples=60)
@given(leaf=st.sampled_from(LEAVES), bad=st.sampled_from([math.nan, math.inf, -math.inf, -1, -1e-9, 1e308, -1e308])
       | st.floats(min_value=1e19, allow_infinity=False))
def test_any_config_number_made_nan_infinite_negative_or_huge_is_one_line_naming_its_key(leaf, bad):
    """(A burst's .inf is an asr experiment's rate, the one place an infinity is a value.)"""
    import copy

    from schedlab.validation.config import _key, check_config

    if bad == math.inf and leaf[:2] == ("asr", "experiments") and leaf[3] == "rates":
        return
    config = copy.deepcopy(CONFIG)
    node = config
    for part in leaf[:-1]:
        node = node[part]
    node[leaf[-1]] = bad
    with pytest.raises(SchedlabError) as e:
        check_config(config)
    assert str(e.value).startswith(f"config key {_key(leaf)}: ") and "\n" not in str(e.value), (leaf, str(e.value))


# -- every command, generated from the parser ---------------------------------------------------
# The command line's parser is walked (every subcommand, every option and positional argument) and
# each option is given hostile values of its type: numbers past their bounds and not numbers,
# inputs that are missing, empty, binary, folders or FIFOs, outputs that are inputs (by path,
# symbolic or hard link, '..'), files of the data mirror or the cache, folders, FIFOs or paths
# under a file, hostile text, JSON and URLs. Whatever is drawn, the command exits 0 or 2, says at
# most one line on a failure and never a traceback, changes no input (the mirror and the cache
# included), leaves no output behind when it fails and no temporary when it succeeds, and ends
# within a time limit. A command added to the parser is fuzzed without anyone writing its cases.
# Seeded and bounded: `make test` runs PARSER_EXAMPLES cases; `make fuzz` runs many more
# (SCHEDLAB_FUZZ_EXAMPLES).
import argparse  # noqa: E402
import hashlib  # noqa: E402
import os  # noqa: E402
import stat  # noqa: E402
import time  # noqa: E402

#: Cases of the parser-driven fuzz in a normal test run, and in `make fuzz`.
PARSER_EXAMPLES = int(os.environ.get("SCHEDLAB_FUZZ_EXAMPLES", "120"))
#: Seconds one case may take: every case fails early or runs on a handful of requests.
PARSER_CASE_S = 60

HOSTILE_NUMBERS = ["nan", "inf", "-inf", "-1", "0", "9223372036854775808", "1e308", "-1e308", "1e400", "", "abc",
                   "1,,2", "0x10", "2.5", "1e-320"]
HOSTILE_TEXT = ["", "x", "../../evil name", "é", "a" * 300, "nan", "5", "-", "a/b", " "]
HOSTILE_JSON = ["{}", "[]", "{", "null", '{"a": NaN}', '{"kind": "mixed", "n_requests": 10}',
                '{"steptime": "INPUT", "hardware": "A100-40GB", "model": "whisper-tiny"}', '"text"', "1e308"]
HOSTILE_URLS = ["http://127.0.0.1:9", "ftp://x", "", "http://[::1", "http://127.0.0.1:0", "http://x/path"]
INPUT_KINDS = ("table", "json", "empty", "binary", "text", "missing", "folder", "FIFO", "non-finite JSON")
OUTPUT_KINDS = ("new", "nested", "an input", "a link to an input", "a hard link to an input", "an input by '..'",
                "a mirror file", "the cache", "a folder", "a FIFO", "under a file", "a device")
FOLDER_KINDS_ = ("new", "a file", "a FIFO", "the mirror", "under a file")


def leaf_commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """Every subcommand of ``parser`` that takes no further subcommand, with its words."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path, parser
        return
    seen = set()
    for name, sub in subs[0].choices.items():
        if id(sub) not in seen:
            seen.add(id(sub))
            yield from leaf_commands(sub, (*path, name))


def _kind(action: argparse.Action) -> str:
    from schedlab.cli_types import InputPath, OutputFolder, OutputPath, engine_object, json_object, numbers, server_url

    if action.nargs == 0:
        return "flag"
    kind = action.type
    if isinstance(kind, type) and issubclass(kind, InputPath):
        return "input"
    if kind is OutputPath:
        return "output"
    if kind is OutputFolder:
        return "folder"
    if isinstance(kind, numbers):
        return "number"
    if action.choices is not None:
        return "choice"
    if kind in (json_object, engine_object):
        return "json"
    if kind is server_url:
        return "url"
    return "text"


def _arguments(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))]


@st.composite
def parser_cases(draw, build=None, only: tuple[str, ...] | None = None):
    """A command of the parser ``build()`` gives (or the command ``only``) and, for each of its
    arguments (every required one, some of the others), what to give it: a list of (kind,
    hostile choice) per value."""
    from schedlab.cli import build_parser

    commands = [c for c in leaf_commands((build or build_parser)()) if only is None or c[0] == only]
    words, parser = draw(st.sampled_from(commands))
    plan = []
    for action in _arguments(parser):
        if not (action.required or not action.option_strings) and not draw(st.booleans()):
            continue
        kind = _kind(action)
        count = (draw(st.integers(1, 2)) if action.nargs in ("+", "*") else action.nargs
                 if isinstance(action.nargs, int) else 1)
        choices = {"flag": [None], "input": INPUT_KINDS, "output": OUTPUT_KINDS, "folder": FOLDER_KINDS_,
                   "number": [*HOSTILE_NUMBERS, "valid"], "choice": [*(action.choices or []), "bogus"],
                   "json": HOSTILE_JSON, "url": HOSTILE_URLS, "text": HOSTILE_TEXT}[kind]
        plan.append((action, kind, [draw(st.sampled_from(list(choices))) for _ in range(count)]))
    return words, plan


def _make_input(path: Path, kind: str) -> None:
    if kind == "table":
        trace_frame().to_parquet(path)
    elif kind == "json":
        path.write_text('{"unknown": 1}')
    elif kind == "non-finite JSON":
        path.write_text('{"intercept": NaN, "n_decode": Infinity}')
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "binary":
        path.write_bytes(bytes(range(256)) * 8)
    elif kind == "text":
        path.write_text("hello\n")
    elif kind == "folder":
        path.mkdir()
        trace_frame().to_parquet(path / "inside.parquet")
    elif kind == "FIFO":
        os.mkfifo(path)


def _valid_number(action) -> str:
    kind = action.type
    for text in ("1", "2", "10", "0.5", "100"):
        try:
            kind(text)
            return text
        except argparse.ArgumentTypeError:
            pass
    return "1"


def materialise(words, plan, root: Path) -> list[str]:
    """The case's command line, its files made under ``root`` (inputs first, so that outputs
    can be them)."""
    mirror, out = root / "mirror", root / "out"
    inputs: list[Path] = []
    values: dict[int, list[str]] = {}
    for n, (action, kind, picks) in enumerate(plan):
        if kind == "input":
            values[n] = []
            for k, pick in enumerate(picks):
                path = root / f"in{n}_{k}"
                _make_input(path, pick)
                values[n].append(str(path))
                if pick not in ("missing", "FIFO"):
                    inputs.append(path)
    files = [p for p in inputs if p.is_file()] or [mirror / "librispeech_test_clean.tsv"]
    for n, (action, kind, picks) in enumerate(plan):
        if kind == "input":
            continue
        texts = []
        for k, pick in enumerate(picks):
            name = f"{n}_{k}"
            target = files[(n + k) % len(files)]
            if kind == "output":
                text = {"new": out / f"o{name}.parquet", "nested": out / "a" / "b" / f"o{name}.json",
                        "an input": target, "an input by '..'": out / ".." / target.relative_to(root),
                        "a mirror file": mirror / "AzureLLMInferenceTrace_conv.csv",
                        "the cache": root / "cache" / f"o{name}.parquet", "a device": Path(os.devnull),
                        "under a file": out / "plain" / f"o{name}"}.get(pick)
                if pick == "a link to an input":
                    text = out / f"link{name}"
                    text.symlink_to(target)
                elif pick == "a hard link to an input":
                    text = out / f"hard{name}"
                    os.link(target, text)
                elif pick == "a folder":
                    text = out / f"dir{name}"
                    text.mkdir()
                elif pick == "a FIFO":
                    text = out / f"fifo{name}"
                    os.mkfifo(text)
                elif pick == "under a file":
                    (out / "plain").write_text("the user's file")
                texts.append(str(text))
            elif kind == "folder":
                path = {"new": out / f"d{name}", "the mirror": mirror / f"d{name}",
                        "under a file": out / "plain" / f"d{name}"}.get(pick, out / f"x{name}")
                if pick == "a file":
                    path.write_text("the user's file")
                elif pick == "a FIFO":
                    os.mkfifo(path)
                elif pick == "under a file":
                    (out / "plain").write_text("the user's file")
                texts.append(str(path))
            elif kind == "number":
                texts.append(_valid_number(action) if pick == "valid" else pick)
            elif kind == "json":
                texts.append(pick.replace("INPUT", str(target)))
            elif kind != "flag":
                texts.append(str(pick))
        values[n] = texts
    argv = list(words)
    for n, (action, kind, picks) in enumerate(plan):
        if not action.option_strings:
            argv += values[n]
    for n, (action, kind, picks) in enumerate(plan):
        if action.option_strings:
            argv += [action.option_strings[0], *values[n]]
    return argv


def _snapshot(root: Path) -> dict[str, tuple]:
    """Every file and link under ``root`` (out/ aside) with what must not change: its type,
    inode and a regular file's bytes' digest."""
    state = {}
    for path in sorted(root.rglob("*")):
        if root / "out" in path.parents:
            continue
        st = os.lstat(path)
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if stat.S_ISREG(st.st_mode) else None
        state[str(path)] = (stat.S_IFMT(st.st_mode), st.st_ino, digest)
    return state


def _outputs(root: Path) -> list[str]:
    return sorted(str(p) for p in (root / "out").rglob("*"))


def _mirror(root: Path) -> None:
    """A small mirror of the shared mirror's files (a few rows each) and an empty cache."""
    mirror = root / "mirror"
    mirror.mkdir()
    (mirror / "librispeech_test_clean.tsv").write_text(
        "utterance_id\tduration_s\ttranscript\n1-2-0001\t3.5\tSOME WORDS\n1-2-0002\t6.0\tMORE WORDS HERE\n")
    rows = "".join(f"2023-11-16 18:15:{k:02d}.0,{100 + k},{5 + k}\n" for k in range(6))
    for service in ("conv", "code"):
        (mirror / f"AzureLLMInferenceTrace_{service}.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + rows)
    (mirror / "openchat_sharegpt4_lengths_llama2.csv").write_text(
        "num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio\n100,20,120,5.0\n300,40,340,7.5\n")
    (mirror / "mooncake_conversation_trace.jsonl").write_text(
        "".join(json.dumps({"timestamp": 10 * k, "input_length": 600 + k, "output_length": 5, "hash_ids": [k, 50 + k]})
                + "\n" for k in range(4)))
    (root / "cache").mkdir()


def check_case(capsys, case) -> None:
    """Run one drawn case and check what every command promises (see above)."""
    words, plan = case
    with tempfile.TemporaryDirectory() as folder, pytest.MonkeyPatch.context() as mp:
        root = Path(folder)
        (root / "out").mkdir()
        _mirror(root)
        argv = materialise(words, plan, root)
        mp.chdir(root)  # (undone before the folder goes: the next case needs a working folder)
        mp.setenv("SCHEDLAB_DATA_MIRROR", str(root / "mirror"))
        mp.setenv("SCHEDLAB_DATA_CACHE", str(root / "cache"))
        # every case small whatever the machine: an allocation of more than 2% of the available
        # memory is refused (a 7B model's weights, a billion requests)
        mp.setenv("SCHEDLAB_MEMORY_SHARE", "0.02")
        before, outputs = _snapshot(root), _outputs(root)
        try:
            with time_limit(PARSER_CASE_S):
                rc, out, err = run_cli(capsys, argv)
        except Exception as e:  # the console script would print a traceback (past the time limit too)
            raise AssertionError(f"{argv}: {type(e).__name__}: {e}") from e
        assert rc in (0, 2), (argv, rc, err[-2000:])
        assert "Traceback" not in err, (argv, err[-2000:])
        if rc:
            assert err.count("\n") == 1 and err.startswith(("schedlab: error: ", "usage: ", "schedlab: ")), (argv, err)
            assert _outputs(root) == outputs, (argv, err, sorted(set(_outputs(root)) - set(outputs)))
        after = _snapshot(root)
        assert {k: after.get(k) for k in before} == before, (argv, err)  # no input changed, none removed
        assert all(root / "cache" in Path(k).parents for k in set(after) - set(before)), (argv, err)  # the cache grows
        assert not [p for p in root.rglob(".*.tmp*")], argv


@pytest.mark.slow
@settings(FUZZ, max_examples=PARSER_EXAMPLES)
@given(case=parser_cases())
def test_every_command_of_the_parser_holds_against_hostile_values(capsys, case):
    check_case(capsys, case)


#: Cases of the fuzz that are interrupted (each a process of its own), in a normal test run.
INTERRUPTED_EXAMPLES = max(4, PARSER_EXAMPLES // 20)


@pytest.mark.slow
@settings(FUZZ, max_examples=INTERRUPTED_EXAMPLES)
@given(case=parser_cases(), delay=st.sampled_from([0.2, 0.6, 1.0, 1.5, 2.5]))
def test_ctrl_c_ends_every_command_with_130_in_one_line_and_no_output(case, delay):
    """A drawn case run as its own process and sent SIGINT (what Ctrl-C sends) ``delay`` seconds
    after it starts: it ends as it would have (exit 0 or 2), or with exit status 130 and
    ``schedlab: interrupted``, no traceback, its inputs unchanged and nothing written."""
    import signal
    import subprocess
    import sys

    words, plan = case
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        (root / "out").mkdir()
        _mirror(root)
        argv = materialise(words, plan, root)
        env = {**os.environ, "SCHEDLAB_DATA_MIRROR": str(root / "mirror"), "SCHEDLAB_DATA_CACHE": str(root / "cache"),
               "SCHEDLAB_MEMORY_SHARE": "0.02"}
        before, outputs = _snapshot(root), _outputs(root)
        proc = subprocess.Popen([sys.executable, "-m", "schedlab.cli", *argv], cwd=root, env=env, text=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        deadline = time.monotonic() + PARSER_CASE_S
        while proc.poll() is None and not _at_work(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.02)  # (an interrupt while Python starts, before any of schedlab runs, is Python's)
        time.sleep(delay)
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=PARSER_CASE_S)
        assert proc.returncode in (0, 2, 130), (argv, proc.returncode, err[-2000:])
        assert "Traceback" not in err, (argv, err[-2000:])
        if proc.returncode == 130:
            assert err.endswith("schedlab: interrupted\n") and err.count("\n") == 1, (argv, err)
        if proc.returncode:
            assert _outputs(root) == outputs, (argv, err)
        after = _snapshot(root)
        assert {k: after.get(k) for k in before} == before, (argv, err)
        assert not [p for p in root.rglob(".*.tmp*")], argv


def _at_work(pid: int) -> bool:
    """Whether process ``pid`` runs schedlab's main(): it has its SIGTERM handler in place."""
    import signal

    try:
        line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("SigCgt"))
    except (OSError, StopIteration):
        return False
    return bool(int(line.split()[1], 16) >> (signal.SIGTERM - 1) & 1)


def test_the_parser_fuzz_covers_every_command_and_every_option():
    """Every leaf command and every argument of the parser has a kind the fuzz draws from."""
    from schedlab.cli import build_parser

    commands = list(leaf_commands(build_parser()))
    assert len(commands) >= 40
    for words, parser in commands:
        for action in _arguments(parser):
            assert _kind(action) in ("flag", "input", "output", "folder", "number", "choice", "json", "url", "text")


def _naive(args) -> None:
    """A command written without schedlab.io: its output opened and written before its input is
    read, so a bad input leaves it half-written (the error itself is one line)."""
    with open(args.out, "w") as f:
        f.write("half")
        try:
            spec = json.loads(Path(args.spec).read_text())
        except (OSError, ValueError) as e:
            raise SchedlabError(f"{args.spec}: not a spec ({type(e).__name__})") from None
        f.write(json.dumps(spec))


def _with_naive_command():
    """The command line's parser with one more command, `naive` (:func:`_naive`)."""
    from schedlab.cli import build_parser
    from schedlab.cli_types import InputPath, OutputPath

    def build():
        parser = build_parser()
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        naive = sub.add_parser("naive", help="a spec copied by a naive writer")
        naive.add_argument("--spec", type=InputPath, required=True)
        naive.add_argument("--out", type=OutputPath, required=True)
        naive.set_defaults(func=_naive)
        return parser

    return build


def test_the_parser_fuzz_catches_a_command_added_with_a_naive_writer(capsys, monkeypatch):
    """The fuzz, run as it is on a parser with one more command that no case was written for,
    finds that command's half-written output."""
    import schedlab.cli

    build = _with_naive_command()
    monkeypatch.setattr(schedlab.cli, "build_parser", build)

    @settings(FUZZ, max_examples=30, report_multiple_bugs=False)
    @given(case=parser_cases(build=build, only=("naive",)))
    def fuzz(case):
        check_case(capsys, case)

    with pytest.raises(AssertionError, match="'naive'"):  # the case's command line is in the message
        fuzz()
