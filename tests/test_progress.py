"""Progress of long work (schedlab.progress): its modes, its lines in a log, its counts from the
engines, and that it never touches a command's output."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from schedlab import progress


@pytest.mark.parametrize("chosen, expected", [("lines", "lines"), ("BAR", "bar"), ("off", "off"), ("", "off"),
                                              ("sideways", "off")])
def test_the_variable_chooses_the_mode_and_a_pipe_gets_nothing_by_default(monkeypatch, chosen, expected):
    monkeypatch.setenv(progress.VARIABLE, chosen)
    assert progress.mode() == expected  # pytest's stderr is not a terminal: anything unknown is off


def test_a_stage_line_counts_what_its_innermost_stage_counts(monkeypatch, capsys):
    monkeypatch.setenv(progress.VARIABLE, "lines")
    with progress.stage("outer", total=2, unit="traces") as outer:
        for _ in range(2):
            with progress.stage("inner", total=5):
                progress.requests_done(3)
                progress.requests_done(2)
                progress.advance("points timed")  # no open stage counts these: nothing
            outer.advance()
    lines = capsys.readouterr().err.splitlines()
    assert [re.sub(r" in \d+\.\d s$", "", line) for line in lines] == [
        "schedlab: inner: 5 of 5 requests", "schedlab: inner: 5 of 5 requests", "schedlab: outer: 2 of 2 traces"]


def test_a_stage_that_fails_writes_no_line_and_closes(monkeypatch, capsys):
    monkeypatch.setenv(progress.VARIABLE, "lines")
    with pytest.raises(ZeroDivisionError):
        with progress.stage("doomed", total=3):
            progress.requests_done(1)
            1 / 0
    assert capsys.readouterr().err == ""
    progress.requests_done(1)  # no stage left open to count it


def test_bars_open_and_close_with_their_stages(monkeypatch):
    monkeypatch.setenv(progress.VARIABLE, "bar")
    with progress.stage("outer", total=1, unit="traces") as outer:
        with progress.stage("inner", total=4) as inner:
            progress.requests_done(4)
            assert inner.completed == 4 and "progress" in progress._live
        outer.advance()
    assert not progress._live  # the live display ends with the last stage


def _simulate(tmp_path: Path, backend: str, mode: str | None) -> subprocess.CompletedProcess:
    trace = pd.DataFrame({"request_id": np.arange(30), "arrival_s": np.arange(30) * 0.02, "prompt_tokens": 32,
                          "output_tokens": np.resize([4, 16, 9], 30)})
    trace.to_parquet(tmp_path / "trace.parquet")
    (tmp_path / "step.json").write_text(json.dumps({"intercept": 0.01, "n_prefill_tokens": 1e-5, "n_decode": 1e-4}))
    env = {k: v for k, v in os.environ.items() if k != progress.VARIABLE}
    if mode is not None:
        env[progress.VARIABLE] = mode
    return subprocess.run([sys.executable, "-m", "schedlab.cli", "simulate", "--backend", backend,
                           "--trace", str(tmp_path / "trace.parquet"), "--scheduler", "sjf",
                           "--steptime", str(tmp_path / "step.json"), "--hardware", "A100-40GB",
                           "--model", "tiny-llama", "--max-num-seqs", "4", "--kv-capacity-blocks", "64",
                           "--out-results", str(tmp_path / f"{backend}-{mode}.parquet"),
                           "--out-summary", str(tmp_path / f"{backend}-{mode}.json")],
                          capture_output=True, text=True, env=env, timeout=600)


@pytest.mark.parametrize("backend", ["sim", pytest.param("vllm-sim", marks=pytest.mark.slow)])
def test_a_simulation_logs_one_line_for_its_run_and_its_results_do_not_change(tmp_path, backend):
    """The engine counts every request it completes (sim: its step's completions; vllm-sim:
    vLLM's finished outputs), the pipeline's mode writes the run's one line, and the run's
    results are the same with and without it."""
    quiet, logged = _simulate(tmp_path, backend, None), _simulate(tmp_path, backend, "lines")
    assert quiet.returncode == 0 and logged.returncode == 0, logged.stderr[-2000:]
    ours = [[line for line in run.stderr.splitlines() if line.startswith("schedlab:")] for run in (quiet, logged)]
    assert ours[0] == []  # vLLM's own start-up lines aside
    assert len(ours[1]) == 1 and re.fullmatch(rf"schedlab: sjf on {backend}: 30 of 30 requests in \d+\.\d s",
                                              ours[1][0]), logged.stderr
    assert quiet.stdout == logged.stdout
    assert pd.read_parquet(tmp_path / f"{backend}-None.parquet").equals(pd.read_parquet(tmp_path / f"{backend}-lines.parquet"))

