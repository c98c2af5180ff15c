"""The queue-policy protocol, checked as a run calls it: a plug-in whose policy returns a job it
was never given, one that is not waiting, a forged id, raises, or hides its jobs from ``len``
ends the command with exit 2 and one line naming it (distribution and module), on ``sim`` and
``vllm-sim`` alike; a plug-in that tries to take a built-in's name makes asking for that name,
and the registry's listing, fail."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from schedlab.engine import Arena, EngineConfig, run
from schedlab.engine.continuous import ContinuousBatching
from schedlab.engine.steptime import StepTimeModel
from schedlab.policies import Job, KeyedPolicy
from schedlab.policies.contract import CheckedQueue
from schedlab.policies.fcfs import FCFS
from schedlab.policies.hrrn import HRRN
from schedlab.registry import PluginError

#: Broken plug-ins: module -> (what it registers, the scheduler asked for, what the error says).
BROKEN = {
    "keeps": ("""
        from schedlab.policies.fcfs import FCFS
        from schedlab.registry import QUEUE, register

        @register("keeps", kind=QUEUE)
        class Keeps(FCFS):
            name = "keeps"

            def pop(self, now):
                return self.peek(now)  # returned, never removed
        """, "keeps", "broke the scheduler protocol in pop: __len__ says 1 after it, but 0 requests are waiting "
                      "(pushed and not popped) (pop must remove the job it returns: request 0)"),
    "stranger": ("""
        from schedlab.policies import Job
        from schedlab.policies.fcfs import FCFS
        from schedlab.registry import QUEUE, register

        @register("stranger", kind=QUEUE)
        class Stranger(FCFS):
            name = "stranger"

            def peek(self, now):
                return Job(10**6, 0.0, 1.0, 1)  # a job nobody pushed

            pop = peek
        """, "stranger", "broke the scheduler protocol in peek: it returned a job that was never pushed to it "
                         "(request id 1000000, handle None)"),
    "foreign": ("""
        from schedlab.policies import Job
        from schedlab.policies.fcfs import FCFS
        from schedlab.registry import QUEUE, register

        @register("foreign", kind=QUEUE)
        class Foreign(FCFS):
            name = "foreign"

            def peek(self, now):
                j = super().peek(now)  # a waiting request's handle under another id
                return Job(j.request_id + 1000, j.arrival_s, j.size, j.prompt_tokens, j.ref)
        """, "foreign", "broke the scheduler protocol in peek: it returned request id 1000 with the handle of "
                        "request 0"),
    "raising": ("""
        from schedlab.policies import KeyedPolicy
        from schedlab.registry import QUEUE, register

        @register("raising", kind=QUEUE)
        class Raising(KeyedPolicy):
            name = "raising"

            def key(self, job, now):
                return 1 / (job.request_id - 3)
        """, "raising", "failed in push: ZeroDivisionError: division by zero (in key, raising.py line 10)"),
    "clash": ("""
        from schedlab.policies.fcfs import FCFS
        from schedlab.registry import QUEUE, register

        register("fcfs", kind=QUEUE)(type("Mine", (FCFS,), {}))
        """, "fcfs", "scheduler 'fcfs' is claimed by a rejected plug-in: plug-in 'clash' (clash-plugin, clash) failed "
                     "to load: rejected: the name 'fcfs' is taken by schedlab.policies.fcfs (schedlab)"),
}


@pytest.fixture(scope="module")
def broken(tmp_path_factory) -> Path:
    """A site folder holding every broken plug-in, a trace and a step-time model."""
    root = tmp_path_factory.mktemp("broken")
    site = root / "site"
    for module, (source, _, _) in BROKEN.items():
        info = site / f"{module}-plugin-0.1.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}-plugin\nVersion: 0.1\n")
        (info / "entry_points.txt").write_text(f"[schedlab.schedulers]\n{module} = {module}\n")
        (site / f"{module}.py").write_text(textwrap.dedent(source))
    trace = pd.DataFrame({"request_id": np.arange(12), "arrival_s": np.arange(12) * 0.01, "prompt_tokens": 16,
                          "output_tokens": np.resize([4, 20, 9], 12)})
    trace.to_parquet(root / "trace.parquet")
    (root / "step.json").write_text(json.dumps({"intercept": 0.01, "n_prefill_tokens": 1e-5, "n_decode": 1e-4}))
    return root


def _simulate(root: Path, name: str, backend: str, **env) -> subprocess.CompletedProcess:
    environ = {**os.environ, **env, "PYTHONPATH": os.pathsep.join([str(root / "site"), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "schedlab.cli", "simulate", "--backend", backend,
                           "--trace", str(root / "trace.parquet"), "--scheduler", name, "--steptime", str(root / "step.json"),
                           "--hardware", "A100-40GB", "--model", "tiny-llama", "--max-num-seqs", "4",
                           "--kv-capacity-blocks", "64", "--out-results", str(root / f"{name}-{backend}.parquet"),
                           "--out-summary", str(root / f"{name}-{backend}.json")],
                          capture_output=True, text=True, env=environ, timeout=600)


#: Every broken plug-in on sim; inside vLLM's scheduler (vllm-sim) one of each kind of breach: a
#: protocol check failing (keeps; stranger and foreign fail the same checked queue's identity
#: check on peek's answer), an exception from the policy's own code, a rejected registration.
CASES = [*((module, "sim") for module in sorted(BROKEN)),
         *(pytest.param(module, "vllm-sim", marks=pytest.mark.slow) for module in ("clash", "keeps", "raising"))]


@pytest.mark.parametrize(("module", "backend"), CASES)
def test_a_broken_plug_in_ends_the_run_with_one_line_naming_it(broken, module, backend):
    _, name, says = BROKEN[module]
    done = _simulate(broken, name, backend)
    assert done.returncode == 2, done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("schedlab: error:")]
    assert len(errors) == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert f"({module}-plugin, {module})" in errors[0] and says in errors[0], errors[0]
    assert not (broken / f"{name}-{backend}.parquet").exists()  # nothing half-written


@pytest.mark.slow
def test_the_traceback_is_shown_when_asked_for(broken):
    done = _simulate(broken, "raising", "sim", SCHEDLAB_DEBUG="1")
    assert done.returncode == 2
    assert "Traceback" in done.stderr and 'raising.py", line 10, in key' in done.stderr
    assert done.stderr.splitlines()[-1].startswith("schedlab: error: scheduler 'raising' (raising-plugin, raising)")


@pytest.mark.slow
def test_the_listing_fails_while_a_plug_in_is_rejected(broken):
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join([str(broken / "site"), os.environ.get("PYTHONPATH", "")])}
    listed = subprocess.run([sys.executable, "-m", "schedlab.cli", "schedulers"], capture_output=True, text=True,
                            env=environ, timeout=300)
    assert listed.returncode == 2
    assert listed.stderr.strip().splitlines() == [
        "schedlab: error: plug-in 'clash' (clash-plugin, clash) failed to load: rejected: the name 'fcfs' is taken by "
        "schedlab.policies.fcfs (schedlab)"]
    # the plug-ins that load are listed: their faults show only when a run calls them
    assert {"keeps", "stranger", "foreign", "raising"} <= {line.split()[0] for line in listed.stdout.splitlines()}


# -- the checks, in process -------------------------------------------------------------------
def _jobs(n: int) -> list[Job]:
    return [Job(i, float(i), 10.0 - i, 4, ref=i) for i in range(n)]


def _queue(policy, jobs):
    made = {j.ref: j for j in jobs}
    queue = CheckedQueue(policy, lambda job: made.get(job.ref))
    for j in jobs:
        queue.push(j)
    return queue


def test_a_correct_policy_passes_every_check():
    jobs = _jobs(5)
    queue = _queue(FCFS(), jobs)
    assert queue.peek(0.0) is jobs[0] and queue.pop(0.0) is jobs[0]
    queue.remove(jobs[3])
    queue.push(jobs[0])  # preempted: it waits again
    assert [queue.pop(1.0) for _ in range(len(queue))] == [jobs[0], jobs[1], jobs[2], jobs[4]]
    assert queue.victim(jobs[:2], 1.0) is jobs[1]  # FCFS: the newest admitted


def test_pop_must_return_what_peek_did_at_the_same_time():
    class Fickle(FCFS):
        def pop(self, now):
            job = max(self, key=lambda j: j.arrival_s)
            self.remove(job)
            return job

    queue = _queue(Fickle(), _jobs(3))
    queue.peek(0.0)
    with pytest.raises(PluginError, match="in pop: it returned request 2, but peek at the same time returned request 0"):
        queue.pop(0.0)


def test_a_victim_must_be_running():
    class Outsider(FCFS):
        def victim(self, running, now):
            return Job(99, 0.0, 1.0, 1)

    queue = _queue(Outsider(), _jobs(2))
    with pytest.raises(PluginError, match="in victim: it returned request 99, which is not one of the running"):
        queue.victim(_jobs(2), 0.0)


def test_a_policy_that_hides_its_jobs_fails_at_once_instead_of_stalling():
    """A policy whose ``len`` says nothing waits would leave the engine with requests and
    nothing to schedule: the push that hides a job says so."""
    class Hiding(FCFS):
        def __len__(self):
            return 0

    trace = pd.DataFrame({"request_id": [0, 1], "arrival_s": [0.0, 0.5], "prompt_tokens": 4, "output_tokens": 2})
    with pytest.raises(PluginError, match=r"in push: __len__ says 0 after it, but 1 requests are waiting"):
        run(trace, ContinuousBatching(Hiding()), Arena(StepTimeModel(intercept=0.01), EngineConfig()))


def test_a_users_policys_exception_names_it_and_a_built_ins_keeps_its_traceback():
    class Broken(KeyedPolicy):  # not registered: named by its class and module
        def key(self, job, now):
            raise KeyError("x")

    with pytest.raises(PluginError, match=r"scheduler Broken \(test_policy_contract\) failed in "
                                          r"push: KeyError: 'x' \(in key, test_policy_contract.py line \d+\)"):
        _queue(Broken(), _jobs(1))
    # HRRN's ratio of a job of size 0, raised inside schedlab's own code: schedlab's bug, as it is
    with pytest.raises(ZeroDivisionError):
        _queue(HRRN(), _jobs(1)).victim_key(Job(7, 0.0, 0.0, 1), 1.0)
