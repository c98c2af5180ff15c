# Paper D: chat/code length pools -> predictor profiles (calibrated roofline on the paper's
# hardware, torch and a real vLLM engine on the local device) -> OLS fits (+ the paper's
# reference values) -> studies.


rule slosa_pools:
    output:
        chat=f"{SLOSA_DIR}/pools/chat.parquet",
        code=f"{SLOSA_DIR}/pools/code.parquet",
    log:
        f"{RESULTS}/logs/slosa/pools.log",
    conda:
        SIM_ENV
    shell:
        "schedlab slosa pools --chat {output.chat} --code {output.code} > {log} 2>&1"


rule slosa_profile_roofline:
    output:
        f"{SLOSA_DIR}/profile/roofline.parquet",
    log:
        f"{RESULTS}/logs/slosa/profile_roofline.log",
    conda:
        SIM_ENV
    params:
        flags=slosa_flags(),
    shell:
        "schedlab slosa profile --source roofline --calibrate {params.flags} --out {output} > {log} 2>&1"


rule slosa_profile_torch:
    output:
        f"{SLOSA_DIR}/profile/torch.parquet",
    log:
        f"{RESULTS}/logs/slosa/profile_torch.log",
    conda:
        engine_env(SLOSA["torch_device"])
    threads: all_cores
    resources:
        gpu=int(SLOSA["torch_device"].startswith("cuda")),
    params:
        model=SLOSA["torch_model"],
        device=SLOSA["torch_device"],
    shell:
        "schedlab slosa profile --source torch --model {params.model} --device {params.device} "
        "--out {output} > {log} 2>&1"


rule slosa_profile_vllm:
    output:
        f"{SLOSA_DIR}/profile/vllm.parquet",
    log:
        f"{RESULTS}/logs/slosa/profile_vllm.log",
    conda:
        ENGINE_ENV
    # The engine's timing is the measurement: it gets the whole machine (or one GPU).
    threads: all_cores
    resources:
        gpu=int(VLLM["device"].startswith("cuda")),
    params:
        v=VLLM,
    shell:
        "schedlab slosa profile --source vllm --model {params.v[model]} --device {params.v[device]} "
        "--kv-cache-gib {params.v[kv_cache_gib]} --out {output} > {log} 2>&1"


rule slosa_profile_registered:
    output:
        f"{SLOSA_DIR}/profile/{{source}}.parquet",
    log:
        f"{RESULTS}/logs/slosa/profile_{{source}}.log",
    wildcard_constraints:
        source=SLOSA_OTHER_SOURCES,
    conda:
        SIM_ENV
    params:
        flags=slosa_flags(),
    shell:
        "schedlab slosa profile --source {wildcards.source} {params.flags} --out {output} > {log} 2>&1"


rule slosa_fit:
    input:
        f"{SLOSA_DIR}/profile/{{source}}.parquet",
    output:
        f"{SLOSA_DIR}/fit/{{source}}.json",
    log:
        f"{RESULTS}/logs/slosa/fit_{{source}}.log",
    wildcard_constraints:
        source=SLOSA_SOURCES,
    conda:
        SIM_ENV
    shell:
        "schedlab slosa fit --profile {input} --out {output} > {log} 2>&1"


rule slosa_reference:
    output:
        f"{SLOSA_DIR}/fit/reference.json",
    log:
        f"{RESULTS}/logs/slosa/fit_reference.log",
    conda:
        SIM_ENV
    shell:
        "schedlab slosa fit --reference --out {output} > {log} 2>&1"


rule slosa_study:
    input:
        predictor=f"{SLOSA_DIR}/fit/{SLOSA['predictor']}.json",
        chat=rules.slosa_pools.output.chat,
        code=rules.slosa_pools.output.code,
    output:
        f"{SLOSA_DIR}/study/{{study}}.parquet",
    log:
        f"{RESULTS}/logs/slosa/study_{{study}}.log",
    wildcard_constraints:
        study="compare|schedule|lengths|coefficients|instances",
    conda:
        SIM_ENV
    params:
        flags=slosa_flags(),
        seeds=words(SLOSA["seeds"]),
        ns=words(SLOSA["ns"]),
        batches=words(SLOSA["max_batches"]),
        exhaustive=SLOSA["exhaustive_max_n"],
    shell:
        "schedlab slosa study {wildcards.study} --predictor {input.predictor} --chat {input.chat} "
        "--code {input.code} {params.flags} --seeds {params.seeds} --ns {params.ns} "
        "--max-batches {params.batches} --exhaustive-max-n {params.exhaustive} --out {output} > {log} 2>&1"
