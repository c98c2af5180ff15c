# Command-line flags the rules build from the config: engine limits, workloads, the client, and
# values quoted for the shell.


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
    from schedlab.backends.vllm.engine import LaunchSpec, cpu_kv_capacity_blocks

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
