"""Snakemake's scheduler with one pending wake-up (:mod:`schedlab.compat.snakemake`), in real
Snakemake runs: jobs that end while others wait for cores leave the patched scheduler with a
few threads, where the pinned Snakemake's own wake-up timers pile up one per job; and the
project's Snakefile applies the patch."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
RULE_FILE = ROOT / "workflow" / "rules" / "scheduler.smk"
QUICK_JOBS = 40

# Quick jobs first (priority), one core each; then two jobs that each take both cores, so one
# waits while the other counts the Snakemake process's threads once a second.
TOY = """
{include}
rule all:
    input:
        "a.done",
        "b.done",

rule quick:
    output:
        "q{{i}}.done",
    priority: 10
    shell:
        "touch {{output}}"

rule whole:
    output:
        "{{name}}.done",
    input:
        expand("q{{i}}.done", i=range({n})),
    threads: 2
    shell:
        "for k in 1 2 3; do sleep 1; ls /proc/$PPID/task | wc -l >> threads.txt; done; touch {{output}}"
"""


def _threads_while_waiting(tmp_path: Path, *, patched: bool) -> list[int]:
    work = tmp_path / ("patched" if patched else "plain")
    work.mkdir()
    include = f'include: "{RULE_FILE}"' if patched else ""
    (work / "Snakefile").write_text(TOY.format(include=include, n=QUICK_JOBS))
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    r = subprocess.run(["snakemake", "--cores", "2", "--quiet"], cwd=work, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    return [int(line) for line in (work / "threads.txt").read_text().split()]


@pytest.mark.slow
def test_one_pending_wakeup_keeps_the_scheduler_from_piling_up_timers(tmp_path):
    plain = _threads_while_waiting(tmp_path, patched=False)
    patched = _threads_while_waiting(tmp_path, patched=True)
    # The pinned Snakemake: about one live timer per quick job that ended while others waited.
    assert max(plain) >= QUICK_JOBS // 2, plain
    assert max(patched) <= 12, patched


def test_the_project_snakefile_applies_it():
    includes = [line.split('"')[1] for line in (ROOT / "Snakefile").read_text().splitlines()
                if line.startswith("include:")]
    assert includes[0] == "workflow/rules/scheduler.smk"
