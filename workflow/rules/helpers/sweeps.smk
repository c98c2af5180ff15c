# Where runs are written and which runs a target needs: run paths, sweeps over experiments,
# policies, rates and seeds, and the plans of simulation and trace jobs.


def engine_run_dir(experiment, policy):
    """Where one `vllm serve` job writes every rate x repeat of (experiment, policy)."""
    return f"{RESULTS}/runs/vllm/{experiment}/{policy}"


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
        for b in SIM_BACKENDS
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
