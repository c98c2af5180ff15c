"""Memory, work, disk and interrupts: a large allocation or a search the command cannot finish is
refused before it starts, in one line naming the input that sized it and the limit; a full disk
ends a command in one line with nothing half-written left; Ctrl-C ends any command with exit
status 130, one line, no traceback and no output."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from test_hostile import N, assert_rejected, files, run_cli, simulate, trace_frame  # noqa: F401 (a fixture)


# -- memory -----------------------------------------------------------------------------------
def test_the_memory_share_is_a_documented_overridable_limit(capsys, files, monkeypatch):  # noqa: F811
    """SCHEDLAB_MEMORY_SHARE moves the limit; a refusal names the input, the need and the limit."""
    argv = ["workload", "--kind", "librispeech", "--utterances", str(files["pool"]), "--rate", "5",
            "--n-requests", "1000000", "--out", str(files["out"] / "w.parquet")]
    pd.DataFrame({"duration_s": [3.0, 8.0], "output_tokens": [10, 30]}).to_parquet(files["pool"])
    monkeypatch.setenv("SCHEDLAB_MEMORY_SHARE", "1e-9")
    assert_rejected(capsys, files, argv, "--n-requests", "1,000,000 requests", "GiB allowed", "SCHEDLAB_MEMORY_SHARE")
    monkeypatch.setenv("SCHEDLAB_MEMORY_SHARE", "2")
    assert_rejected(capsys, files, argv, "SCHEDLAB_MEMORY_SHARE must be a number in (0, 1]")
    monkeypatch.setenv("SCHEDLAB_MEMORY_SHARE", "0.9")
    argv[argv.index("1000000")] = "1000"
    assert run_cli(capsys, argv)[0] == 0


def test_paper_cs_backlog_is_checked_against_memory_before_it_is_allocated(capsys, files):  # noqa: F811
    """(A backlog of a billion requests attempted gigabytes of arrays, _ArrayMemoryError.)"""
    for command in ("throughput", "routing"):
        assert_rejected(capsys, files, ["slai", command, "--backlog", "1e9", "--pool", str(files["pool"]), "--steptime",
                                 str(files["steptime"]), "--out", str(files["out"] / "t.parquet"),
                                 *(["--out-queue", str(files["out"] / "q.parquet")] if command == "throughput" else [])],
                 "--backlog", "memory")


def test_vad_padding_is_bounded_where_a_clip_keeps_its_meaning(capsys, files):  # noqa: F811
    """(Padding of 1e3 s ran for minutes; larger allocated gigabytes per clip.)"""
    engine = {"steptime": str(files["steptime"]), "hardware": "A100-40GB", "model": "whisper-tiny",
              "kappa": str(files["kappa"])}
    for pad in (1e3, 1e6):
        assert_rejected(capsys, files, ["extension", "vad", "--utterances", str(files["pool"]), "--engine", json.dumps(engine),
                                 "--spec", json.dumps({"max_pad_s": pad}), "--out-runs", str(files["out"] / "r.parquet"),
                                 "--out-accuracy", str(files["out"] / "a.parquet")], "max_pad_s", "60")


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")
def test_vllms_block_pool_is_checked_against_memory_before_it_is_built(capsys, files):  # noqa: F811
    """(2**40 blocks built one Python object each until MemoryError, after 111 s.)"""
    assert_rejected(capsys, files, simulate(files, "--kv-capacity-blocks", str(2**40), backend="vllm-sim"),
             "1,099,511,627,776 KV blocks (--kv-capacity-blocks)", "GiB")


# -- work ---------------------------------------------------------------------------------------
def test_a_mapping_decision_past_what_a_search_finishes_isassert_rejected(capsys, files):  # noqa: F811
    """(`slosa study compare --ns 1000000` ran past 90 s.)"""
    assert_rejected(capsys, files, ["slosa", "study", "compare", "--predictor", str(files["steptime"]), "--chat",
                             str(files["pool"]), "--code", str(files["pool"]), "--ns", "1000000",
                             "--out", str(files["out"] / "s.parquet")], "--ns", "at most 10,000")


def test_a_routing_study_past_the_work_limit_is_refused_before_its_first_cluster(capsys, files):  # noqa: F811
    """(`slai routing --replicas 1024 --factors 100` ran past 90 s.)"""
    assert_rejected(capsys, files, ["slai", "routing", "--schedulers", "sarathi-fcfs", "--routers", "least-requests",
                             "--replicas", "1024", "--factors", "100", "--backlog", "40", "--pool", str(files["pool"]),
                             "--steptime", str(files["steptime"]), "--out", str(files["out"] / "r.parquet")],
             "--replicas", "--factors", "1e+08")


def test_a_saturation_search_past_the_work_limit_is_refused_before_its_first_run():
    """(`ewsjf calibrate --n-requests 2e7` ran past 90 s: some 20 runs of 2e7 requests.)"""
    from schedlab.engine import Arena, EngineConfig
    from schedlab.engine.steptime import StepTimeModel
    from schedlab.errors import SchedlabError
    from schedlab.fit.calibrate import saturation_factor
    from schedlab.limits import SEARCH_RUNS

    n = 10**8 // SEARCH_RUNS + 1
    trace = pd.DataFrame({"request_id": np.arange(n), "arrival_s": np.zeros(n), "prompt_tokens": np.ones(n, np.int64),
                          "output_tokens": np.ones(n, np.int64)})
    arena = Arena(StepTimeModel(0.01, n_prefill_tokens=1e-4), EngineConfig(kv_capacity_blocks=1000))
    started = time.monotonic()
    with pytest.raises(SchedlabError, match="saturation search .* --n-requests.* past the 1e\\+08"):
        saturation_factor(arena, trace, 10.0)
    assert time.monotonic() - started < 5  # refused, not run


# -- a full disk --------------------------------------------------------------------------------
@pytest.fixture
def full_disk(tmp_path):
    """A 64 KiB file system (tmpfs; mounting one needs root): writes past it fail with ENOSPC."""
    mount = tmp_path / "full"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True).returncode:
        pytest.skip("mounting a small file system needs root")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=True)


def test_a_full_disk_ends_a_run_in_one_line_and_leaves_nothing(capsys, files, full_disk):  # noqa: F811
    """(`simulate` ended in OSError: [Errno 28] before.) Its outputs' new folder goes too."""
    n = 3000
    big = trace_frame().iloc[[0]].loc[np.zeros(n, dtype=int)].reset_index(drop=True)
    big.assign(request_id=np.arange(n), arrival_s=np.arange(n) * 0.25).to_parquet(files["trace"])
    argv = simulate(files)
    argv[argv.index("--out-results") + 1] = str(full_disk / "runs" / "r.parquet")
    argv[argv.index("--out-summary") + 1] = str(full_disk / "runs" / "r.json")
    rc, _, err = run_cli(capsys, argv)
    assert rc == 2 and err.count("\n") == 1 and "No space left on device" in err and "r.parquet" in err, err
    assert list(full_disk.iterdir()) == []


