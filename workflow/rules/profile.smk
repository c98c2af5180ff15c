# Profile: latency tables of batch compositions, measured (torch passes or real vLLM engine
# steps on the local device) or predicted (roofline from the hardware catalogue).


rule profile_roofline:
    output:
        f"{RESULTS}/profile/roofline/{{hardware}}/{{model}}.parquet",
    log:
        f"{RESULTS}/logs/profile/roofline/{{hardware}}/{{model}}.log",
    conda:
        SIM_ENV
    shell:
        "schedlab profile --source roofline --hardware {wildcards.hardware} --model {wildcards.model} "
        "--out {output} > {log} 2>&1"


rule profile_torch:
    output:
        f"{RESULTS}/profile/torch/local/{{model}}.parquet",
    log:
        f"{RESULTS}/logs/profile/torch/{{model}}.log",
    conda:
        engine_env(config["profile"]["torch_device"])
    threads: all_cores
    resources:
        gpu=int(config["profile"]["torch_device"].startswith("cuda")),
    params:
        repeats=config["profile"]["torch_repeats"],
        device=config["profile"]["torch_device"],
    shell:
        "schedlab profile --source torch --model {wildcards.model} --repeats {params.repeats} "
        "--device {params.device} "
        "--out {output} > {log} 2>&1"


rule profile_vllm:
    output:
        f"{RESULTS}/profile/vllm/local/{{model}}.parquet",
    log:
        f"{RESULTS}/logs/profile/vllm/{{model}}.log",
    conda:
        ENGINE_ENV
    threads: all_cores
    resources:
        gpu=int(VLLM["device"].startswith("cuda")),
    params:
        engine=vllm_engine_flags(VLLM["max_num_seqs"], VLLM["max_num_batched_tokens"]),
    shell:
        "schedlab profile --source vllm --model {wildcards.model} {params.engine} --out {output} > {log} 2>&1"


# The CPU time vLLM's API server spends on each Whisper request before the scheduler sees it
# (audio decoding and log-mel features), measured on this machine with the whole machine to
# itself, and fitted against the clip's duration: paper A's front-end station, measured.
rule front_end_cost:
    input:
        utterances=rules.librispeech.output,
    output:
        table=f"{RESULTS}/profile/front-end/local/{{model}}.parquet",
        fit=f"{RESULTS}/fit/front-end/local/{{model}}.json",
    log:
        f"{RESULTS}/logs/profile/front-end/{{model}}.log",
    conda:
        ENGINE_ENV
    threads: all_cores
    shell:
        "schedlab front-end-cost --model {wildcards.model} --utterances {input.utterances} "
        "--out {output.table} --out-fit {output.fit} > {log} 2>&1"


# vLLM's scheduler's own CPU time per step (schedule() and update_from_output()), read from
# the scheduler thread over an overloaded trace on a virtual clock, and its fit per scheduled
# request: the serving stack's work between two forward passes, measured.
rule scheduler_cost:
    output:
        table=f"{RESULTS}/profile/scheduler-cost/local/{SCHEDULER_COST['model']}.parquet",
        fit=f"{RESULTS}/fit/scheduler-cost/local/{SCHEDULER_COST['model']}.json",
        trace=f"{RESULTS}/profile/scheduler-cost/local/{SCHEDULER_COST['model']}.trace.parquet",
        steptime=f"{RESULTS}/profile/scheduler-cost/local/{SCHEDULER_COST['model']}.steptime.json",
    log:
        f"{RESULTS}/logs/profile/scheduler-cost.log",
    conda:
        ENGINE_ENV
    threads: all_cores
    params:
        c=SCHEDULER_COST,
    shell:
        "(schedlab workload --kind {params.c[kind]} --rate {params.c[rate]} --seed 0 --n-requests {params.c[n_requests]} "
        "--model {params.c[model]} --out {output.trace} && "
        "schedlab steptime --source shipped --hardware {params.c[hardware]} --model {params.c[model]} --out {output.steptime} && "
        "schedlab scheduler-cost --trace {output.trace} --steptime {output.steptime} --hardware {params.c[hardware]} "
        "--model {params.c[model]} --out {output.table} --out-fit {output.fit}) > {log} 2>&1"
