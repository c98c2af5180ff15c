"""Hostile input at the command line: each bad input below ends with exit status 2, one line
on stderr naming the problem, no traceback, and no output file left behind."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import resource
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from schedlab.cli import main


@contextmanager
def time_limit(seconds: int):
    """Fail with TimeoutError after ``seconds`` instead of hanging."""

    def expire(*_):
        raise TimeoutError(f"case took over {seconds} s")

    old = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


N = 12
STEPTIME = {"intercept": 0.002, "n_encoder": 0.01, "n_prefill_tokens": 1e-5, "n_decode": 1e-4, "ctx_tokens": 1e-8}
KAPPA = {"en": {"status": "fitted", "kappa": 3.0}}


def trace_frame(**columns) -> pd.DataFrame:
    """A small valid Whisper-sized trace; ``columns`` replace columns."""
    base = {
        "request_id": np.arange(N),
        "arrival_s": np.arange(N) * 0.25,
        "prompt_tokens": np.full(N, 4),
        "output_tokens": np.full(N, 30),
        "audio_duration_s": np.full(N, 8.0),
        "language": ["en"] * N,
    }
    return pd.DataFrame({**base, **columns})


def with_row(column: str, row: int, value) -> dict:
    values = trace_frame()[column].to_numpy(float).copy()
    values[row] = value
    return {column: values}


@pytest.fixture
def files(tmp_path) -> dict[str, Path]:
    """Valid inputs (trace, step-time model, kappa, slai pool) and an empty output folder."""
    paths = {name: tmp_path / name for name in ("trace.parquet", "steptime.json", "kappa.json", "pool.parquet")}
    trace_frame().to_parquet(paths["trace.parquet"])
    paths["steptime.json"].write_text(json.dumps(STEPTIME))
    paths["kappa.json"].write_text(json.dumps(KAPPA))
    pd.DataFrame({"prompt_tokens": [100, 200, 300], "output_tokens": [10, 20, 30]}).to_parquet(paths["pool.parquet"])
    (tmp_path / "out").mkdir()
    return {k.split(".")[0]: v for k, v in paths.items()} | {"out": tmp_path / "out", "dir": tmp_path}


def simulate(files, *extra, backend="sim", model="whisper-tiny") -> list[str]:
    return ["simulate", "--backend", backend, "--trace", str(files["trace"]), "--policy", "sjf",
            "--steptime", str(files["steptime"]), "--kappa", str(files["kappa"]), "--hardware", "A100-40GB",
            "--model", model, "--out-results", str(files["out"] / "run.parquet"),
            "--out-summary", str(files["out"] / "run.json"), *extra]


def run_cli(capsys, argv: list[str]) -> tuple[int, str, str]:
    """``schedlab argv`` in this process: exit status, stdout, stderr."""
    try:
        rc = main(argv)
    except SystemExit as e:  # argparse's usage errors
        rc = e.code
    out, err = capsys.readouterr()
    return rc, out, err


def assert_rejected(capsys, files, argv: list[str], *named: str) -> str:
    rc, out, err = run_cli(capsys, argv)
    assert rc == 2, err
    assert err.startswith("schedlab: error: ") and err.endswith("\n") and err.count("\n") == 1, err
    assert "Traceback" not in err and out == ""
    for word in named:
        assert word in err, (word, err)
    assert not any(files["out"].rglob("*")), list(files["out"].rglob("*"))
    return err


# -- traces -----------------------------------------------------------------------------------
TRACE_CASES = {
    "nan arrival (first row)": (with_row("arrival_s", 0, np.nan), ("arrival_s", "row 0")),
    "nan arrival (middle row)": (with_row("arrival_s", 5, np.nan), ("arrival_s", "row 5")),
    "nan arrival (last row)": (with_row("arrival_s", N - 1, np.nan), ("arrival_s", f"row {N - 1}")),
    "inf arrival": (with_row("arrival_s", 3, np.inf), ("arrival_s", "finite", "row 3")),
    "negative arrival": (with_row("arrival_s", 0, -40.0), ("arrival_s", ">= 0", "row 0")),
    "unsorted arrivals": (with_row("arrival_s", 4, 0.1), ("arrival_s", "sorted", "row 4")),
    "duplicate request ids": (with_row("request_id", 7, 2), ("request_id", "unique", "row 7")),
    "zero output tokens": (with_row("output_tokens", 2, 0), ("output_tokens", "row 2")),
    "fractional prompt tokens": (with_row("prompt_tokens", 1, 2.5), ("prompt_tokens", "whole", "row 1")),
    "text token counts": ({"output_tokens": ["many"] * N}, ("output_tokens", "numbers")),
    "negative audio duration": (with_row("audio_duration_s", 6, -1.0), ("audio_duration_s", "row 6")),
    "audio duration of 1e308 s": (with_row("audio_duration_s", 2, 1e308), ("audio_duration_s", "<= 100000", "row 2")),
    "arrival at 1e300 s": (with_row("arrival_s", N - 1, 1e300), ("arrival_s", "row 11")),
    "prompt of 1e18 tokens": (with_row("prompt_tokens", 4, 1e18), ("prompt_tokens", "<= 1e+07", "row 4")),
    "request id of 1e300": (with_row("request_id", 1, 1e300), ("request_id", "row 1")),
}


@pytest.mark.parametrize("columns, named", TRACE_CASES.values(), ids=TRACE_CASES.keys())
def test_bad_trace_is_rejected(capsys, files, columns, named):
    trace_frame(**columns).to_parquet(files["trace"])
    assert_rejected(capsys, files, simulate(files), str(files["trace"]), *named)


def test_output_beyond_the_context_is_rejected_identically_on_sim_and_vllm_sim(capsys, files):
    """5,000 output tokens on Whisper's 448-token decoder: one rule for every backend."""
    pytest.importorskip("vllm")
    trace_frame(**with_row("output_tokens", 3, 5000)).to_parquet(files["trace"])
    errors = [assert_rejected(capsys, files, simulate(files, backend=b), "output_tokens", "448", "row 3")
              for b in ("sim", "vllm-sim")]
    assert errors[0] == errors[1]