def test_a_full_cache_ends_a_command_in_one_line_and_leaves_nothing(capsys, tmp_path, full_disk, monkeypatch):
    """A table the data layer adds to the cache (schedlab.io.cache_entry) on a full disk."""
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / "AzureLLMInferenceTrace_code.csv").write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(f"2023-11-16 18:15:{k % 60:02d}.0,{100 + k},{5 + k % 9}\n"
                                                             for k in range(20000)))
    monkeypatch.setenv("SCHEDLAB_DATA_MIRROR", str(mirror))
    monkeypatch.setenv("SCHEDLAB_DATA_CACHE", str(full_disk / "cache"))
    (full_disk / "cache").mkdir()
    # the chat table is cached already; the code table (20,000 rows) does not fit beside it
    pd.DataFrame({"prompt_tokens": [5], "output_tokens": [3], "source": ["x"]}).to_parquet(
        full_disk / "cache" / "chat_lengths.parquet")
    rc, _, err = run_cli(capsys, ["slosa", "pools", "--chat", str(tmp_path / "c.parquet"), "--code",
                                  str(tmp_path / "d.parquet")])
    assert rc == 2 and err.count("\n") == 1 and "code_lengths.parquet" in err and "No space left" in err, err
    assert sorted(p.name for p in (full_disk / "cache").iterdir()) == ["chat_lengths.parquet"]
    assert not (tmp_path / "c.parquet").exists() and not (tmp_path / "d.parquet").exists()


