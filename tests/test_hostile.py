"""Hostile input at the command line: each bad input below ends with exit status 2, one line
on stderr naming the problem, no traceback, and no output file left behind."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from schedlab.cli import main

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


def _catches_sigterm(pid: int) -> bool:
    """Whether process ``pid`` has a handler for SIGTERM (``SigCgt`` in /proc/<pid>/status)."""
    caught = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("SigCgt"))
    return bool(int(caught.split()[1], 16) >> (signal.SIGTERM - 1) & 1)
