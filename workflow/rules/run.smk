# Runs: experiment x policy x rate x seed on a backend, then one summary table per study.


def _trace(w):
    return f"{R}/traces/{EXPERIMENTS[w.experiment]['workload']}/rate{w.rate}_seed{w.seed}.parquet"


rule simulate:
    input:
        trace=_trace,
        steptime=lambda w: EXPERIMENTS[w.experiment]["steptime"],
        kappa=rules.kappa.output,
    output:
        results=f"{R}/runs/{{backend}}/{{experiment}}/{{policy}}/rate{{rate}}_seed{{seed}}.parquet",
        summary=f"{R}/runs/{{backend}}/{{experiment}}/{{policy}}/rate{{rate}}_seed{{seed}}.json",
    log:
        f"{R}/logs/runs/{{backend}}/{{experiment}}/{{policy}}/rate{{rate}}_seed{{seed}}.log",
    wildcard_constraints:
        backend="sim|vllm-sim",
    params:
        model=lambda w: EXPERIMENTS[w.experiment]["model"],
        workload=lambda w: EXPERIMENTS[w.experiment]["workload"],
        engine=lambda w: simulate_flags(w.experiment),
    conda:
        "../../envs/cpu.yaml"
    shell:
        "schedlab simulate --backend {wildcards.backend} --trace {input.trace} --policy {wildcards.policy} "
        "--steptime {input.steptime} --kappa {input.kappa} --model {params.model} {params.engine} "
        "--workload {params.workload} --rate {wildcards.rate} --seed {wildcards.seed} "
        "--out-results {output.results} --out-summary {output.summary} > {log} 2>&1"


rule vllm_run:
    input:
        trace=_trace,
        kappa=rules.kappa.output,
    output:
        results=f"{R}/runs/vllm/{{experiment}}/{{policy}}/rate{{rate}}_seed{{seed}}.parquet",
        summary=f"{R}/runs/vllm/{{experiment}}/{{policy}}/rate{{rate}}_seed{{seed}}.json",
    log:
        f"{R}/logs/runs/vllm/{{experiment}}/{{policy}}/rate{{rate}}_seed{{seed}}.log",
    params:
        workload=lambda w: EXPERIMENTS[w.experiment]["workload"],
        v=VLLM,
    # The engine's timing is the measurement: it gets the whole machine (or one GPU).
    threads: all_cores
    resources:
        gpu=int(VLLM["device"].startswith("cuda")),
    conda:
        "../../envs/gpu.yaml" if VLLM["device"].startswith("cuda") else "../../envs/cpu.yaml"
    shell:
        "schedlab vllm-run --trace {input.trace} --policy {wildcards.policy} --kappa {input.kappa} "
        "--model {params.v[model]} --device {params.v[device]} --kv-cache-gib {params.v[kv_cache_gib]} "
        "--max-num-seqs {params.v[max_num_seqs]} --max-num-batched-tokens {params.v[max_num_batched_tokens]} "
        "--workload {params.workload} --rate {wildcards.rate} --seed {wildcards.seed} "
        "--out-results {output.results} --out-summary {output.summary} > {log} 2>&1"


rule collect_asr:
    input:
        lambda w: asr_sweep(w.backend),
    output:
        f"{R}/summary/asr_{{backend}}.parquet",
    log:
        f"{R}/logs/summary/asr_{{backend}}.log",
    conda:
        "../../envs/cpu.yaml"
    shell:
        "schedlab collect --out {output} {input} > {log} 2>&1"


rule collect_fidelity:
    input:
        fidelity_runs(),
    output:
        f"{R}/summary/fidelity.parquet",
    log:
        f"{R}/logs/summary/fidelity.log",
    conda:
        "../../envs/cpu.yaml"
    shell:
        "schedlab collect --out {output} {input} > {log} 2>&1"