# -- Ctrl-C ----------------------------------------------------------------------------------
def _caught(pid: int, sig: int) -> bool:
    line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("SigCgt"))
    return bool(int(line.split()[1], 16) >> (sig - 1) & 1)


def _interrupted(argv: list[str], out: Path, wait_s: float = 0.5) -> tuple[int, str]:
    """``schedlab argv`` interrupted (SIGINT, as Ctrl-C sends it) once it is at work."""
    proc = subprocess.Popen([sys.executable, "-m", "schedlab.cli", *argv], stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while not _caught(proc.pid, signal.SIGTERM):  # main() is running: the command has begun
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
        time.sleep(0.05)
    time.sleep(wait_s)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err


def test_ctrl_c_ends_a_command_with_130_in_one_line_and_no_output(files):  # noqa: F811
    n = 400_000
    big = trace_frame().iloc[[0]].loc[np.zeros(n, dtype=int)].reset_index(drop=True)
    big.assign(request_id=np.arange(n), arrival_s=np.arange(n) * 0.05).to_parquet(files["trace"])
    for argv in (simulate(files), ["workload", "--kind", "uniform", "--utterances", str(files["pool"]), "--rate", "5",
                                   "--n-requests", "3000000", "--out", str(files["out"] / "w.parquet")]):
        if argv[0] == "workload":
            pd.DataFrame({"duration_s": [3.0, 8.0], "output_tokens": [10, 30]}).to_parquet(files["pool"])
        rc, err = _interrupted(argv, files["out"])
        assert rc == 130 and err == "schedlab: interrupted\n", (argv[0], rc, err)
        assert list(files["out"].iterdir()) == []


def test_an_interrupted_plug_in_import_is_an_interrupt(tmp_path):
    """(`schedulers` exited 0 when a plug-in's import was interrupted.)"""
    from test_plugins import _env, _fake_plugin

    site, importing = tmp_path / "site", tmp_path / "importing"
    _fake_plugin(site, "sleepy-plugin", "sleepy", f"import pathlib, time\npathlib.Path({str(importing)!r}).touch()\n"
                                                  "time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-m", "schedlab.cli", "schedulers"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_env(site),
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 60
    while not importing.exists():
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and err == "schedlab: interrupted\n" and out == "", (proc.returncode, err)


def test_a_full_disk_ends_data_in_one_line_and_leaves_nothing(capsys, tmp_path, full_disk, monkeypatch):
    """`schedlab data` (the mirror's utterances with their token counts) onto a full disk."""
    rng = np.random.default_rng(0)
    words = np.array(["SPEECH", "WORDS", "HELLO", "TABLE", "MIRROR", "ORANGE", "NUMBER", "QUIET"])
    rows = "".join(f"{k}-1-{k:04d}\t{rng.uniform(2, 20):.3f}\t{' '.join(rng.choice(words, 30))}\n" for k in range(3000))
    (tmp_path / "mirror").mkdir()
    (tmp_path / "mirror" / "librispeech_test_clean.tsv").write_text("utterance_id\tduration_s\ttranscript\n" + rows)
    monkeypatch.setenv("SCHEDLAB_DATA_MIRROR", str(tmp_path / "mirror"))
    monkeypatch.setenv("SCHEDLAB_DATA_CACHE", str(tmp_path / "cache"))
    rc, _, err = run_cli(capsys, ["data", "--out", str(full_disk / "data" / "utterances.parquet")])
    assert rc == 2 and err.count("\n") == 1 and "No space left on device" in err and "utterances.parquet" in err, err
    assert list(full_disk.iterdir()) == []
