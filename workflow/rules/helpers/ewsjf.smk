# Helpers of Paper B: EWSJF (ewsjf.smk): config sections, paths and flags.


EWSJF = config["ewsjf"]
EWSJF_DIR = f"{RESULTS}/ewsjf"
EWSJF_ENGINE = EWSJF["engine"]
#: Paper B's mean output length (its studies' traces), for the engine's trace too.
from schedlab.ewsjf.workload import MEAN_OUTPUT as EWSJF_MEAN_OUTPUT


def ewsjf_engine():
    """Paper B's engine scaled to the local vLLM engine (`vllm` section): the prompt scale and
    the limits (schedlab.ewsjf.scaled)."""
    from schedlab.backends.vllm.engine import LaunchSpec, cpu_kv_capacity_blocks
    from schedlab.ewsjf.scaled import scaled_engine
    from schedlab.ewsjf.studies import engine_limits
    from schedlab.latency.catalogue import model_arch

    paper = engine_limits(hardware(EWSJF["hardware"]), model_arch(EWSJF["model"]))
    spec = LaunchSpec(model=VLLM["model"], kv_cache_gib=VLLM["kv_cache_gib"])
    return scaled_engine(paper, cpu_kv_capacity_blocks(spec) * spec.block_size)


def ewsjf_engine_runs():
    """The scaled mixed workload on the real engine (one folder per policy) and on sim (one
    summary per policy), when `ewsjf.engine.enabled`."""
    if not EWSJF_ENGINE["enabled"]:
        return {}
    policies = EWSJF_ENGINE["policies"]
    return {
        "engine_runs": [f"{EWSJF_DIR}/engine/vllm/{p}" for p in policies],
        "engine_sim": [f"{EWSJF_DIR}/engine/sim/{p}.json" for p in policies],
    }


def ewsjf_flags():
    return f"--hardware {EWSJF['hardware']} --model {EWSJF['model']}"


def ewsjf_cache_flag():
    """The engine's prefix cache as the config says (vLLM 0.11's default: on)."""
    return "--prefix-caching" if EWSJF["prefix_caching"] else "--no-prefix-caching"


def ewsjf_inputs():
    return {
        "steptime": f"{EWSJF_DIR}/fit/calibrated.json",
        "short": rules.ewsjf_pools.output.short,
        "long": rules.ewsjf_pools.output.long,
    }


def ewsjf_study_flags(study):
    """`schedlab ewsjf study` arguments of one configured study."""
    q, seed = EWSJF["queue_count"], EWSJF["seeds"][0]
    if study.startswith("queues-"):
        # Table 3 (the mixed workload) on every trace seed: its numbers are counted against the
        # paper's as a median and band; Tables 8 and 9 on the first.
        kind = study.split("-")[1]
        seeds = words(EWSJF["seeds"]) if kind == "mixed" else seed
        return f"queues --kind {kind} --n-requests {q[kind]} --rate {q['rate']} --seed {seeds}"
    if study == "load":
        sizes, rates = words(EWSJF["load"]["sizes"]), words(EWSJF["load"]["rates"])
        return f"load --sizes {sizes} --rates {rates} --seed {seed}"
    s = EWSJF["starvation"]
    return f"starvation --n-requests {s['n_requests']} --rates {words(s['rates'])} --seed {seed}"


def ewsjf_notebook_inputs():
    """Paper B's notebook's inputs."""
    studies = (
        "tuning",
        "queues-mixed",
        "queues-short",
        "queues-long",
        "load",
        "starvation",
        "starvation_timeline",
        "sharing",
    )
    return {
        **{s: f"{EWSJF_DIR}/study/{s}.parquet" for s in studies},
        "params": rules.ewsjf_tuning.output.params,
        "calibrated": rules.ewsjf_calibrate.output[0],
        "short": rules.ewsjf_pools.output.short,
        "long": rules.ewsjf_pools.output.long,
        **ewsjf_engine_runs(),
    }


NOTEBOOK_INPUTS["ewsjf"] = ewsjf_notebook_inputs
