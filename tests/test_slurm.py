"""The SLURM path: the two lines of docs/getting-started.md, verbatim. `profiles/slurm/single-node.sh` starts a
one-machine cluster (or finds it up), then `snakemake ... --workflow-profile profiles/slurm`
runs paper B's chain of the tiny configuration through it on a synthetic mirror: trace pools
from the Azure and Mooncake tables -> step-time fit -> calibration -> tuning -> the studies
(simulations) -> the notebook render, eleven SLURM jobs (the sharing study among them).

Why a chain and not the whole tiny pipeline: through SLURM each job pays its submission,
a Snakemake start inside the job (~8 s here) and the wait for the next status query (the
profile asks 10 s after a job ends, 10 s more each time none has), and a whole-machine
engine job holds the queue until both cores are free. The tiny pipeline's 97 jobs, ~5
minutes locally (tests/test_pipeline.py), took 19 minutes through this cluster on 2 cores,
past what `make test` may spend. One chain from data to a rendered notebook exercises what
the executor adds (sbatch with the profile's partition, runtime, memory and CPUs; job states
from squeue; outputs handed from job to job; a rule run as a Python script) in ~3 minutes.

That the jobs really ran in SLURM: every rule is reported submitted with a SLURM job id, and
each of those ids is in the cluster's job-completion log, COMPLETED, under this run's job name. Skipped only where the cluster cannot be started for want of root
or apt-get; any other failure fails. Jobs that an earlier run of this test left in the
cluster are cancelled first, and this run's own when it ends.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from test_pipeline import EWSJF_FIGURES, workflow_copy

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
#: The rules of the chain, every one submitted to SLURM.
REMOTE_RULES = {"ewsjf_pools", "ewsjf_steptime", "ewsjf_calibrate", "ewsjf_tuning", "ewsjf_study",
                "ewsjf_starvation", "ewsjf_sharing", "notebook"}


#: The page that gives the two lines.
GUIDE = REPO / "docs" / "getting-started.md"


def guide_line(start: str) -> str:
    """The guide's one line (indented or not) that starts with ``start``."""
    lines = [line.strip() for line in GUIDE.read_text().splitlines() if line.strip().startswith(start)]
    assert len(lines) == 1, f"{GUIDE.name} has exactly one line starting {start!r}: {lines}"
    return lines[0]


#: The cluster's daemons, by process name, and the service that runs each (stopped in this order).
DAEMONS = {"slurmd": "slurmd", "slurmctld": "slurmctld", "munged": "munge"}


def _running(process: str) -> bool:
    return subprocess.run(["pgrep", "-x", process], capture_output=True).returncode == 0


#: Part of the working folder of every run of the test below (pytest names it after the test).
TEST_DIR_MARK = "test_the_tiny_chain_runs_throu"


def _cancel_jobs(select) -> None:
    """Cancel the cluster's unfinished jobs whose working folder ``select`` accepts."""
    r = subprocess.run(["squeue", "--noheader", "--format=%i|%Z", "--states=PENDING,RUNNING,SUSPENDED,CONFIGURING"],
                       capture_output=True, text=True, timeout=60)
    ids = [job for job, _, workdir in (line.partition("|") for line in r.stdout.splitlines()) if select(workdir)]
    if ids:
        subprocess.run(["scancel", *ids], capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def slurm_cluster(machine_slurm):
    """The guide's setup line, from the checkout: a single-node cluster, up and idle. The
    daemons it started are stopped after the module's tests (a cluster found up stays up)."""
    found_up = {process for process in DAEMONS if _running(process)}
    setup = guide_line("profiles/slurm/single-node.sh")
    r = subprocess.run(shlex.split(setup), cwd=REPO, capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        _stop_daemons(found_up)  # those a failed setup started
        if os.geteuid() != 0 or shutil.which("apt-get") is None:
            pytest.skip(f"no SLURM cluster and none can be started here (needs root and apt-get): {r.stderr.strip()}")
        pytest.fail(f"{setup} failed: {r.stdout[-2000:]}{r.stderr[-2000:]}")
    # Jobs an earlier run of this test left queued or running (its Snakemake killed, the
    # cluster restarted under it) would hold the node's CPUs until their time limit.
    _cancel_jobs(lambda workdir: TEST_DIR_MARK in workdir)
    yield
    _stop_daemons(found_up)
    assert not [process for process in DAEMONS if process not in found_up and _running(process)]


def _stop_daemons(found_up: set[str]) -> None:
    """Stop the cluster's daemons that were not running before (``found_up``), each one gone
    before the next is stopped: `service ... stop` can return while the daemon is still
    shutting down (slurmctld saves its state first)."""
    for process, service in DAEMONS.items():
        if process not in found_up:
            subprocess.run(["service", service, "stop"], capture_output=True, timeout=120)
            deadline = time.monotonic() + 30
            while _running(process) and time.monotonic() < deadline:
                time.sleep(0.2)


def test_the_tiny_chain_runs_through_slurm(slurm_cluster, tmp_path):
    work, env = workflow_copy(tmp_path)
    command = guide_line("snakemake results/notebooks/ewsjf.html --workflow-profile profiles/slurm")
    try:
        proc = subprocess.run(shlex.split(command), cwd=work, env=env, capture_output=True, text=True, timeout=1200)
    finally:  # a run that fails or times out leaves no job behind
        _cancel_jobs(lambda workdir: workdir == str(work))
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-6000:]

    # Every remote job went to SLURM; SLURM recorded each, completed, under this run's name.
    run_id = re.search(r"SLURM run ID: (\S+)", log).group(1)
    submitted = dict(re.findall(r"has been submitted with SLURM jobid (\d+) \(log: \S*/rule_(\w+?)/", log))
    assert set(submitted.values()) == REMOTE_RULES, submitted
    assert len(submitted) == 11, submitted
    sacct = subprocess.run(
        ["sacct", "--completion", "--noheader", "--parsable2", "--format=JobIDRaw,JobName,State",
         "--jobs", ",".join(submitted)],
        capture_output=True, text=True, timeout=60,
    )
    assert sacct.returncode == 0, sacct.stderr
    records = {tuple(line.split("|")) for line in sacct.stdout.splitlines()}
    for job_id in submitted:
        assert (job_id, run_id, "COMPLETED") in records, (job_id, sacct.stdout)

    results = work / yaml.safe_load((REPO / ".test" / "config.yaml").read_text())["results"]
    assert (results / "notebooks" / "ewsjf.html").stat().st_size > 10_000
    for fig in EWSJF_FIGURES:
        assert (results / "figures" / "ewsjf" / f"{fig}.png").stat().st_size > 0
    queues = pd.read_parquet(results / "ewsjf" / "study" / "queues-mixed.parquet")
    # one row per method on each of the tiny config's trace seeds, methods in the study's order
    assert sorted(queues["seed"].unique()) == [0, 1]
    for _, by_seed in queues.groupby("seed"):
        assert by_seed["method"].tolist() == ["fcfs", "kmeans-5", "kmeans-10", "kmeans-30", "ewsjf"]
    assert (queues["completed"] == 400).all()
