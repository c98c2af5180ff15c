# Helpers of Paper C: Sarathi-Serve, RAD and SLAI (slai.smk): config sections, paths and flags.


SLAI = config["slai"]
SLAI_FIDELITY = SLAI["fidelity"]
SLAI_BACKEND = config["backend"] if config["backend"] in SIM_BACKENDS else "vllm-sim"
SLAI_DIR = f"{RESULTS}/slai"
SLAI_TABLES = ("summary", "buckets", "timeline")
SLAI_ENGINE = SLAI["engine"]
SLAI_ROUTING = SLAI["routing"]


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
    targets = " ".join(f"{k}={v}" for k, v in e["tbt_targets_s"].items())
    return (
        f"--share {e['share']} --rates {words(e['rates'])} --seeds 0 --duration-s {e['duration_s']} "
        f"--warmup-s {e['warmup_s']} --tbt-targets {targets} --model {e['model']}"
    )


def slai_sweeps():
    """Every sweep table of every (share, scheduler)."""
    return [
        f"{slai_sweep_dir(p, s)}/{t}.parquet" for p in SLAI["shares"] for s in SLAI["schedulers"] for t in SLAI_TABLES
    ]


def slai_notebook_inputs():
    """Paper C's notebook's inputs."""
    return {
        "sweeps": slai_sweeps(),
        "fidelity": slai_fidelity_runs(),
        "capacity": [f"{SLAI_DIR}/capacity/p{slai_share_label(p)}.parquet" for p in SLAI["shares"]],
        "params": rules.slai_params.output[0],
        "throughput": rules.slai_throughput.output.capacity,
        "queue": rules.slai_throughput.output.queue,
        "routing": rules.slai_routing.output[0],
        "fit": rules.slai_fit.output[0],
        "calibrated": rules.slai_calibrate.output[0],
        "profile": rules.slai_profile.output[0],
        "pool": rules.slai_lengths.output[0],
        # Paper C on the real engine beside sim and vllm-sim (`--config backend=vllm`).
        **({"engine": slai_engine_runs()} if config["backend"] == "vllm" else {}),
    }


NOTEBOOK_INPUTS["slai"] = slai_notebook_inputs
