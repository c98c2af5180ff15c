# Profile: latency tables of batch compositions, measured (torch passes or real vLLM engine
# steps on the local device) or predicted (roofline from the hardware catalogue).


rule profile_roofline:
    output:
        f"{R}/profile/roofline/{{hardware}}/{{model}}.parquet",
    log:
        f"{R}/logs/profile/roofline/{{hardware}}/{{model}}.log",
    conda:
        "../../envs/cpu.yaml"
    shell:
        "schedlab profile --source roofline --hardware {wildcards.hardware} --model {wildcards.model} "
        "--out {output} > {log} 2>&1"


rule profile_torch:
    output:
        f"{R}/profile/torch/local/{{model}}.parquet",
    log:
        f"{R}/logs/profile/torch/{{model}}.log",
    params:
        repeats=config["profile"]["torch_repeats"],
        device=config["profile"]["torch_device"],
    threads: all_cores
    resources:
        gpu=int(config["profile"]["torch_device"].startswith("cuda")),
    conda:
        "../../envs/cpu.yaml"
    shell:
        "schedlab profile --source torch --model {wildcards.model} --repeats {params.repeats} "
        "--device {params.device} "
        "--out {output} > {log} 2>&1"


rule profile_vllm:
    output:
        f"{R}/profile/vllm/local/{{model}}.parquet",
    log:
        f"{R}/logs/profile/vllm/{{model}}.log",
    params:
        v=VLLM,
    threads: all_cores
    resources:
        gpu=int(VLLM["device"].startswith("cuda")),
    conda:
        "../../envs/gpu.yaml" if VLLM["device"].startswith("cuda") else "../../envs/cpu.yaml"
    shell:
        "schedlab profile --source vllm --model {wildcards.model} --device {params.v[device]} "
        "--kv-cache-gib {params.v[kv_cache_gib]} --max-num-seqs {params.v[max_num_seqs]} "
        "--max-num-batched-tokens {params.v[max_num_batched_tokens]} --out {output} > {log} 2>&1"
