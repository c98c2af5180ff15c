"""Served engines die with their job: however the job that started a server ends (SIGTERM,
SIGINT, SIGKILL of the job or of its process group), the server and every process it started
go within seconds and its port is free (schedlab.backends.served.lifeline)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

#: A server as `vllm serve` is one: a process that starts another (vLLM's engine core), both
#: in its process group, and answers /health on the --port it is given.
SERVER = textwrap.dedent("""
    import http.server, signal, subprocess, sys
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as vLLM's server sets its own
    port = int(sys.argv[sys.argv.index("--port") + 1])
    core = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()

    http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
""")

#: A job as `schedlab vllm-serve` is one: it starts the server, says where it is, and works on.
JOB = textwrap.dedent("""
    import json, signal, sys, time
    from schedlab.backends.served.server import start_server
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))  # as schedlab's main()
    # interrupted as a job in the foreground is (one started in a shell's background, as this
    # suite may be, inherits SIGINT ignored)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    server = start_server([sys.executable, sys.argv[1]], log=sys.argv[2], timeout_s=120)
    with server:
        print(json.dumps({"group": server.proc.pid, "url": server.url}), flush=True)
        time.sleep(3600)
""")


def group_members(pgid: int) -> list[int]:
    """Live processes of process group ``pgid`` (Linux ``/proc``; zombies are not alive)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(stat.parent.name))
    return members


def port_is_free(port: int) -> bool:
    """Nothing listens on ``port`` and a new server can bind it (as servers do, with
    SO_REUSEADDR: closed connections may still be in TIME_WAIT)."""
    with socket.socket() as s:
        if s.connect_ex(("127.0.0.1", port)) == 0:
            return False
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def lifeline_of(port: int) -> int | None:
    """The pid of the lifeline whose server listens on ``port``, if one runs (Linux ``/proc``)."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
        except OSError:  # gone since the listing
            continue
        if b"schedlab.backends.served.lifeline" in argv and f"{port}".encode() in argv:
            return int(cmdline.parent.name)
    return None


def wait_until(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


def kill(job: subprocess.Popen, how: str) -> None:
    if how == "SIGKILL of the job's process group":  # as `kill -9 -<pgid>` of Snakemake and its jobs
        os.killpg(job.pid, signal.SIGKILL)
    else:
        job.send_signal({"SIGKILL of the job": signal.SIGKILL, "SIGTERM": signal.SIGTERM,
                         "SIGINT": signal.SIGINT}[how])


HOW = ["SIGKILL of the job's process group", "SIGKILL of the job", "SIGTERM", "SIGINT"]


@pytest.mark.slow
@pytest.mark.parametrize("how", HOW)
def test_a_server_and_its_children_end_with_the_job_that_started_it(tmp_path, how):
    (tmp_path / "server.py").write_text(SERVER)
    job = subprocess.Popen([sys.executable, "-c", JOB, str(tmp_path / "server.py"), str(tmp_path / "server.log")],
                           stdout=subprocess.PIPE, text=True, start_new_session=True)
    where = json.loads(job.stdout.readline())
    group, port = where["group"], int(where["url"].rsplit(":", 1)[1])
    try:
        assert len(group_members(group)) == 3  # the lifeline, the server and its "engine core"
        assert not port_is_free(port)
        kill(job, how)
        job.wait(timeout=60)
        assert wait_until(lambda: not group_members(group), 15), group_members(group)
        assert port_is_free(port)
    finally:  # nothing of a failed test left running
        kill_groups(job.pid, group)


def kill_groups(*groups: int) -> None:
    """SIGKILL to every process of each group (nothing of a failed test left running)."""
    for group in groups:
        try:
            os.killpg(group, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.mark.slow
def test_no_server_outlives_a_job_that_ends_as_it_starts_one(tmp_path):
    """The job starts the lifeline and ends at once: the server is not started, or is stopped
    as soon as the lifeline sees its job gone; either way it never gets to run."""
    marker = tmp_path / "served"
    job = (f"import os, subprocess, sys; subprocess.Popen([sys.executable, '-m', 'schedlab.backends.served.lifeline', "
           f"str(os.getpid()), '--', 'sh', '-c', 'sleep 2; touch {marker}']); os._exit(0)")
    subprocess.run([sys.executable, "-c", job], timeout=60)
    time.sleep(5)
    assert not marker.exists()


def test_the_lifeline_passes_on_its_servers_exit_status(tmp_path):
    status = subprocess.run([sys.executable, "-c", "import os, subprocess, sys; sys.exit(subprocess.call(["
                             "sys.executable, '-m', 'schedlab.backends.served.lifeline', str(os.getpid()), '--', 'sh', '-c', "
                             "'exit 7']))"], timeout=60).returncode
    assert status == 7


@pytest.mark.slow
def test_sigkill_of_a_serving_job_leaves_no_vllm_process_and_no_listening_port(tmp_path):
    """`schedlab vllm-serve` (the pipeline's engine job) SIGKILLed with its process group once its
    `vllm serve` answers: the API server, engine core and worker are gone within seconds, and
    the port is free."""
    pytest.importorskip("vllm")
    import httpx

    trace = pd.DataFrame({"request_id": np.arange(4), "arrival_s": np.arange(4) * 30.0, "prompt_tokens": 8,
                          "output_tokens": 4})
    trace.to_parquet(tmp_path / "trace.parquet")
    log = tmp_path / "server.log"
    job = subprocess.Popen(
        [sys.executable, "-m", "schedlab.cli", "vllm-serve", "--policy", "fcfs", "--model", "tiny-llama",
         "--model-folder", str(Path(__file__).resolve().parents[1] / "src" / "schedlab" / "assets" / "models" / "tiny-llama"),
         "--traces", str(tmp_path / "trace.parquet"), "--rates", "0.03", "--server-log", str(log),
         "--out-dir", str(tmp_path / "runs"), "--max-num-seqs", "4", "--max-num-batched-tokens", "512"],
        start_new_session=True, stderr=subprocess.PIPE, text=True)
    assert wait_until(lambda: log.exists() and "--port" in log.read_text(), 120), job.stderr.read()
    port = int(log.read_text().splitlines()[0].rsplit("--port ", 1)[1])
    # The log names the port just before the job starts the lifeline: wait for it to exist.
    assert wait_until(lambda: lifeline_of(port) is not None, 60), job.stderr.read()
    group = lifeline_of(port)

    def healthy() -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        assert wait_until(healthy, 300), log.read_text()[-3000:]
        assert len(group_members(group)) >= 3  # the lifeline, vLLM's API server and its engine core
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(timeout=60)
        assert wait_until(lambda: not group_members(group), 20), (group_members(group), log.read_text()[-3000:])
        assert port_is_free(port)
        assert "the job (process" in log.read_text()
    finally:
        kill_groups(job.pid, group)
