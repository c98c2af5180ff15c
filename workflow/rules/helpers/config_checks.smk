# The config's cross-references the JSON schema cannot express (registered names, the catalogue,
# the experiments' workloads and models), checked once as the workflow loads: one line per
# problem, and the run ends before any job.


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


def backend_problems(key, name):
    """One line if ``name`` is not a registered backend the pipeline runs its studies on
    (:data:`BACKENDS`: one that runs batch builders too)."""
    try:
        registry.backend_entry(name, kind=registry.BATCH)
    except SchedlabError as e:
        return [f"{key}: {e}"]
    return []


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
    problems = backend_problems("backend", config["backend"])
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
