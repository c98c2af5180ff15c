"""A job that dies with its pipeline: a server a pipeline job started ends when the Snakemake
process that started the job ends, SIGKILL of that process alone (an out-of-memory kill)
included, and the job with it; a resume never starts a second server for an output while an
earlier one lives; a second run while one works here is one line, not Snakemake's advice to
unlock."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from test_lifeline import SERVER, group_members, kill_groups, wait_until

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

#: A pipeline job as `schedlab vllm-serve` is one: it starts a server for its output (through
#: schedlab's start_server, under a lifeline), records it, and the first time works on until it
#: is stopped; run again, it serves and ends.
JOB = textwrap.dedent("""
    import os, pathlib, signal, sys, time
    from schedlab.backends.served.server import start_server
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))  # as schedlab's main()
    first = not pathlib.Path("started").exists()
    with start_server([sys.executable, "server.py"], log="logs/server.log", timeout_s=120) as server:
        with open("servers.txt", "a") as f:
            f.write(f"{server.proc.pid} {os.getpid()}\\n")
        pathlib.Path("started").touch()
        if first:
            time.sleep(600)
    pathlib.Path(sys.argv[1]).write_text("done\\n")
""")

SNAKEFILE = '''from schedlab.compat.snakemake import release_stale_lock

release_stale_lock(workflow)


rule all:
    input:
        "done.txt",


rule serve:
    output:
        "done.txt",
    shell:
        "{python} job.py {{output}}"
'''


@pytest.fixture
def pipeline(tmp_path):
    (tmp_path / "Snakefile").write_text(SNAKEFILE.format(python=sys.executable))
    (tmp_path / "job.py").write_text(JOB)
    (tmp_path / "server.py").write_text(SERVER)
    (tmp_path / "logs").mkdir()
    return tmp_path


def _env() -> dict:
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}


def _start(folder: Path) -> subprocess.Popen:
    """`snakemake --cores 1` in a session of its own, once its job's server runs."""
    proc = subprocess.Popen(["snakemake", "--cores", "1"], cwd=folder, env=_env(), start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert wait_until(lambda: (folder / "started").exists() or proc.poll() is not None, 180), "no job started"
    assert proc.poll() is None, proc.stderr.read()
    return proc


def _servers(folder: Path) -> list[tuple[int, int]]:
    """(server group, job) of every server the jobs started, in order."""
    return [tuple(map(int, line.split())) for line in (folder / "servers.txt").read_text().splitlines()]


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
def test_a_sigkill_of_snakemake_alone_ends_its_jobs_server_and_the_resume_serves_once(pipeline):
    """(The job, its lifeline and the server ran on under process 1; the plain resume released
    the lock, started a second server beside the orphan, and failed.)"""
    proc = _start(pipeline)
    (group, job), = _servers(pipeline)
    try:
        assert group_members(group) and _alive(job)
        os.kill(proc.pid, signal.SIGKILL)  # the head alone, as an out-of-memory kill
        proc.wait(timeout=60)
        assert wait_until(lambda: not group_members(group) and not _alive(job), 30), (group_members(group), job)
        assert "the pipeline (process" in (pipeline / "logs" / "server.log").read_text()
        resumed = subprocess.run(["snakemake", "--cores", "1"], cwd=pipeline, env=_env(), capture_output=True,
                                 text=True, timeout=300)
        assert resumed.returncode == 0, (resumed.stdout + resumed.stderr)[-3000:]
        assert (pipeline / "done.txt").read_text() == "done\n"
        assert len(_servers(pipeline)) == 2  # the killed run's, then the resume's one
        assert not group_members(_servers(pipeline)[1][0])
    finally:
        kill_groups(proc.pid, *(g for g, _ in _servers(pipeline)))


@pytest.mark.slow
def test_a_second_run_while_one_works_here_is_one_line(pipeline):
    proc = _start(pipeline)
    try:
        second = subprocess.run(["snakemake", "--cores", "1"], cwd=pipeline, env=_env(), capture_output=True,
                                text=True, timeout=300)
        assert second.returncode == 2, (second.stdout + second.stderr)[-3000:]
        errors = [line for line in second.stderr.splitlines() if "error" in line.lower()]
        assert errors == [next(line for line in second.stderr.splitlines() if line.startswith("schedlab: error:"))]
        assert f"another Snakemake run (process {proc.pid})" in errors[0] and "--unlock argument" not in second.stderr
        assert proc.poll() is None and len(_servers(pipeline)) == 1
    finally:
        kill_groups(proc.pid, *(g for g, _ in _servers(pipeline)))


def test_no_second_server_starts_for_an_output_an_earlier_one_still_serves(tmp_path):
    """A job started again for an output (a resume) while the earlier job's server lives: one
    line, and no second server."""
    from schedlab.backends.served.server import start_server
    from schedlab.errors import SchedlabError

    (tmp_path / "server.py").write_text(SERVER)
    log = tmp_path / "server.log"
    earlier = subprocess.Popen([sys.executable, "-c", "import sys, time; from schedlab.backends.served.server import "
                                "start_server; s = start_server([sys.executable, sys.argv[1]], log=sys.argv[2], "
                                "timeout_s=120); print(s.proc.pid, flush=True); time.sleep(600)",
                                str(tmp_path / "server.py"), str(log)], stdout=subprocess.PIPE, text=True,
                               start_new_session=True)
    group = int(earlier.stdout.readline())
    try:
        with pytest.raises(SchedlabError, match=f"still runs \\(process group {group}\\)"):
            start_server([sys.executable, str(tmp_path / "server.py")], log=log, timeout_s=120)
        assert log.read_text().count("$ ") == 1
        os.killpg(earlier.pid, signal.SIGKILL)  # the job killed: its server goes, and with it the lock
        earlier.wait(timeout=60)
        assert wait_until(lambda: not group_members(group), 30)
        with start_server([sys.executable, str(tmp_path / "server.py")], log=log, timeout_s=120):
            pass
    finally:
        kill_groups(earlier.pid, group)