def _shared(column: str, prompt: int, row: int, value) -> dict:
    """A decoder trace with sharing data: ``prompt`` tokens each, row ``row``'s list replaced."""
    if column == "token_ids":
        lists = [list(range(1000 + 10 * k, 1000 + 10 * k + prompt)) for k in range(N)]
    else:  # one chain per row, each starting from hash 0
        lists = [[0] + [100 * k + j for j in range(1, -(-prompt // 512))] for k in range(N)]
    lists[row] = value
    return {"prompt_tokens": np.full(N, prompt), column: lists}


SHARING_CASES = {
    "negative token id": (_shared("token_ids", 4, 3, [1, -2, 3, 4]), ("token_ids", "row 3", "whole numbers")),
    "fractional token id": (_shared("token_ids", 4, 1, [1, 2.5, 3, 4]), ("token_ids", "row 1", "whole numbers")),
    "token ids longer than the prompt": (_shared("token_ids", 4, 2, [1, 2, 3, 4, 5, 6]),
                                         ("token_ids", "row 2", "longer than the prompt")),
    "token ids short of the prompt": (_shared("token_ids", 4, 5, [1, 2]), ("token_ids", "row 5", "do not cover")),
    "hash ids longer than the prompt": (_shared("hash_ids", 600, 4, [0, 401, 402]),
                                        ("hash_ids", "row 4", "longer than the prompt")),
    "unknown hash (not chained)": (_shared("hash_ids", 600, 6, [7, 1]), ("hash_ids", "unknown hash 1")),
    "negative hash id": (_shared("hash_ids", 600, 0, [0, -5]), ("hash_ids", "row 0", "whole numbers")),
    "shared prefix longer than the prompt": ({"prefix_id": np.zeros(N, int), "prefix_tokens": [2] * 3 + [9] + [2] * (N - 4)},
                                             ("prefix_tokens", "row 3", "longer than the prompt")),
    "prefix id without its length": ({"prefix_id": np.zeros(N, int)}, ("prefix_tokens", "missing")),
}


@pytest.mark.parametrize("columns, named", SHARING_CASES.values(), ids=SHARING_CASES.keys())
def test_bad_sharing_data_is_rejected(capsys, files, columns, named):
    trace_frame(**columns).to_parquet(files["trace"])
    assert_rejected(capsys, files, simulate(files, model="tiny-llama"), str(files["trace"]), *named)


def test_non_parquet_trace(capsys, files):
    files["trace"].write_text("request_id,arrival_s\n0,0\n")
    assert_rejected(capsys, files, simulate(files), str(files["trace"]), "parquet")


# -- step-time models and kappa ---------------------------------------------------------------
JSON_CASES = {
    "negative coefficient": ("steptime", json.dumps({**STEPTIME, "n_decode": -1e-4}), ("n_decode",)),
    "negative frontend_s": ("steptime", json.dumps({**STEPTIME, "frontend_s": -0.5}), ("frontend_s",)),
    "NaN intercept": ("steptime", json.dumps({**STEPTIME, "intercept": float("nan")}), ("intercept", "finite")),
    "infinite coefficient": ("steptime", json.dumps({**STEPTIME, "n_encoder": float("inf")}), ("n_encoder", "finite")),
    "null intercept": ("steptime", json.dumps({**STEPTIME, "intercept": None}), ("intercept",)),
    "string coefficient": ("steptime", json.dumps({**STEPTIME, "ctx_tokens": "1e-8"}), ("ctx_tokens",)),
    "unknown step-time key": ("steptime", json.dumps({**STEPTIME, "n_prefil_tokens": 1e-5}), ("n_prefil_tokens",)),
    "malformed step-time JSON": ("steptime", '{"intercept": 0.002,', ("not valid JSON",)),
    "step-time JSON not an object": ("steptime", "[1, 2]", ("StepTimeTerms",)),
    "malformed kappa JSON": ("kappa", "{'en': 3}", ("not valid JSON",)),
    "flat kappa file": ("kappa", json.dumps({"en": 2.96}), ("key 'en'",)),
    "negative kappa": ("kappa", json.dumps({"en": {"status": "fitted", "kappa": -3}}), ("kappa",)),
    "kappa of 1e308": ("kappa", json.dumps({"en": {"status": "fitted", "kappa": 1e308}}), ("kappa", "1000")),
    "kappa of 1e308 in a second language": ("kappa", json.dumps({"en": {"status": "fitted", "kappa": 3.0},
                                                               "hi": {"status": "fitted", "kappa": 1e308}}), ("hi",)),
}


@pytest.mark.parametrize("which, text, named", JSON_CASES.values(), ids=JSON_CASES.keys())
def test_bad_model_file_is_rejected(capsys, files, which, text, named):
    files[which].write_text(text)
    assert_rejected(capsys, files, simulate(files), str(files[which]), *named)


# -- engine limits, run lengths, specs, outputs ----------------------------------------------
def slai_run(files, *extra) -> list[str]:
    return ["slai", "run", "--scheduler", "sarathi-fcfs", "--rate", "1", "--pool", str(files["pool"]),
            "--steptime", str(files["steptime"]), "--out-results", str(files["out"] / "c.parquet"),
            "--out-summary", str(files["out"] / "c.json"), *extra]


def tournament_play(files, spec: dict) -> list[str]:
    arena = {"steptime": str(files["steptime"]), "hardware": "RTX-6000-Ada", "model": "mistral-7b"}
    return ["tournament", "play", "--workload", "w", "--spec", json.dumps(spec), "--arena", json.dumps(arena),
            "--loads", "0.5", "--entrants", "fcfs", "--out", str(files["out"] / "t.parquet")]


def extension_vad(files, spec: dict, **engine) -> list[str]:
    arena = {"steptime": str(files["steptime"]), "hardware": "A100-40GB", "model": "whisper-tiny",
             "kappa": str(files["kappa"]), **engine}
    return ["extension", "vad", "--utterances", str(files["pool"]), "--engine", json.dumps(arena),
            "--spec", json.dumps(spec), "--out-runs", str(files["out"] / "v.parquet"),
            "--out-accuracy", str(files["out"] / "a.parquet")]


CLI_CASES = {
    "gpu memory utilization of 5": (lambda f: simulate(f, "--gpu-memory-utilization", "5"), ("gpu_memory_utilization",)),
    "zero max seqs": (lambda f: simulate(f, "--max-num-seqs", "0"), ("--max-num-seqs",)),
    "slai negative duration": (lambda f: slai_run(f, "--duration-s", "-60"), ("duration_s",)),
    "slai warm-up longer than the run": (lambda f: slai_run(f, "--duration-s", "100", "--warmup-s", "120"), ("warm-up",)),
    "slai NaN duration": (lambda f: slai_run(f, "--duration-s", "nan"), ("duration_s",)),
    "slai block size 0": (lambda f: slai_run(f, "--block-size", "0"), ("--block-size",)),
    "slai TBT targets without the free class": (lambda f: slai_run(f, "--tbt-targets", "paying=0.2"), ("--tbt-targets",)),
    "slai negative TBT target": (lambda f: slai_run(f, "--tbt-targets", "paying=-1,free=2"), ("--tbt-targets",)),
    "slai pool scaled up": (lambda f: ["slai", "scale", "--pool", str(f["pool"]), "--factor", "2", "--model",
                                       "tiny-llama", "--out", str(f["out"] / "scaled.parquet")], ("length scale",)),
    "tournament n_requests many": (lambda f: tournament_play(f, {"kind": "mixed", "n_requests": "many"}), ("n_requests", "'w'")),
    "tournament unknown kind": (lambda f: tournament_play(f, {"kind": "chaos", "n_requests": 10}), ("kind",)),
    "tournament negative SLO": (lambda f: tournament_play(f, {"kind": "mixed", "n_requests": 10, "slo": {"ttft_s": -1}}),
                                ("slo.ttft_s",)),
    "extension spec with text rates": (lambda f: extension_vad(f, {"rates": "fast"}), ("--spec", "rates")),
    "extension engine block size 0": (lambda f: extension_vad(f, {}, block_size=0), ("--engine", "block_size")),
    "extension engine kappa missing": (lambda f: extension_vad(f, {}, kappa=str(f["dir"] / "absent.json")), ("absent.json",)),
    "fit steptime on a non-parquet file": (lambda f: ["fit", "steptime", "--profile", str(f["steptime"]),
                                                      "--out", str(f["out"] / "fit.json")], ("parquet",)),
    "workload from a missing table": (lambda f: ["workload", "--kind", "librispeech", "--utterances", str(f["dir"] / "no.parquet"),
                                                 "--rate", "5", "--n-requests", "10", "--out", str(f["out"] / "w.parquet")],
                                      ("file not found",)),
}


@pytest.mark.parametrize("argv, named", CLI_CASES.values(), ids=CLI_CASES.keys())
def test_bad_setting_is_rejected(capsys, files, argv, named):
    assert_rejected(capsys, files, argv(files), *named)


def test_collect_on_malformed_json(capsys, files):
    bad = files["dir"] / "run.json"
    bad.write_text('{"policy": "sjf", ')
    assert_rejected(capsys, files, ["collect", str(bad), "--out", str(files["out"] / "all.parquet")], str(bad), "not valid JSON")
    bad.write_text("[1, 2]")
    assert_rejected(capsys, files, ["collect", str(bad), "--out", str(files["out"] / "all.parquet")], "not a run summary")


def test_out_summary_naming_a_directory_leaves_nothing_behind(capsys, files):
    argv = simulate(files)
    argv[argv.index("--out-summary") + 1] = str(files["out"] / "taken")
    (files["out"] / "taken").mkdir()
    rc, _, err = run_cli(capsys, argv)
    assert rc == 2 and err.count("\n") == 1 and "is a directory" in err
    assert [p.name for p in files["out"].iterdir()] == ["taken"]  # no results file, no temporary


def test_a_good_run_writes_both_outputs(capsys, files):
    rc, _, err = run_cli(capsys, simulate(files))
    assert rc == 0, err
    assert sorted(p.name for p in files["out"].iterdir()) == ["run.json", "run.parquet"]
    assert json.loads((files["out"] / "run.json").read_text())["completed"] == N


@pytest.mark.slow
def test_errors_are_one_line_from_the_installed_command_too(files):
    """The console script itself: exit 2 and one line, as in-process."""
    trace_frame(**with_row("arrival_s", 5, np.nan)).to_parquet(files["trace"])
    proc = subprocess.run([sys.executable, "-m", "schedlab.cli", *simulate(files)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "arrival_s" in proc.stderr
    assert not any(files["out"].iterdir())


def test_collect_reads_a_burst_runs_infinite_rate(capsys, files):
    """Summaries record a burst's rate as Infinity: collecting them is not bad input."""
    summary = files["dir"] / "burst.json"
    summary.write_text(json.dumps({"policy": "sjf", "rate": float("inf")}))
    rc, _, err = run_cli(capsys, ["collect", str(summary), "--out", str(files["out"] / "all.parquet")])
    assert rc == 0, err
    assert pd.read_parquet(files["out"] / "all.parquet")["rate"].tolist() == [float("inf")]


def test_a_stopped_job_exits_through_its_context_managers(files):
    """SIGTERM (how Snakemake and SLURM's scancel stop a job) mid-run: the command exits with
    128 + 15 through its context managers (which stop a server it started: `start_server`'s
    `with`), not killed where it stood; no output, whole or partial, is left."""
    n = 400_000
    big = trace_frame().iloc[[0]].loc[np.zeros(n, dtype=int)].reset_index(drop=True)
    big = big.assign(request_id=np.arange(n), arrival_s=np.arange(n) * 0.05)
    big.to_parquet(files["trace"])
    proc = subprocess.Popen([sys.executable, "-m", "schedlab.cli", *simulate(files)], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not _catches_sigterm(proc.pid):  # the handler is in place: the run has begun
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
        time.sleep(0.05)
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 128 + signal.SIGTERM
    assert list(files["out"].iterdir()) == []


def test_a_stop_that_lands_in_a_finalizer_still_stops_the_job():
    """SIGTERM delivered while a finalizer runs (a ``__del__``, a weakref callback: the garbage
    collector runs them anywhere) raised the exit inside it, where Python drops exceptions, and
    the job ran to its end with exit status 0. The exit is raised again outside it."""
    code = """
import os, signal, sys, time
from schedlab import cli
from schedlab.cli import tables

class Finalized:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)  # delivered while this finalizer runs
        time.sleep(0.05)

def work(args):
    Finalized()  # dropped at once: its finalizer runs here
    time.sleep(5)
    print("not stopped")

tables.cmd_schedulers = work
sys.exit(cli.main(["schedulers"]))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM and "not stopped" not in proc.stdout, proc.stderr


def test_a_writer_killed_mid_write_leaves_nothing_once_its_output_is_written_again(files):
    """A writer SIGKILLed inside the atomic writer leaves its temporary (nothing can remove it
    then, and the output itself is untouched); the next write of that output removes it, so a
    run resumed after a hard kill leaves no temporary behind."""
    out = files["out"] / "r.json"
    out.write_text("the previous run's\n")
    killed = ("import os, signal, sys; from schedlab.io import atomic_path\n"
              "with atomic_path(sys.argv[1]) as tmp:\n    tmp.write_text('half')\n    os.kill(os.getpid(), signal.SIGKILL)\n")
    assert subprocess.run([sys.executable, "-c", killed, str(out)], timeout=120).returncode == -signal.SIGKILL
    assert out.read_text() == "the previous run's\n"
    assert len(list(files["out"].glob(".r.json.*.tmp.json"))) == 1
    other = files["out"] / ".r.json.x.json.abcdefgh.tmp.json"  # another output's temporary: not this one's
    other.write_text("")
    from schedlab.io import write_json

    write_json({"completed": 1}, out)
    assert sorted(p.name for p in files["out"].iterdir()) == [other.name, "r.json"]


def _catches_sigterm(pid: int) -> bool:
    """Whether process ``pid`` has a handler for SIGTERM (``SigCgt`` in /proc/<pid>/status)."""
    caught = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("SigCgt"))
    return bool(int(caught.split()[1], 16) >> (signal.SIGTERM - 1) & 1)


# -- outputs: every command that writes -------------------------------------------------------
# Each writing command with valid inputs; ("out", name) is an output file, ("folder", name) an
# output folder, ("in", key) an input (a file of the `files` fixture; "model" is a folder).
SPEC = json.dumps({"kind": "mixed", "n_requests": 10})


def _arena(kappa: bool = False, base: str = "") -> str:
    return json.dumps({"steptime": f"{base}steptime.json", "hardware": "A100-40GB", "model": "whisper-tiny",
                       **({"kappa": f"{base}kappa.json"} if kappa else {})})


O, F = (lambda name: ("out", name)), (lambda name: ("folder", name))
I = lambda key: ("in", key)  # noqa: E731
ENGINE = ["--hardware", "A100-40GB", "--model", "whisper-tiny"]
SLAI = ["--pool", I("pool"), "--steptime", I("steptime")]
WRITERS = {
    "data": ["data", "--out", O("u.parquet")],
    "workload": ["workload", "--kind", "librispeech", "--utterances", I("trace"), "--rate", "5", "9",
                 "--n-requests", "10", "--out", O("w5.parquet"), O("w9.parquet")],
    "profile": ["profile", "--source", "roofline", "--model", "whisper-tiny", "--out", O("p.parquet")],
    "steptime": ["steptime", "--source", "roofline", *ENGINE, "--out", O("s.json")],
    "fit steptime": ["fit", "steptime", "--profile", I("trace"), "--out", O("f.json")],
    "fit engine-steps": ["fit", "engine-steps", "--steps", I("trace"), "--held-out", "5", "--out", O("h.json"),
                         "--out-all", O("a.json")],
    "fit kappa": ["fit", "kappa", "--librispeech", I("trace"), "--out", O("k.json")],
    "fit calibrate": ["fit", "calibrate", "--base", I("steptime"), "--utterances", I("trace"), "--kappa", I("kappa"),
                      "--saturation-rps", "18", *ENGINE, "--out", O("c.json")],
    "fit apply": ["fit", "apply", "--base", I("steptime"), "--calibrated", I("kappa"), "--out", O("c.json")],
    "simulate": ["simulate", "--trace", I("trace"), "--policy", "sjf", "--steptime", I("steptime"), *ENGINE,
                 "--out-results", O("r.parquet"), "--out-summary", O("r.json")],
    "cluster": ["cluster", "--trace", I("trace"), "--replicas", "2", "--router", "round-robin", "--policy", "sjf",
                "--steptime", I("steptime"), *ENGINE, "--out-results", O("r.parquet"), "--out-summary", O("r.json"),
                "--out-replicas", O("replicas.parquet")],
    "cluster-replay": ["cluster-replay", "--servers", "http://127.0.0.1:9", "--trace", I("trace"), "--router",
                       "round-robin", "--model", "tiny-llama", "--scheduler", "fcfs", "--out-results", O("r.parquet"),
                       "--out-summary", O("r.json"), "--out-replicas", O("replicas.parquet")],
    "vllm-run": ["vllm-run", "--trace", I("trace"), "--policy", "fcfs", "--out-results", O("r.parquet"),
                 "--out-summary", O("r.json")],
    "transformers-run": ["transformers-run", "--trace", I("trace"), "--policy", "fcfs", "--out-results", O("r.parquet"),
                         "--out-summary", O("r.json"), "--out-steps", O("steps.parquet")],
    "vllm-serve": ["vllm-serve", "--policy", "fcfs", "--model-folder", I("model"), "--traces", I("trace"),
                   "--rates", "5", "--server-log", O("server.log"), "--out-dir", F("runs")],
    "whisper-files": ["whisper-files", "--model", "whisper-tiny", "--out", F("whisper")],
    "front-end-cost": ["front-end-cost", "--model", "whisper-tiny", "--durations", "1", "2", "--repeats", "1",
                       "--utterances", I("pool"), "--out", O("fe.parquet"), "--out-fit", O("fe.json")],
    "scheduler-cost": ["scheduler-cost", "--trace", I("trace"), "--steptime", I("steptime"), "--hardware", "A100-40GB",
                       "--model", "tiny-llama", "--out", O("sc.parquet"), "--out-fit", O("sc.json")],
    "collect": ["collect", I("steptime"), "--out", O("all.parquet")],
    "slosa pools": ["slosa", "pools", "--chat", O("chat.parquet"), "--code", O("code.parquet")],
    "slosa profile": ["slosa", "profile", "--source", "roofline", "--out", O("p.parquet")],
    "slosa fit": ["slosa", "fit", "--reference", "--out", O("pred.json")],
    "slosa study": ["slosa", "study", "compare", "--predictor", I("steptime"), "--chat", I("pool"), "--code", I("pool"),
                    "--out", O("s.parquet")],
    "ewsjf pools": ["ewsjf", "pools", "--short", O("short.parquet"), "--long", O("long.parquet")],
    "ewsjf steptime": ["ewsjf", "steptime", "--out", O("st.json")],
    "ewsjf calibrate": ["ewsjf", "calibrate", "--base", I("steptime"), "--short", I("pool"), "--long", I("pool"),
                        "--out", O("cal.json")],
    "ewsjf workload": ["ewsjf", "workload", "--kind", "mixed", "--short", I("pool"), "--long", I("pool"),
                       "--n-requests", "10", "--rate", "1", "--out", O("t.parquet")],
    "ewsjf study": ["ewsjf", "study", "tuning", "--steptime", I("steptime"), "--short", I("pool"), "--long", I("pool"),
                    "--out", O("s.parquet"), "--out-params", O("params.json"), "--out-timeline", O("tl.parquet")],
    "ewsjf sharing": ["ewsjf", "sharing", "--base", I("steptime"), "--short", I("pool"), "--long", I("pool"),
                      "--levels", "1", "--n-requests", "10", "--calibration-requests", "10", "--out", O("sh.parquet")],
    "slai lengths": ["slai", "lengths", "--out", O("l.parquet")],
    "slai profile": ["slai", "profile", "--out", O("p.parquet")],
    "slai calibrate": ["slai", "calibrate", "--base", I("steptime"), "--pool", I("pool"), "--out", O("c.json")],
    "slai run": ["slai", "run", "--scheduler", "rad", "--rate", "1", *SLAI, "--out-results", O("r.parquet"),
                 "--out-summary", O("r.json")],
    "slai sweep": ["slai", "sweep", "--scheduler", "rad", "--share", "0.5", "--rates", "1", *SLAI, "--out-dir", F("sweep")],
    "slai scale": ["slai", "scale", "--pool", I("pool"), "--factor", "0.5", "--model", "tiny-llama", "--out", O("s.parquet")],
    "slai serve": ["slai", "serve", "--scheduler", "rad", "--share", "0.5", "--rates", "1", "--pool", I("pool"),
                   "--server-log-dir", F("logs"), "--out-dir", F("served")],
    "slai capacity": ["slai", "capacity", I("trace"), *SLAI, "--out", O("cap.parquet")],
    "slai params": ["slai", "params", *SLAI, "--out", O("params.parquet")],
    "slai routing": ["slai", "routing", "--schedulers", "sarathi-fcfs", "--replicas", "1", *SLAI, "--out", O("r.parquet")],
    "slai throughput": ["slai", "throughput", *SLAI, "--out", O("cap.parquet"), "--out-queue", O("q.parquet")],
    "tournament pool": ["tournament", "pool", "--kind", "azure-code", "--out", O("pool.parquet")],
    "tournament play": ["tournament", "play", "--workload", "w", "--spec", SPEC, "--arena", ("arena", False),
                        "--loads", "0.5", "--entrants", "fcfs", "--pool", "short=pool.parquet", "--out", O("m.parquet")],
    "tournament cluster": ["tournament", "cluster", "--workload", "w", "--spec", SPEC, "--arena", ("arena", False),
                           "--replicas", "2", "--routers", "round-robin", "--loads", "0.5", "--entrants", "fcfs",
                           "--pool", "short=pool.parquet", "--out", O("c.parquet")],
    "tournament table": ["tournament", "table", "--runs", I("trace"), "--out", O("table.parquet")],
    "extension kappa": ["extension", "kappa", "--utterances", I("pool"), "--engine", ("arena", True),
                        "--out-runs", O("runs.parquet"), "--out-quality", O("quality.parquet")],
    "extension vad": ["extension", "vad", "--utterances", I("pool"), "--engine", ("arena", True),
                      "--out-runs", O("runs.parquet"), "--out-accuracy", O("acc.parquet")],
    "extension switching": ["extension", "switching", "--utterances", I("pool"), "--engine", ("arena", True),
                            "--out-dir", F("switching")],
}
#: What a hostile output path can be, for a file and for a folder.
FILE_KINDS = ("device", "FIFO", "socket", "folder", "under a file", "an input", "another output")
FOLDER_KINDS = ("device", "FIFO", "socket", "file", "under a file")


def _cases():
    for name, argv in WRITERS.items():
        slots = [i for i, a in enumerate(argv) if isinstance(a, tuple) and a[0] in ("out", "folder")]
        outputs = [i for i in slots if argv[i][0] == "out"]
        has_input = any(isinstance(a, tuple) and a[0] in ("in", "arena") for a in argv)
        for i in slots:
            for kind in FILE_KINDS if argv[i][0] == "out" else FOLDER_KINDS:
                if (kind == "an input" and not has_input) or (kind == "another output" and len(outputs) < 2):
                    continue
                yield pytest.param(name, i, kind, id=f"{name} {_option(argv, i)} {kind}")


def _hostile(kind: str, path: Path) -> None:
    """Make ``path`` the hostile thing ``kind`` names (device, FIFO, socket, folder, file)."""
    if kind == "device":  # a real character device: /dev/null's numbers, made here (root), where it may be lost
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    elif kind == "FIFO":
        os.mkfifo(path)
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        sock.close()
    elif kind == "folder":
        path.mkdir()
    else:
        path.write_bytes(b"the user's file")


def _state(path: Path):
    """What must not change: the file's type, inode and device numbers, and a regular file's bytes."""
    st = os.lstat(path)
    return stat.S_IFMT(st.st_mode), st.st_ino, st.st_rdev, path.read_bytes() if stat.S_ISREG(st.st_mode) else None


def _option(argv: list, i: int) -> str:
    """The option an argument belongs to (the nearest ``--option`` before it)."""
    return next(a for a in reversed(argv[:i]) if isinstance(a, str) and a.startswith("--"))


def _materialise(command: str, files, base: str = "") -> tuple[list[str], str]:
    """The command's argv with real paths (its inputs named as in ``files``, its outputs under
    ``out/``, all under ``base``), and one of its inputs."""
    argv, an_input = [], None
    for a in WRITERS[command]:
        if isinstance(a, tuple) and a[0] == "arena":
            a, an_input = _arena(a[1], base), an_input or f"{base}steptime.json"
        elif isinstance(a, tuple) and a[0] == "in":
            a = base + ("model" if a[1] == "model" else files[a[1]].name)
            an_input = an_input or (a if not a.endswith("model") else None)
        elif isinstance(a, tuple):
            a = f"{base}out/{a[1]}"
        argv.append(a)
    return argv, an_input


@pytest.mark.slow
@pytest.mark.parametrize("command, slot, kind", list(_cases()))
def test_no_command_writes_over_a_device_fifo_socket_folder_or_input(capsys, files, monkeypatch, command, slot, kind):
    """Every command that writes refuses, before any work and in one line, an output that is a
    device, a FIFO, a socket, a folder where a file is meant (a file where a folder is), a path
    under a file, one of its inputs or another of its outputs; the target is left as it was."""
    if kind == "device" and os.geteuid() != 0:
        pytest.skip("making a device node needs root")
    monkeypatch.chdir(files["dir"])  # short relative paths: a socket's path is limited to 108 bytes
    (files["dir"] / "model").mkdir()
    argv, an_input = _materialise(command, files)
    target = Path(argv[slot])
    if kind == "under a file":
        _hostile("file", Path("out/plain"))
        argv[slot], target = "out/plain/x", Path("out/plain")
    elif kind == "an input":
        argv[slot] = an_input
        target = Path(an_input)
    elif kind == "another output":  # named like another output of the command
        argv[slot] = next(a for j, a in enumerate(argv) if j != slot and str(a).startswith("out/"))
        target = None
    else:
        _hostile(kind, target)
    before = _state(target) if target is not None else None
    listing = sorted(str(p) for p in files["dir"].rglob("*"))
    with time_limit(60):
        rc, out, err = run_cli(capsys, argv)
    assert rc == 2, err
    assert err.startswith("schedlab: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert str(target if target is not None else argv[slot]) in err, err
    if target is not None:
        assert _state(target) == before
    assert sorted(str(p) for p in files["dir"].rglob("*")) == listing  # nothing written, no temporary


def test_every_writing_command_is_in_the_output_table():
    """The table above holds every output option of every command (a new command joins it)."""
    from schedlab.cli import build_parser
    from schedlab.cli_types import OutputFolder, OutputPath

    def options(parser, path=()):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    yield from options(sub, (*path, name))
            elif action.type in (OutputPath, OutputFolder):
                yield " ".join(path), action.option_strings[0]

    table = {(name, _option(argv, i)) for name, argv in WRITERS.items()
             for i, a in enumerate(argv) if isinstance(a, tuple) and a[0] in ("out", "folder")}
    assert set(options(build_parser())) == table


# -- numbers past their bounds, in every command -----------------------------------------------
def _subparser(parser, command: str):
    for word in command.split():
        parser = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[word]
    return parser


#: Values beyond most bounds: not a number, infinite, negative, zero, past any maximum, not whole.
EXTREMES = ("nan", "inf", "-inf", "-1", "0", "1e308", "-1e308", "1e400", "2.5", "1e15")


def _numeric_options():
    from schedlab.cli import build_parser
    from schedlab.cli_types import numbers

    parser = build_parser()
    for command in WRITERS:
        for action in _subparser(parser, command)._actions:
            if isinstance(action.type, numbers):
                bad = [t for t in EXTREMES if not action.type.allows(float(t))
                       or (action.type.cast is int and float(t) != int(float(t)))]
                yield pytest.param(command, action.option_strings[0], bad, id=f"{command} {action.option_strings[0]}")


@pytest.mark.slow
@pytest.mark.parametrize("command, option, values", list(_numeric_options()))
def test_every_number_past_its_bounds_is_refused_where_it_is_read(capsys, files, monkeypatch, command, option, values):
    """Every numeric option of every command (rates, durations, counts, seeds, limits, factors)
    refuses NaN, infinities (but a burst's rate), negatives, zero where it must be positive,
    values past its bound and fractions where it counts: exit 2, one line naming the option,
    nothing written."""
    monkeypatch.chdir(files["dir"])
    (files["dir"] / "model").mkdir()
    argv = _materialise(command, files)[0]
    for text in values:
        rc, out, err = run_cli(capsys, [*argv, option, text])
        assert rc == 2 and err.count("\n") == 1 and option in err and "Traceback" not in err, (text, err)
    assert not any(files["out"].iterdir())


@pytest.mark.slow
def test_values_within_bounds_that_cannot_run_are_refused_before_any_work(files):
    """What passes each option alone but cannot run: more requests than memory holds, checked
    before anything is allocated (each command runs with its address space capped at 6 GiB,
    so that a regression fails here rather than exhausting the machine)."""
    f = files
    utterances = f["dir"] / "utts.parquet"
    pd.DataFrame({"duration_s": [3.0, 8.0], "output_tokens": [10, 30], "text_tokens": [9, 29]}).to_parquet(utterances)
    cases = {
        "1e6 req/s for 1e8 s": (["workload", "--kind", "librispeech", "--utterances", str(utterances), "--rate", "1e6",
                                 "--duration-s", "1e8", "--out", str(f["out"] / "w.parquet")], "requests"),
        "a billion requests": (["ewsjf", "workload", "--kind", "mixed", "--short", str(f["pool"]), "--long", str(f["pool"]),
                                "--n-requests", "1e9", "--rate", "10", "--out", str(f["out"] / "w.parquet")], "memory"),
        "a billion requests per run": (["ewsjf", "study", "load", "--steptime", str(f["steptime"]), "--short", str(f["pool"]),
                                        "--long", str(f["pool"]), "--sizes", "10,1000000000",
                                        "--out", str(f["out"] / "s.parquet")], "memory"),
        "a uniform pool of a billion clips per duration": (["workload", "--kind", "uniform", "--utterances", str(utterances),
                                                            "--rate", "5", "--n-requests", "10", "--clips-per-duration",
                                                            "1e9", "--out", str(f["out"] / "w.parquet")], "memory"),
        "slai at 1e6 req/s for 1e8 s": (slai_run(f, "--duration-s", "1e8") + ["--rate", "1e6"], "requests"),
        "tournament of a billion requests": (tournament_play(f, {"kind": "openchat", "n_requests": 10**9}), "memory"),
    }
    cap = lambda: resource.setrlimit(resource.RLIMIT_AS, (6 * 2**30, 6 * 2**30))  # noqa: E731
    for name, (argv, word) in cases.items():
        proc = subprocess.run([sys.executable, "-m", "schedlab.cli", *argv], capture_output=True, text=True,
                              timeout=120, preexec_fn=cap)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and word in proc.stderr, (name, proc.stderr[-2000:])
    assert not any(f["out"].iterdir())


VLLM_LIMITS = {  # vLLM's SchedulerConfig and encoder budget, in its words
    "tokens below the sequences": ({"--max-num-batched-tokens": "1"}, "tiny-llama",
                                   "max_num_batched_tokens (1) must be greater than or equal to max_num_seqs (256)"),
    "whisper's tokens below its context": ({"--max-num-batched-tokens": "300", "--max-num-seqs": "8"}, "whisper-tiny",
                                           "max_num_batched_tokens (300) is smaller than max_model_len (448)"),
    "whisper's tokens below one encoder input": ({"--max-num-batched-tokens": "1024", "--max-num-seqs": "8"}, "whisper-tiny",
                                                 "max_tokens_per_mm_item (1500) is larger than max_num_batched_tokens (1024)"),
}


@pytest.mark.parametrize("limits, model, message", VLLM_LIMITS.values(), ids=VLLM_LIMITS.keys())
def test_engine_limits_that_vllm_refuses_are_refused_identically_on_every_backend(capsys, files, limits, model, message):
    """`sim` refuses exactly what vLLM's own configuration refuses, with vLLM's message;
    `vllm-sim` and the real engine's commands (vllm-run, here before any engine starts) say
    the same. vLLM itself is asked too: building its scheduler with the same limits fails with
    that message."""
    flags = [x for kv in limits.items() for x in kv]
    errors = [assert_rejected(capsys, files, simulate(files, *flags, backend=b, model=model), message)
              for b in BACKENDS_HERE]
    assert len(set(errors)) == 1
    run = ["vllm-run", "--trace", str(files["trace"]), "--policy", "fcfs", "--model", model,
           "--out-results", str(files["out"] / "r.parquet"), "--out-summary", str(files["out"] / "r.json"), *flags]
    if "--max-num-seqs" not in limits:
        run += ["--max-num-seqs", "256"]
    assert_rejected(capsys, files, run, message)
    if "vllm-sim" in BACKENDS_HERE:
        from schedlab.backends.vllm.build import build_scheduler
        from schedlab.engine import EngineConfig
        from schedlab.latency.catalogue import model_arch

        engine = EngineConfig(max_num_seqs=int(limits.get("--max-num-seqs", 256)),
                              max_num_batched_tokens=int(limits["--max-num-batched-tokens"]),
                              kv_capacity_blocks=1000, encoder_frames=model_arch(model).encoder_frames)
        with pytest.raises(ValueError, match=re.escape(message)):
            build_scheduler(model, engine)


BACKENDS_HERE = ["sim", "vllm-sim"] if importlib.util.find_spec("vllm") else ["sim"]


# -- empty and degenerate inputs ----------------------------------------------------------------
def test_a_trace_without_requests_is_refused_not_summarised_as_nulls(capsys, files):
    trace_frame().iloc[:0].to_parquet(files["trace"])
    assert_rejected(capsys, files, simulate(files), str(files["trace"]), "no requests")


def test_collecting_an_empty_folder_is_refused(capsys, files):
    empty = files["dir"] / "runs"
    empty.mkdir()
    assert_rejected(capsys, files, ["collect", str(empty), "--out", str(files["out"] / "all.parquet")], str(empty),
                    "without run summaries")
    (empty / "run.json").write_text("{}")
    assert_rejected(capsys, files, ["collect", str(empty), "--out", str(files["out"] / "all.parquet")], "not a run summary")


def test_a_paper_c_run_that_measures_nothing_is_refused(capsys, files):
    """No arrival after the warm-up: a summary would be all nulls."""
    assert_rejected(capsys, files, slai_run(files, "--duration-s", "10", "--warmup-s", "9.9") + ["--rate", "0.001"],
                    "warm-up")


POOL_CASES = {
    "empty pool": (pd.DataFrame({"prompt_tokens": [], "output_tokens": []}), "no rows"),
    "prompt of 1e308 tokens": (pd.DataFrame({"prompt_tokens": [1e308], "output_tokens": [10]}), "prompt_tokens"),
    "zero output tokens": (pd.DataFrame({"prompt_tokens": [5], "output_tokens": [0]}), "output_tokens"),
    "fractional tokens": (pd.DataFrame({"prompt_tokens": [5.5], "output_tokens": [3]}), "prompt_tokens"),
}


@pytest.mark.parametrize("pool, named", POOL_CASES.values(), ids=POOL_CASES.keys())
def test_a_bad_length_pool_is_refused_by_every_command_that_reads_one(capsys, files, pool, named):
    pool.to_parquet(files["pool"])
    f = files
    for argv in (slai_run(f), ["slai", "scale", "--pool", str(f["pool"]), "--factor", "0.5", "--model", "tiny-llama",
                               "--out", str(f["out"] / "s.parquet")],
                 ["ewsjf", "workload", "--kind", "mixed", "--short", str(f["pool"]), "--long", str(f["pool"]),
                  "--n-requests", "10", "--rate", "1", "--out", str(f["out"] / "w.parquet")]):
        assert_rejected(capsys, f, argv, str(f["pool"]), named)


UTTERANCE_CASES = {
    "no utterances": ({"duration_s": [], "output_tokens": []}, "no rows"),
    "a clip of 0 s": ({"duration_s": [0.0, 3.0], "output_tokens": [5, 9]}, "duration_s"),
    "a clip of 1e308 s": ({"duration_s": [1e308], "output_tokens": [5]}, "duration_s"),
    "NaN tokens": ({"duration_s": [2.0], "output_tokens": [float("nan")]}, "output_tokens"),
}


@pytest.mark.parametrize("table, named", UTTERANCE_CASES.values(), ids=UTTERANCE_CASES.keys())
@pytest.mark.parametrize("kind", ["librispeech", "uniform"])
def test_a_bad_utterance_table_is_refused(capsys, files, table, named, kind):
    """(A clip of 0 s once looped forever building the uniform pool.)"""
    pd.DataFrame(table).to_parquet(files["pool"])
    with time_limit(60):
        assert_rejected(capsys, files, ["workload", "--kind", kind, "--utterances", str(files["pool"]), "--rate", "5",
                                        "--n-requests", "10", "--out", str(files["out"] / "w.parquet")], named)


# -- another user: unreadable inputs, a package and a home that cannot be written -------------
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def elsewhere():
    """A folder laid out for a user who owns none of it: a copy of the package and inputs it may
    read but not write, a home it cannot make, and a writable ``out`` and ``tmp``. Returns the
    folder, the command prefix that runs as that user (root: ``nobody``, through setpriv; any
    other user: itself, the package made read-only) and the environment."""
    root = Path(tempfile.mkdtemp(prefix="schedlab-elsewhere-"))
    root.chmod(0o755)
    shutil.copytree(ROOT / "src" / "schedlab", root / "pkg" / "schedlab", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("out", "tmp"):
        (root / name).mkdir(mode=0o777)
        (root / name).chmod(0o777)
    (root / "ro").mkdir()
    for folder, _, names in os.walk(root / "pkg"):
        for name in names:
            os.chmod(os.path.join(folder, name), 0o444)
        os.chmod(folder, 0o555)
    (root / "ro").chmod(0o555)
    env = {**os.environ, "HOME": str(root / "ro" / "home"), "TMPDIR": str(root / "tmp"), "PYTHONPATH": str(root / "pkg")}
    for name in ("XDG_CACHE_HOME", "NUMBA_CACHE_DIR"):
        env.pop(name, None)
    prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"] if os.geteuid() == 0 else []
    yield root, prefix, env
    for folder, _, _ in os.walk(root):
        os.chmod(folder, 0o755)
    shutil.rmtree(root)


#: Runs ``schedlab`` command lines (JSON on stdin) in one process and prints, for each, its
#: exit status and what it wrote on stderr.
CASES_SCRIPT = """
import contextlib, io, json, sys
from schedlab.cli import main
out = []
for argv in json.load(sys.stdin):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as e:
            rc = e.code
    out.append([rc, err.getvalue()])
print(json.dumps(out))
"""


def _inputs_of(command: str) -> list[str]:
    return sorted({a[1] for a in WRITERS[command] if isinstance(a, tuple) and a[0] == "in" and a[1] != "model"}
                  | ({"steptime"} if any(isinstance(a, tuple) and a[0] == "arena" for a in WRITERS[command]) else set()))


@pytest.mark.slow
def test_an_unreadable_input_is_one_line_in_every_command_that_reads(elsewhere, files):
    """Each input of each command, made unreadable to the user running it: exit 2, one line
    naming the file, before any work (nothing written)."""
    root, prefix, env = elsewhere
    cases, named = [], []
    for command in WRITERS:
        for key in _inputs_of(command):
            work = root / "work" / f"{command.replace(' ', '_')}-{key}"
            (work / "out").mkdir(parents=True)
            (work / "out").chmod(0o777)
            for name in ("trace", "steptime", "kappa", "pool"):
                shutil.copy(files[name], work / files[name].name)
                (work / files[name].name).chmod(0o644 if name != key else 0o000)
            (work / "model").mkdir()
            cases.append(_materialise(command, files, f"{work}/")[0])
            named.append(str(work / files[key].name))
    proc = subprocess.run([*prefix, sys.executable, "-c", CASES_SCRIPT], input=json.dumps(cases), env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for argv, name, (rc, err) in zip(cases, named, json.loads(proc.stdout)):
        assert rc == 2 and err.count("\n") == 1 and "Permission denied" in err and name in err, (argv, err)
    assert not [p for p in (root / "work").rglob("out/*")]


@pytest.mark.slow
def test_a_package_and_home_that_cannot_be_written_still_run(elsewhere, files):
    """Another user's install and no writable home: numba's kernels cache in a folder that user
    can write (NUMBA_CACHE_DIR, chosen before numba loads) instead of failing with "no locator
    available"; the run completes and its outputs follow that user's umask."""
    root, prefix, env = elsewhere
    for name in ("trace", "steptime", "kappa"):
        shutil.copy(files[name], root / "out" / files[name].name)
        (root / "out" / files[name].name).chmod(0o644)
    out = root / "out"
    argv = ["simulate", "--trace", str(out / "trace.parquet"), "--policy", "sjf", "--steptime", str(out / "steptime.json"),
            "--kappa", str(out / "kappa.json"), "--hardware", "A100-40GB", "--model", "whisper-tiny",
            "--out-results", str(out / "r.parquet"), "--out-summary", str(out / "r.json")]
    proc = subprocess.run(["sh", "-c", 'umask 027 && exec "$@"', "sh", *prefix, sys.executable, "-m", "schedlab.cli",
                           *argv], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((out / "r.json").read_text())["completed"] == N
    assert {stat.S_IMODE((out / f).stat().st_mode) for f in ("r.json", "r.parquet")} == {0o640}
    assert list((root / "tmp").glob("schedlab-numba-*/**/*.nbi"))  # the kernels were cached there


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_outputs_follow_the_umask(capsys, files, umask):
    """Outputs are created as `open` would create them (0666 less the umask), not 0600."""
    old = os.umask(umask)
    try:
        rc, _, err = run_cli(capsys, simulate(files))
        rc2, _, err2 = run_cli(capsys, ["collect", str(files["out"] / "run.json"), "--out", str(files["out"] / "all.parquet")])
    finally:
        os.umask(old)
    assert rc == rc2 == 0, err + err2
    for name in ("run.json", "run.parquet", "all.parquet"):
        assert stat.S_IMODE((files["out"] / name).stat().st_mode) == 0o666 & ~umask, name




@pytest.mark.slow
def test_a_reader_that_stops_early_ends_the_listing_quietly():
    """``schedlab schedulers | head -1`` once head has gone: the listing's writes find no reader
    (a pipe whose read end is closed before the command starts, so that every write fails, not
    only those after the pipe's buffer fills), and it ends with the status a shell gives SIGPIPE
    and no traceback."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        listing = subprocess.run([sys.executable, "-m", "schedlab.cli", "schedulers"], stdout=write_end,
                                 stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)
    assert listing.returncode == 128 + signal.SIGPIPE, listing.stderr
    assert listing.stderr == ""
