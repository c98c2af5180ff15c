"""Pipeline configuration: the JSON schema, and Snakemake's checks on a dry run."""

import copy
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "src" / "schedlab" / "schemas" / "config.schema.yaml"


@pytest.fixture(scope="module")
def config() -> dict:
    return yaml.safe_load((ROOT / "config.yaml").read_text())


@pytest.fixture(scope="module")
def validator():
    schema = yaml.safe_load(SCHEMA.read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def test_shipped_config_validates(config, validator):
    errors = list(validator.iter_errors(config))
    assert not errors, [e.message for e in errors]
    assert config["asr"]["experiments"]["burst"]["rates"] == [math.inf]


def _negative_rate(c):
    c["asr"]["experiments"]["librispeech"]["rates"][2] = -3
    return ["asr", "experiments", "librispeech", "rates", 2]


def _zero_rate(c):
    c["asr"]["experiments"]["medium"]["rates"].append(0)
    return ["asr", "experiments", "medium", "rates", len(c["asr"]["experiments"]["medium"]["rates"]) - 1]


def _both_lengths(c):
    c["asr"]["workloads"]["librispeech"]["duration_s"] = 100
    return ["asr", "workloads", "librispeech"]


def _neither_length(c):
    del c["asr"]["workloads"]["burst"]["n_requests"]
    return ["asr", "workloads", "burst"]


def _unknown_top_key(c):
    c["seed"] = 3
    return []


def _unknown_nested_key(c):
    c["asr"]["engine"]["max_batch"] = 8
    return ["asr", "engine"]


def _gpu_util_above_one(c):
    c["asr"]["engine"]["gpu_memory_utilization"] = 1.05
    return ["asr", "engine", "gpu_memory_utilization"]


def _missing_section(c):
    del c["profile"]
    return []


def _backend_not_a_name(c):
    c["backend"] = "../vllm"
    return ["backend"]


def _ewsjf_zero_trial(c):
    c["ewsjf"]["tuning"]["trial_s"] = 0
    return ["ewsjf", "tuning", "trial_s"]


def _nan_rate(c):
    c["asr"]["experiments"]["medium"]["rates"] = [math.nan]
    return ["asr", "experiments", "medium", "rates", 0]


def _infinite_fidelity_rate(c):  # a burst's .inf is an asr experiment's rate only
    c["fidelity"]["engine"]["rates"][1] = math.inf
    return ["fidelity", "engine", "rates", 1]


def _nan_share(c):
    c["slai"]["shares"][0] = math.nan
    return ["slai", "shares", 0]


def _nan_warmup(c):
    c["slai"]["warmup_s"] = math.nan
    return ["slai", "warmup_s"]


def _nan_gpu_util(c):
    c["asr"]["engine"]["gpu_memory_utilization"] = math.nan
    return ["asr", "engine", "gpu_memory_utilization"]


def _infinite_duration(c):
    c["extensions"]["vad"]["duration_s"] = math.inf
    return ["extensions", "vad", "duration_s"]


def _rate_of_1e308(c):
    c["ewsjf"]["load"]["rates"].append(1e308)
    return ["ewsjf", "load", "rates", len(c["ewsjf"]["load"]["rates"]) - 1]


def _negative_infinite_max_pad(c):
    c["extensions"]["vad"]["max_pad_s"] = -math.inf
    return ["extensions", "vad", "max_pad_s"]


def _nan_slo_target(c):
    c["tournament"]["workloads"][next(iter(c["tournament"]["workloads"]))]["slo"] = {"ttft_s": math.nan}
    return ["tournament", "workloads", next(iter(c["tournament"]["workloads"])), "slo", "ttft_s"]


def _seed_of_1e30(c):
    c["seeds"] = [10**30]
    return ["seeds", 0]


@pytest.mark.parametrize(
    "mutate",
    [
        _negative_rate,
        _zero_rate,
        _both_lengths,
        _neither_length,
        _unknown_top_key,
        _unknown_nested_key,
        _gpu_util_above_one,
        _missing_section,
        _backend_not_a_name,
        _ewsjf_zero_trial,
        _nan_rate,
        _infinite_fidelity_rate,
        _nan_share,
        _nan_warmup,
        _nan_gpu_util,
        _infinite_duration,
        _rate_of_1e308,
        _negative_infinite_max_pad,
        _nan_slo_target,
        _seed_of_1e30,
    ],
)
def test_mutated_config_is_rejected_where_it_is_wrong(config, validator, mutate):
    bad = copy.deepcopy(config)
    where = mutate(bad)
    errors = list(validator.iter_errors(bad))
    assert errors, f"{mutate.__name__} was accepted"
    assert [list(e.absolute_path) for e in errors] == [where]


def test_gpu_util_of_exactly_one_is_allowed(config, validator):
    ok = copy.deepcopy(config)
    ok["asr"]["engine"]["gpu_memory_utilization"] = 1
    assert not list(validator.iter_errors(ok))


# -- Snakemake dry runs -----------------------------------------------------------------------
def _snakemake() -> str:
    exe = Path(sys.executable).parent / "snakemake"
    if exe.exists():
        return str(exe)
    found = shutil.which("snakemake")
    if found is None:
        pytest.skip("snakemake (the `pipeline` extra) is not installed")
    return found


def _dry_run(*args) -> subprocess.CompletedProcess:
    r = subprocess.run(
        [_snakemake(), "-n", "--cores", "1", *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    r.output = r.stdout + r.stderr
    return r


def _write(tmp_path, cfg) -> Path:
    # Results go to tmp_path so the dry run does not depend on (or touch) the checkout's results/.
    cfg = copy.deepcopy(cfg)
    cfg["results"] = str(tmp_path / "results")
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.mark.slow
def test_dry_run_of_shipped_config_plans_the_whole_sweep(config, tmp_path):
    r = _dry_run("--config", f"results={tmp_path / 'results'}")
    assert r.returncode == 0, r.output[-3000:]
    assert "Using workflow specific profile profiles/default" in r.output  # found without --profile
    asr, fid, seeds = config["asr"], config["fidelity"], config["seeds"]
    # Simulated runs as (backend, experiment, policy, rate, seed): the paper A sweep on sim,
    # the fidelity points on sim and vllm-sim, and the engine fidelity runs on both simulators.
    # Paper A's sweep on its own seeds (asr.seeds), the rest on the configured seeds.
    runs = {
        ("sim", name, p, r, s)
        for name, e in asr["experiments"].items() for p in asr["policies"] for r in e["rates"] for s in asr["seeds"]
    }
    runs |= {
        (b, fid["asr"]["experiment"], p, r, s)
        for b in ("sim", "vllm-sim") for p in fid["policies"] for r in fid["asr"]["rates"] for s in seeds
    }
    engine = {(p, r, s) for p in fid["policies"] for r in fid["engine"]["rates"] for s in seeds}
    # ... once with the engine profile's step fit, once with the fits of its own served steps
    runs |= {(b, f"fidelity-engine{fit}", *k) for b in ("sim", "vllm-sim") for k in engine for fit in ("", "-heldout")}
    # One simulation job per (backend, experiment, policy, seed) sweeps its rates; one trace
    # job per (workload, seed) writes every rate's trace.
    stats = r.output[r.output.index("Job stats"):]
    stats = stats[: stats.index("\ntotal")]  # the dry run prints the table twice
    jobs = lambda prefix: sum(int(n) for n in re.findall(rf"^{prefix}\S*\s+(\d+)\s*$", stats, re.M))
    assert jobs("simulate_") == len({run[:3] + run[4:] for run in runs})
    workload = lambda name: asr["experiments"][name]["workload"] if name in asr["experiments"] else fid["engine"]["workload"]
    assert jobs("workload_") == len({(workload(run[1]), run[4]) for run in runs})
    # The engine: one `vllm serve` job per policy, replaying every rate and repeat.
    m = re.search(r"^vllm_serve\s+(\d+)\s*$", r.output, re.M)
    assert m, r.output[-3000:]
    assert int(m.group(1)) == len(fid["policies"])
    # Paper B on the real engine: its trace, one server and one sim run per policy, the FCFS
    # server's step fit.
    b = len(config["ewsjf"]["engine"]["policies"])
    assert [jobs(f"ewsjf_engine_{r}") for r in ("trace", "serve", "fit", "simulate")] == [1, b, 1, b]
    # Beside paper A's sweep on its seeds, the plan stays small.
    total = int(re.search(r"^total\s+(\d+)\s*$", r.output, re.M).group(1))
    assert total - jobs("simulate_") - jobs("workload_") - jobs("ewsjf_engine_") < 130
    assert not (tmp_path / "results").exists()  # a dry run writes nothing


@pytest.mark.slow
def test_dry_run_rejects_a_schema_violation(config, tmp_path):
    bad = copy.deepcopy(config)
    bad["asr"]["engine"]["gpu_memory_utilization"] = 1.5
    r = _dry_run("--configfile", _write(tmp_path, bad))
    assert r.returncode != 0
    assert "gpu_memory_utilization" in r.output
    assert "1.5 is greater than the maximum of 1" in r.output


def _enums(node):
    """Every value an ``enum`` of the schema lists."""
    if isinstance(node, dict):
        yield from node.get("enum", [])
        for value in node.values():
            yield from _enums(value)
    elif isinstance(node, list):
        for value in node:
            yield from _enums(value)


def test_the_schema_names_no_scheduler_and_no_workload_kind():
    """Scheduler names and workload kinds are checked against the registry, never listed in the
    schema, so a plug-in's schedulers and kinds need no schema edit."""
    from schedlab import registry

    listed = set(_enums(yaml.safe_load(SCHEMA.read_text())))
    assert not listed & set(registry.names()) and not listed & set(registry.workload_names())


@pytest.mark.parametrize("mutate, message", [
    (lambda c: c["asr"]["workloads"]["burst"].update(kind="openchat"),
     "config: asr.workloads.burst: workload kind 'openchat' makes llm requests, not asr"),
    (lambda c: c["tournament"]["workloads"]["mixed"].update(kind="bursty"),
     "config: tournament: tournament workload 'mixed': unknown workload kind 'bursty'; known: azure-code"),
    (lambda c: c["tournament"]["workloads"]["openchat"].update(share=1.5),
     "config key tournament.workloads.openchat.share: Input should be less than or equal to 1 (got 1.5)"),
    (lambda c: c["extensions"]["switching"]["phases"][0].update(pool="mooncake"),
     "config: extensions: switching.phases[0].pool: workload kind 'mooncake' makes llm requests, not asr"),
], ids=["asr-kind", "tournament-kind", "tournament-parameter", "switching-pool"])
@pytest.mark.slow
def test_dry_run_checks_workload_kinds_and_their_parameters_against_the_registry(config, tmp_path, mutate, message):
    bad = copy.deepcopy(config)
    mutate(bad)
    r = _dry_run("--configfile", _write(tmp_path, bad))
    assert r.returncode == 2 and message in r.output, r.output[-2000:]


@pytest.mark.parametrize("section, name, message", [
    (("asr", "policies"), "lifo", "asr.policies: unknown scheduler 'lifo'; known: fcfs"),
    (("asr", "policies"), "sarathi-fcfs", "asr.policies: scheduler 'sarathi-fcfs' has no meaning on asr workloads"),
    (("vllm", "asr", "policies"), "sarathi-fcfs", "vllm.asr.policies: scheduler 'sarathi-fcfs' is a batch builder, not a queue"),
    (("tournament", "entrants"), "lifo", "tournament: entrants: unknown scheduler 'lifo'"),
    (("slai", "routing", "routers"), "nearest", "slai: routing.routers: unknown router 'nearest'; known: random"),
    (("transformers", "held_out"), "sarathi-fcfs", "transformers: held_out: scheduler 'sarathi-fcfs' is a batch builder"),
    (("transformers", "held_out"), "slo-sa", "transformers: held_out: 'slo-sa' plans with a step-time model"),
])
@pytest.mark.slow
def test_dry_run_checks_scheduler_names_against_the_registry(config, tmp_path, section, name, message):
    bad = copy.deepcopy(config)
    node = bad
    for key in section:
        node = node[key]
    node.append(name)
    r = _dry_run("--configfile", _write(tmp_path, bad))
    assert r.returncode != 0
    assert message in r.output, r.output[-2000:]


@pytest.mark.parametrize("backend, message", [
    ("vllm-gpu", "backend: unknown backend 'vllm-gpu'; known: sim, vllm-sim, vllm"),
    ("transformers-sim", "backend: backend 'transformers-sim' runs no batch scheduler; choose sim, vllm-sim, vllm"),
])
@pytest.mark.slow
def test_dry_run_checks_the_backend_against_the_registry(config, tmp_path, backend, message):
    """The config's backend is a registered one that runs paper C's batch builders too, checked
    before any job in one line."""
    bad = copy.deepcopy(config)
    bad["backend"] = backend
    r = _dry_run("--configfile", _write(tmp_path, bad))
    assert r.returncode == 2 and message in r.output, r.output[-2000:]
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("mutate, key, message", [
    (_nan_rate, "asr.experiments.medium.rates[0]", "must be a number, not NaN"),
    (_infinite_fidelity_rate, "fidelity.engine.rates[1]", "inf is greater than the maximum"),
], ids=["nan rate", "inf rate"])
@pytest.mark.slow
def test_a_config_error_is_one_line_naming_the_key_before_any_job(config, tmp_path, mutate, key, message):
    """A NaN rate once passed the schema and planned `ratenan` files; every config error ends
    the run before any job in one line naming the key (exit 2), not a multi-line WorkflowError."""
    bad = copy.deepcopy(config)
    mutate(bad)
    r = _dry_run("--configfile", _write(tmp_path, bad))
    assert r.returncode == 2, r.output[-3000:]
    (line,) = [ln for ln in r.stderr.splitlines() if ln.startswith("schedlab: error:")]
    assert line == f"schedlab: error: config key {key}: " + line.split(": ", 3)[-1] and message in line, line
    assert "Traceback" not in r.output and "WorkflowError" not in r.output and "ratenan" not in r.output
    assert not (tmp_path / "results").exists()


def test_a_burst_of_infinite_rate_stays_a_valid_experiment(config, validator):
    assert config["asr"]["experiments"]["burst"]["rates"] == [math.inf]
    ok = copy.deepcopy(config)
    ok["asr"]["experiments"]["medium"]["rates"].append(math.inf)
    assert not list(validator.iter_errors(ok))


@pytest.mark.slow
def test_dry_run_rejects_an_unknown_model(config, tmp_path):
    bad = copy.deepcopy(config)
    bad["asr"]["experiments"]["medium"]["model"] = "whisper-gigantic"
    r = _dry_run("--configfile", _write(tmp_path, bad))
    assert r.returncode != 0
    assert "experiment 'medium': unknown model 'whisper-gigantic'" in r.output


# -- one check for the pipeline and `schedlab check-config` -------------------------------------
@pytest.mark.parametrize("path", ["config.yaml", ".test/config.yaml"])
def test_the_shipped_configs_pass_check_config(path, capsys):
    from schedlab.cli import main

    assert main(["check-config", str(ROOT / path)]) == 0
    assert capsys.readouterr().out == f"{ROOT / path}: the pipeline config passes every check\n"


def test_check_config_names_every_problem_of_every_section_in_one_line(config):
    """Names and references the schema cannot check, each section's under its name, in the
    order the sections are written; the shape is checked first, so a config of the wrong shape
    names that alone."""
    from schedlab import registry
    from schedlab.errors import SchedlabError
    from schedlab.validation.config import check_config

    bad = copy.deepcopy(config)
    bad["asr"]["experiments"]["medium"]["workload"] = "podcasts"
    bad["slai"]["routing"]["routers"].append("nearest")
    bad["ewsjf"]["engine"]["policies"].reverse()
    bad["tournament"]["cluster"]["workloads"].append("chess")
    with pytest.raises(SchedlabError) as e:
        check_config(bad)
    routers = ", ".join(r.name for r in registry.router_entries())
    assert str(e.value) == (
        "config: experiment 'medium': unknown workload 'podcasts'; "
        "ewsjf.engine.policies: FCFS comes first (sim's step-time model is fitted on its steps); "
        f"slai: routing.routers: unknown router 'nearest'; known: {routers}; "
        "tournament: cluster.workloads: 'chess' is not in tournament.workloads"
    )
    bad["asr"]["engine"]["block_size"] = 0
    with pytest.raises(SchedlabError, match=r"^config key asr\.engine\.block_size: 0 is less than the minimum of 1$"):
        check_config(bad)


# A shape error and two reference errors in two sections (one line for both); the other
# reference checks are the same path, their messages checked in process above.
@pytest.mark.parametrize("mutate", [
    _nan_rate,
    lambda c: (c["slai"]["routing"]["routers"].append("nearest"), c["profile"]["gpu"].append("TPU-v5")),
], ids=["shape", "router-and-gpu"])
@pytest.mark.slow
def test_check_config_and_the_pipeline_end_a_bad_config_in_the_same_line(config, tmp_path, mutate):
    bad = copy.deepcopy(config)
    mutate(bad)
    path = _write(tmp_path, bad)
    cli = subprocess.run([sys.executable, "-m", "schedlab.cli", "check-config", str(path)], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert cli.returncode == 2 and cli.stdout == "" and cli.stderr.count("\n") == 1, cli.stderr
    assert cli.stderr.startswith("schedlab: error: config"), cli.stderr
    r = _dry_run("--configfile", path)
    assert r.returncode == 2, r.output[-3000:]
    assert [ln for ln in r.stderr.splitlines() if ln.startswith("schedlab: error:")] == [cli.stderr.rstrip("\n")]
    assert not (tmp_path / "results").exists()


# -- names that become paths or shell words ----------------------------------------------------
INJECTION = "light'$(touch injected)'"
TRAVERSAL = "../../../somewhere"


def _rename_key(mapping: dict, old: str, new: str) -> None:
    mapping[new] = mapping.pop(old)


@pytest.mark.parametrize("bad", [INJECTION, TRAVERSAL, "..", "a b", ""])
@pytest.mark.parametrize(
    "mutate",
    [
        lambda c, bad: (_rename_key(c["asr"]["experiments"], "medium", bad), ["asr", "experiments"])[1],
        lambda c, bad: (_rename_key(c["asr"]["workloads"], "burst", bad), ["asr", "workloads"])[1],
        lambda c, bad: (_rename_key(c["tournament"]["workloads"], next(iter(c["tournament"]["workloads"])), bad),
                        ["tournament", "workloads"])[1],
        lambda c, bad: (c["extensions"]["switching"]["phases"][0].update(name=bad),
                        ["extensions", "switching", "phases", 0, "name"])[1],
        lambda c, bad: (c["asr"]["experiments"]["medium"].update(workload=bad), ["asr", "experiments", "medium", "workload"])[1],
        lambda c, bad: (c["slai"]["schedulers"].append(bad), ["slai", "schedulers", len(c["slai"]["schedulers"]) - 1])[1],
    ],
    ids=["experiment", "workload", "tournament-workload", "phase", "experiment-workload", "slai-scheduler"],
)
def test_names_that_become_paths_reject_injection_and_traversal(config, validator, mutate, bad):
    cfg = copy.deepcopy(config)
    where = mutate(cfg, bad)
    errors = list(validator.iter_errors(cfg))
    assert [list(e.absolute_path) for e in errors] == [where]


def test_results_folder_rejects_shell_metacharacters(config, validator):
    cfg = copy.deepcopy(config)
    cfg["results"] = "results; touch injected"
    assert [list(e.absolute_path) for e in validator.iter_errors(cfg)] == [["results"]]
    cfg["results"] = "../elsewhere/results"  # the user's folder may be anywhere
    assert not list(validator.iter_errors(cfg))


@pytest.mark.slow
def test_json_reaches_the_shell_as_one_quoted_word(config, tmp_path):
    """A config string with quotes and a command substitution (a language code here, which the
    schema leaves free) is passed to the command intact, never interpreted by the shell."""
    import json
    import shlex

    cfg = copy.deepcopy(config)
    shares = {"en": 0.5, "it's $(touch injected)": 0.5}
    cfg["extensions"]["kappa"]["shares"] = shares
    r = _dry_run("--configfile", _write(tmp_path, cfg), "-p", f"{tmp_path / 'results'}/extensions/kappa/runs.parquet")
    assert r.returncode == 0, r.output[-3000:]
    (line,) = [ln for ln in r.output.splitlines() if "schedlab extension kappa" in ln]
    words = shlex.split(line.removeprefix("Shell command: "))
    # --configfile is merged over config.yaml, so its shares are added to the shipped ones
    assert json.loads(words[words.index("--spec") + 1])["shares"] == {**config["extensions"]["kappa"]["shares"], **shares}
    assert not (ROOT / "injected").exists() and not (tmp_path / "injected").exists()


@pytest.mark.slow
@pytest.mark.parametrize("profile", [[], ["--workflow-profile", "none"]], ids=["default-profile", "no-profile"])
def test_unlock_needs_no_cores(tmp_path, profile):
    """`snakemake --unlock` after a hard kill works without --cores, with or without the
    default profile (no rule reads the core count before it plans a job)."""
    for item in ("Snakefile", "workflow", "profiles", "config.yaml"):
        (shutil.copytree if (ROOT / item).is_dir() else shutil.copy)(ROOT / item, tmp_path / item)
    r = subprocess.run([_snakemake(), "--unlock", *profile], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert ("profiles/default" in r.stderr) == (not profile)


@pytest.mark.slow
def test_the_readmes_paper_c_on_vllm_sim_line_plans_paper_cs_jobs_on_vllm_sim(tmp_path):
    """The serving page's line (`... --config backend=vllm-sim -- results/notebooks/slai.html`), dry-run
    with its results moved to tmp_path: paper C's 16 jobs, the sweeps on vLLM's scheduler (the routing study runs on `sim`: clusters are simulated there only)."""
    import shlex

    text = (ROOT / "docs" / "backends.md").read_text()
    line = re.search(r"`(snakemake --cores all --config backend=vllm-sim -- \S+)`", text.replace("\n", " ")).group(1)
    results = tmp_path / "results"
    args = shlex.split(line)[1:]
    args[args.index("backend=vllm-sim") + 1: args.index("backend=vllm-sim") + 1] = [f"results={results}"]
    args[-1] = str(results / "notebooks" / "slai.html")
    r = subprocess.run([_snakemake(), "-n", "-p", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    stats = out[out.index("Job stats"):]
    assert int(re.search(r"^total\s+(\d+)", stats, re.M).group(1)) == 16
    assert re.search(r"schedlab slai sweep .*--backend vllm-sim", out)


# -- transformers' engine on the CPU (the `transformers` option) ------------------------------
@pytest.mark.slow
def test_the_transformers_option_plans_one_cpu_run_that_the_calibration_notebook_reads(config, tmp_path):
    """Off (as shipped), no job starts transformers' engine and the calibration notebook reads no
    run of it; on, one job runs the held-out study on the CPU with the section's settings, on the
    whole machine, and the notebook reads its folder; an encoder-decoder model is refused in one
    line before any job."""
    import shlex

    for name in ("off", "on", "bad"):
        (tmp_path / name).mkdir()
    off = _dry_run("--configfile", _write(tmp_path / "off", config), "-p")
    assert off.returncode == 0, off.output[-3000:]
    assert "transformers_study" not in off.output and "runs/transformers" not in off.output

    on = copy.deepcopy(config)
    on["transformers"]["enabled"] = True
    results = tmp_path / "on" / "results"
    r = _dry_run("--configfile", _write(tmp_path / "on", on), "-p", "--cores", "2")
    assert r.returncode == 0, r.output[-3000:]
    assert re.search(r"^transformers_study\s+1\s*$", r.output, re.M), r.output[-3000:]
    (line,) = [ln for ln in r.output.splitlines() if "schedlab.backends.transformers.study" in ln]
    words = shlex.split(line.removeprefix("Shell command: ").split(">")[0])
    flag = lambda name, n=1: words[words.index(name) + 1: words.index(name) + 1 + n]  # noqa: E731
    t = config["transformers"]
    assert flag("--device") == ["cpu"] and flag("--model") == [t["model"]] and flag("--budget-s") == ["inf"]
    assert flag("--held-out", len(t["held_out"])) == t["held_out"] and flag("--threads") == ["2"]
    assert flag("--requests") == [str(t["requests"])] and flag("--order") == [t["engine"]["order"]]
    assert flag("--out") == [str(results / "runs" / "transformers" / "cpu")]
    (notebook,) = [b for b in r.output.split("\n\n") if "rule notebook:" in b and "calibration.html" in b]
    assert str(results / "runs" / "transformers" / "cpu") in notebook

    bad = copy.deepcopy(on)
    bad["transformers"]["model"] = "whisper-tiny"
    r = _dry_run("--configfile", _write(tmp_path / "bad", bad))
    assert r.returncode == 2
    assert "config: transformers: model 'whisper-tiny' is an encoder-decoder model" in r.output, r.output[-2000:]
