# Paper D: chat/code length pools -> predictor profiles (calibrated roofline on the paper's
# hardware, torch and a real vLLM engine on the local device) -> OLS fits (+ the paper's
# reference values) -> studies.
SLOSA = config["slosa"]
SD = f"{R}/slosa"


def slosa_flags():
    return f"--hardware {SLOSA['hardware']} --model {SLOSA['model']}"


rule slosa_pools:
    output:
        chat=f"{SD}/pools/chat.parquet",
        code=f"{SD}/pools/code.parquet",
    log:
        f"{R}/logs/slosa/pools.log",
    conda:
        "../../envs/cpu.yaml"
    shell:
        "schedlab slosa pools --chat {output.chat} --code {output.code} > {log} 2>&1"


rule slosa_profile_roofline:
    output:
        f"{SD}/profile/roofline.parquet",
    log:
        f"{R}/logs/slosa/profile_roofline.log",
    params:
        flags=slosa_flags(),
    conda:
        "../../envs/cpu.yaml"
    shell:
        "schedlab slosa profile --source roofline --calibrate {params.flags} --out {output} > {log} 2>&1"


rule slosa_profile_torch:
    output:
        f"{SD}/profile/torch.parquet",
    log:
        f"{R}/logs/slosa/profile_torch.log",
    params:
        model=SLOSA["torch_model"],
        device=SLOSA["torch_device"],
    threads: all_cores
    resources:
        gpu=int(SLOSA["torch_device"].startswith("cuda")),
    conda:
        "../../envs/cpu.yaml"
    shell:
        "schedlab slosa profile --source torch --model {params.model} --device {params.device} "
        "--out {output} > {log} 2>&1"


rule slosa_profile_vllm:
    output:
        f"{SD}/profile/vllm.parquet",
    log:
        f"{R}/logs/slosa/profile_vllm.log",
    params:
        v=VLLM,
    # The engine's timing is the measurement: it gets the whole machine (or one GPU).
    threads: all_cores
    resources:
        gpu=int(VLLM["device"].startswith("cuda")),
    conda:
        "../../envs/gpu.yaml" if VLLM["device"].startswith("cuda") else "../../envs/cpu.yaml"
    shell:
        "schedlab slosa profile --source vllm --model {params.v[model]} --device {params.v[device]} "
        "--kv-cache-gib {params.v[kv_cache_gib]} --out {output} > {log} 2>&1"


rule slosa_fit:
    input:
        f"{SD}/profile/{{source}}.parquet",
    output:
        f"{SD}/fit/{{source}}.json",
    log:
        f"{R}/logs/slosa/fit_{{source}}.log",
    wildcard_constraints:
        source="roofline|torch|vllm",
    conda:
        "../../envs/cpu.yaml"
    shell:
        "schedlab slosa fit --profile {input} --out {output} > {log} 2>&1"


rule slosa_reference:
    output:
        f"{SD}/fit/reference.json",
    log:
        f"{R}/logs/slosa/fit_reference.log",
    conda:
        "../../envs/cpu.yaml"
    shell:
        "schedlab slosa fit --reference --out {output} > {log} 2>&1"


rule slosa_study:
    input:
        predictor=f"{SD}/fit/{SLOSA['predictor']}.json",
        chat=rules.slosa_pools.output.chat,
        code=rules.slosa_pools.output.code,
    output:
        f"{SD}/study/{{study}}.parquet",
    log:
        f"{R}/logs/slosa/study_{{study}}.log",
    params:
        flags=slosa_flags(),
        seeds=",".join(map(str, SLOSA["seeds"])),
        ns=",".join(map(str, SLOSA["ns"])),
        batches=",".join(map(str, SLOSA["max_batches"])),
        exhaustive=SLOSA["exhaustive_max_n"],
    wildcard_constraints:
        study="compare|schedule|lengths|coefficients|instances",
    conda:
        "../../envs/cpu.yaml"
    shell:
        "schedlab slosa study {wildcards.study} --predictor {input.predictor} --chat {input.chat} "
        "--code {input.code} {params.flags} --seeds {params.seeds} --ns {params.ns} "
        "--max-batches {params.batches} --exhaustive-max-n {params.exhaustive} --out {output} > {log} 2>&1"
