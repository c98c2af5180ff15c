# Helpers shared by the rules: the experiment registry, paths, sweep expansion, config checks.
import json
import math
import shlex

from schedlab.contracts import BACKENDS, SIM_BACKENDS
from schedlab.latency.catalogue import hardware_names, model_dir, model_names
from schedlab.policies import POLICIES

R = config["results"]
ASR = config["asr"]
VLLM = config["vllm"]
FID = config["fidelity"]


def rate_label(rate):
    """File-name form of a rate: 5 -> '5', 2.5 -> '2.5', inf -> 'inf'."""
    if math.isinf(rate):
        return "inf"
    return str(int(rate)) if float(rate).is_integer() else str(rate)


def _experiments():
    """name -> {workload, model, rates, steptime[, engine]}: every run the pipeline knows how to make.

    Paper A's experiments use the roofline calibrated to the paper's hardware. The real-engine
    experiments (`engine`: the server's limits) are simulated with a fit of the local device:
    paper A's reduced sweep (Whisper) with the torch profile's fit, the decoder fidelity
    study with the fit of the engine's own profile.
    """
    calibrated = lambda model: f"{R}/fit/steptime/calibrated/{ASR['hardware']}/{model}.json"
    decoder = {"model": VLLM["model"], "max_num_seqs": VLLM["max_num_seqs"],
               "max_num_batched_tokens": VLLM["max_num_batched_tokens"]}
    whisper = {k: VLLM["asr"][k] for k in ("model", "max_num_seqs", "max_num_batched_tokens")}
    exps = {name: {**e, "steptime": calibrated(e["model"])} for name, e in ASR["experiments"].items()}
    for name, e in VLLM["reduced_experiments"].items():
        exps[f"{name}-engine"] = {**e, "model": whisper["model"], "engine": whisper,
                                  "steptime": f"{R}/fit/steptime/torch/local/{whisper['model']}.json"}
    exps["fidelity-engine"] = {**FID["engine"], "model": decoder["model"], "engine": decoder,
                               "steptime": f"{R}/fit/steptime/vllm/local/{decoder['model']}.json"}
    return exps


EXPERIMENTS = _experiments()


def _check_config():
    """Cross-references the JSON schema cannot express, as one-line errors."""
    problems = []
    if ASR["hardware"] not in hardware_names():
        problems.append(f"asr.hardware {ASR['hardware']!r} is not in the catalogue ({', '.join(hardware_names())})")
    for name, exp in EXPERIMENTS.items():
        if exp["workload"] not in ASR["workloads"]:
            problems.append(f"experiment {name!r}: unknown workload {exp['workload']!r}")
        if exp["model"] not in model_names():
            problems.append(f"experiment {name!r}: unknown model {exp['model']!r} ({', '.join(model_names())})")
    for p in ASR["policies"] + FID["policies"]:
        if p not in POLICIES:
            problems.append(f"unknown policy {p!r}")
    if ASR["calibration"]["model"] not in model_names():
        problems.append(f"asr.calibration.model {ASR['calibration']['model']!r} is not a known model")
    if FID["asr"]["experiment"] not in ASR["experiments"]:
        problems.append(f"fidelity.asr.experiment {FID['asr']['experiment']!r} is not in asr.experiments")
    if problems:
        raise ValueError("config.yaml: " + "; ".join(problems))


_check_config()


def shell_json(value):
    """``value`` as JSON, quoted as one shell word (config strings never reach a shell raw)."""
    return shlex.quote(json.dumps(value))


def all_cores(wildcards):
    """Threads of a rule that takes the whole machine: every core of the run, read per job, so
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
        from schedlab.backends.vllm_engine import EngineSpec, cpu_kv_capacity_blocks

        spec = EngineSpec(model=engine["model"], kv_cache_gib=VLLM["kv_cache_gib"])
        return (
            f"--hardware vllm-{VLLM['device']} --max-num-seqs {engine['max_num_seqs']} "
            f"--max-num-batched-tokens {engine['max_num_batched_tokens']} --block-size {spec.block_size} "
            f"--kv-capacity-blocks {cpu_kv_capacity_blocks(spec)}"
        )
    return f"--hardware {ASR['hardware']} {engine_flags()}"


def engine_run_dir(experiment, policy):
    """Where one `vllm serve` job writes every rate x repeat of (experiment, policy)."""
    return f"{R}/runs/vllm/{experiment}/{policy}"


def workload_flags(name):
    """`schedlab workload` flags of a configured workload."""
    flags = {"kind": "--kind", "duration_s": "--duration-s", "n_requests": "--n-requests",
             "clips_per_duration": "--clips-per-duration", "burstiness": "--burstiness"}
    return " ".join(f"{flags[k]} {v}" for k, v in ASR["workloads"][name].items() if k in flags)


def client_flags(experiment):
    """`schedlab simulate` flags of the benchmark client: its cap on requests in flight, if any."""
    cap = ASR["workloads"].get(EXPERIMENTS[experiment]["workload"], {}).get("max_in_flight")
    return f"--max-in-flight {cap}" if cap else ""


def run_path(backend, experiment, policy, rate, seed, ext="json"):
    return f"{R}/runs/{backend}/{experiment}/{policy}/rate{rate_label(rate)}_seed{seed}.{ext}"


def sweep(backend, experiments, policies):
    """Summaries of every (experiment, policy, rate, seed) on ``backend`` (the engine: one
    folder per (experiment, policy), holding every rate, seed and repeat)."""
    if backend == "vllm":
        return [engine_run_dir(name, policy) for name in experiments for policy in policies]
    return [
        run_path(backend, name, policy, rate, seed)
        for name in experiments
        for policy in policies
        for rate in EXPERIMENTS[name]["rates"]
        for seed in config["seeds"]
    ]


def asr_sweep(backend):
    """Paper A's sweep on ``backend``: full scale on the simulators; on the engine (and on the
    simulators beside it, `engine_asr_runs`) the reduced sweep of Whisper on the local device."""
    if backend == "vllm":
        return sweep(backend, [f"{n}-engine" for n in VLLM["reduced_experiments"]], VLLM["asr"]["policies"])
    return sweep(backend, list(ASR["experiments"]), ASR["policies"])


def engine_asr_runs():
    """The reduced Whisper sweep on every backend (calibration notebook, `backend=vllm`)."""
    names = [f"{n}-engine" for n in VLLM["reduced_experiments"]]
    return [f for b in BACKENDS for f in sweep(b, names, VLLM["asr"]["policies"])]


def fidelity_runs():
    """The same traces and policies on every backend (see the calibration notebook)."""
    asr = FID["asr"]["experiment"]
    runs = [
        run_path(b, asr, p, r, s)
        for b in ("sim", "vllm-sim")
        for p in FID["policies"]
        for r in FID["asr"]["rates"]
        for s in config["seeds"]
    ]
    return runs + [f for b in BACKENDS for f in sweep(b, ["fidelity-engine"], FID["policies"])]


def notebook_outputs(name):
    return [f"{R}/notebooks/{name}.ipynb", f"{R}/notebooks/{name}.html"]
