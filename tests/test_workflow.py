"""The workflow as code: `snakemake --lint` and `snakefmt --check` clean, the tiny test
configuration valid and planned, and the DAG built without vLLM or torch."""

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _snakemake(tmp_path, *args, pythonpath=None, config=()):
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), env.get("PYTHONPATH", "")])
    r = subprocess.run(
        ["snakemake", *args, "--config", f"results={tmp_path / 'results'}", *config],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    r.output = r.stdout + r.stderr
    return r


@pytest.mark.slow
def test_lint_is_clean(tmp_path):
    r = _snakemake(tmp_path, "--lint")
    assert r.returncode == 0, r.output[-3000:]
    assert "Lints for" not in r.output, r.output[-3000:]
    assert "your workflow is in a good condition" in r.output


def test_rule_files_are_formatted_with_snakefmt():
    r = subprocess.run([str(BIN / "snakefmt"), "--check", "Snakefile", "workflow"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.slow
def test_test_config_validates_and_plans_every_notebook(tmp_path):
    config = yaml.safe_load((ROOT / ".test" / "config.yaml").read_text())
    schema = yaml.safe_load((ROOT / "src" / "schedlab" / "schemas" / "config.schema.yaml").read_text())
    jsonschema.validate(config, schema)
    r = _snakemake(tmp_path, "-n", "--quiet", "rules", "--configfile", ".test/config.yaml")
    assert r.returncode == 0, r.output[-3000:]
    assert int(re.search(r"^notebook\s+(\d+)\s*$", r.output, re.M).group(1)) == 7


@pytest.mark.slow
def test_dag_builds_without_vllm_or_torch(tmp_path):
    """Building the DAG imports neither engine stack: a `vllm` or `torch` that fails on import
    shadows the installed one, and the dry run still plans every job."""
    for name in ("vllm", "torch"):
        (tmp_path / "shadow" / name).mkdir(parents=True)
        (tmp_path / "shadow" / name / "__init__.py").write_text(f"raise ImportError('{name} imported')\n")
    r = _snakemake(tmp_path, "-n", "--quiet", "rules", pythonpath=tmp_path / "shadow")
    assert r.returncode == 0, r.output[-3000:]
    assert "imported" not in r.output
    assert re.search(r"^vllm_serve\s+\d+\s*$", r.output, re.M)


@pytest.fixture(scope="module")
def engine_dry_run(tmp_path_factory):
    """The shipped config's dry run with backend=vllm, its commands printed."""
    r = _snakemake(tmp_path_factory.mktemp("engine"), "-n", "-p", config=["backend=vllm"])
    assert r.returncode == 0, r.output[-3000:]
    return r


@pytest.mark.slow
def test_engine_simulations_use_step_fits_that_held_their_rate_out(engine_dry_run):
    """Beside every served experiment (the decoder study; paper A's Whisper sweep with
    backend=vllm) the simulators run twice: with the profile's fit and, as `<name>-heldout`,
    each rate with the fit of its own server's steps of every other rate, fitted after the engine
    ran."""
    r = engine_dry_run
    fits = re.findall(r"schedlab fit engine-steps --steps (\S+) --seed (\d+) --held-out ([\d. ]+?) --out (.*?) --out-all",
                      r.output)
    served = {(m.group(1), m.group(2)) for f in fits for m in [re.search(r"runs/vllm/([^/]+)/([^/\s]+)$", f[0])]}
    assert served == {("fidelity-engine", p) for p in ("fcfs", "sjf")} | {
        ("librispeech-engine", p) for p in ("fcfs", "sjf", "hrrn", "adaptive")}  # one fit job per server
    for steps, seed, rates, outs in fits:
        folder = re.search(r"runs/vllm/(\S+)$", steps).group(1)
        assert all(f"fit/steptime/served/{folder}/seed{seed}/" in o for o in outs.split())
        assert [Path(o).stem for o in outs.split()] == [f"without_rate{x}" for x in rates.split()]
    sims = [line for line in r.output.splitlines() if "schedlab simulate" in line]
    held = [line for line in sims if re.search(r"--out-summary \S+-heldout/", line)]
    assert len(held) == 2 * (2 + 4)  # sim and vllm-sim x (decoder study's + Whisper's policies)
    for line in held:
        models = re.search(r"--steptime (.*?) --steptime-fit", line).group(1).split()
        rates = re.search(r"--rate ([\d. ]+?) --seed", line).group(1).split()
        assert [Path(m).stem for m in models] == [f"without_rate{x}" for x in rates]
        experiment, policy = re.search(r"--out-summary \S+/runs/[^/]+/([^/]+)-heldout/([^/]+)/", line).groups()
        seed = re.search(r"--seed (\d+)", line).group(1)
        assert all(f"served/{experiment}/{policy}/seed{seed}/" in m for m in models)  # its own server's fits
        assert "--steptime-fit 'own steps, rate held out'" in line
    profile = [line for line in sims if re.search(r"--out-summary \S+-engine/", line)]
    assert profile and all("--steptime-fit profile" in line for line in profile)


@pytest.mark.slow
def test_each_served_study_replays_its_own_number_of_repeats(engine_dry_run):
    """The decoder study replays every rate `fidelity.engine.repeats` times, paper A's Whisper
    sweep `vllm.repeats` times (the shipped config: 5 and 3)."""
    cfg = yaml.safe_load((ROOT / "config.yaml").read_text())
    r = engine_dry_run
    lines = [line for line in r.output.splitlines() if "schedlab vllm-serve" in line and "/runs/vllm/" in line]
    serves = [re.search(r"--policy (\S+) .*?--out-dir \S+/runs/vllm/([^/]+)/", line).groups() for line in lines]
    repeats = [int(re.search(r"--repeats (\d+)", line).group(1)) for line in lines]
    assert len(serves) == len(repeats) == 2 + 4
    want = {"fidelity-engine": cfg["fidelity"]["engine"]["repeats"], "librispeech-engine": cfg["vllm"]["repeats"]}
    assert want == {"fidelity-engine": 5, "librispeech-engine": 3}
    assert all(n == want[experiment] for (_, experiment), n in zip(serves, repeats))


@pytest.mark.slow
def test_paper_b_runs_on_the_engine_scaled_to_the_local_one(engine_dry_run):
    """Paper B's mixed workload on the real engine: one trace with prompts scaled by the ratio
    of the KV caches, one server per configured policy with the paper's 256 sequences and its
    prefill budget scaled alike, and sim with the FCFS server's steps' fit and the same limits."""
    from schedlab.backends.vllm.engine import LaunchSpec, cpu_kv_capacity_blocks
    from schedlab.ewsjf.scaled import scaled_engine
    from schedlab.ewsjf.studies import engine_limits
    from schedlab.latency.catalogue import hardware, model_arch

    cfg = yaml.safe_load((ROOT / "config.yaml").read_text())
    spec = LaunchSpec(model=cfg["vllm"]["model"], kv_cache_gib=cfg["vllm"]["kv_cache_gib"])
    scaled = scaled_engine(engine_limits(hardware(cfg["ewsjf"]["hardware"]), model_arch(cfg["ewsjf"]["model"])),
                           cpu_kv_capacity_blocks(spec) * spec.block_size)
    out = engine_dry_run.output
    trace = re.findall(r"schedlab workload --kind mixed .*?--prompt-scale (\S+) --out (\S+/ewsjf/engine/trace.parquet)", out)
    assert len(trace) == 1 and float(trace[0][0]) == pytest.approx(scaled.prompt_scale)
    serves = re.findall(r"schedlab vllm-serve --policy (\S+) .*?--traces (\S+) .*?--max-num-seqs (\d+) "
                        r"--max-num-batched-tokens (\d+) .*?--out-dir \S+/ewsjf/engine/vllm/(\S+)", out)
    policies = cfg["ewsjf"]["engine"]["policies"]
    assert sorted(s[0] for s in serves) == sorted(policies) and all(s[0] == s[4] for s in serves)
    assert {(s[1], int(s[2]), int(s[3])) for s in serves} == {(trace[0][1], 256, scaled.max_num_batched_tokens)}
    sims = re.findall(r"schedlab simulate --backend sim --policy (\S+) --trace (\S+) --steptime (\S+ewsjf/engine/"
                      r"fcfs_steps.json) .*?--max-num-seqs 256 --max-num-batched-tokens (\d+)", out)
    assert sorted(s[0] for s in sims) == sorted(policies)
    assert {(s[1], int(s[3])) for s in sims} == {(trace[0][1], scaled.max_num_batched_tokens)}
    assert re.search(r"schedlab fit engine-steps --steps \S+/ewsjf/engine/vllm/fcfs --out-all \S+fcfs_steps.json", out)


# -- resuming after a hard kill ---------------------------------------------------------------
#: A workflow using the pipeline's own mechanism (the Snakefile's first lines, and the default
#: profile that `make reproduce`'s plain `snakemake --cores all` loads): one job that, the first
#: time, marks that it started and then runs until it is killed.
TINY = '''from schedlab.compat.snakemake import release_stale_lock

release_stale_lock(workflow)


rule all:
    input:
        "done.txt",


rule slow:
    output:
        "done.txt",
    shell:
        "if [ ! -e started ]; then touch started; sleep 600; fi; echo done > {output}"
'''


@pytest.fixture
def tiny(tmp_path):
    (tmp_path / "Snakefile").write_text(TINY)
    shutil.copytree(ROOT / "profiles" / "default", tmp_path / "profiles" / "default")
    return tmp_path


def _start(folder: Path) -> subprocess.Popen:
    """`snakemake --cores 1` in its own process group, once its job has started."""
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.Popen(["snakemake", "--cores", "1"], cwd=folder, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (folder / "started").exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
        time.sleep(0.1)
    assert any((folder / ".snakemake" / "locks").iterdir())
    return proc


def _resume(folder: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    r = subprocess.run(["snakemake", "--cores", "1"], cwd=folder, env=env, capture_output=True, text=True, timeout=300)
    r.output = r.stdout + r.stderr
    return r


@pytest.mark.slow
def test_the_plain_command_resumes_after_a_sigkill_without_unlocking(tiny):
    """SIGKILL of Snakemake's whole process group mid-job leaves its lock; the same command
    again releases it (no other Snakemake works in the folder) and redoes the cut-off job."""
    proc = _start(tiny)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    assert any((tiny / ".snakemake" / "locks").iterdir())  # a dead run's lock
    r = _resume(tiny)
    assert r.returncode == 0, r.output[-3000:]
    assert "Released the lock of a Snakemake run that is no longer running" in r.output
    assert (tiny / "done.txt").read_text() == "done\n"
    assert not (tiny / ".snakemake" / "locks").exists() or not any((tiny / ".snakemake" / "locks").iterdir())


@pytest.mark.slow
def test_a_second_snakemake_is_still_refused_while_one_runs(tiny):
    """While a Snakemake works in the folder its lock is kept: a second one refuses to start."""
    proc = _start(tiny)
    try:
        r = _resume(tiny)
        assert r.returncode != 0, r.output[-3000:]
        assert "LockException" in r.output or "cannot be locked" in r.output, r.output[-3000:]
        assert "Released the lock" not in r.output
        assert proc.poll() is None and any((tiny / ".snakemake" / "locks").iterdir())
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
