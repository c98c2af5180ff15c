# Helpers shared by the rules: paths, sweep expansion, cross-checks of the config.
import math

from schedlab.latency.catalogue import hardware_names, model_names
from schedlab.policies import POLICIES

R = config["results"]
ASR = config["asr"]


def _check_config():
    """Cross-references the JSON schema cannot express, as one-line errors."""
    problems = []
    if ASR["hardware"] not in hardware_names():
        problems.append(f"asr.hardware {ASR['hardware']!r} is not in the catalogue ({', '.join(hardware_names())})")
    for name, exp in ASR["experiments"].items():
        if exp["workload"] not in ASR["workloads"]:
            problems.append(f"experiment {name!r}: unknown workload {exp['workload']!r}")
        if exp["model"] not in model_names():
            problems.append(f"experiment {name!r}: unknown model {exp['model']!r} ({', '.join(model_names())})")
    for p in ASR["policies"]:
        if p not in POLICIES:
            problems.append(f"unknown policy {p!r}")
    if ASR["calibration"]["model"] not in model_names():
        problems.append(f"asr.calibration.model {ASR['calibration']['model']!r} is not a known model")
    if problems:
        raise ValueError("config.yaml: " + "; ".join(problems))


_check_config()


def rate_label(rate):
    """File-name form of a rate: 5 -> '5', 2.5 -> '2.5', inf -> 'inf'."""
    if math.isinf(rate):
        return "inf"
    return str(int(rate)) if float(rate).is_integer() else str(rate)


def engine_flags():
    e = ASR["engine"]
    return (
        f"--max-num-seqs {e['max_num_seqs']} --max-num-batched-tokens {e['max_num_batched_tokens']} "
        f"--block-size {e['block_size']} --gpu-memory-utilization {e['gpu_memory_utilization']}"
    )


def workload_flags(name):
    """`schedlab workload` flags of a configured workload."""
    flags = {"kind": "--kind", "duration_s": "--duration-s", "n_requests": "--n-requests",
             "clips_per_duration": "--clips-per-duration", "burstiness": "--burstiness"}
    return " ".join(f"{flags[k]} {v}" for k, v in ASR["workloads"][name].items())


def run_summaries(backend=None):
    """Every (experiment, policy, rate, seed) summary of the ASR sweep."""
    backend = backend or config["backend"]
    return [
        f"{R}/runs/{backend}/{name}/{policy}/rate{rate_label(rate)}_seed{seed}.json"
        for name, exp in ASR["experiments"].items()
        for policy in ASR["policies"]
        for rate in exp["rates"]
        for seed in config["seeds"]
    ]


def notebook_outputs(name):
    return [f"{R}/notebooks/{name}.ipynb", f"{R}/notebooks/{name}.html"]
