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
        experiment="[^/]+",
    params:
        model=lambda w: EXPERIMENTS[w.experiment]["model"],
        workload=lambda w: EXPERIMENTS[w.experiment]["workload"],
        engine=lambda w: simulate_flags(w.experiment),
        client=lambda w: client_flags(w.experiment),
    conda:
        "../../envs/cpu.yaml"
    shell:
        "schedlab simulate --backend {wildcards.backend} --trace {input.trace} --policy {wildcards.policy} "
        "--steptime {input.steptime} --kappa {input.kappa} --model {params.model} {params.engine} {params.client} "
        "--workload {params.workload} --rate {wildcards.rate} --seed {wildcards.seed} "
        "--out-results {output.results} --out-summary {output.summary} > {log} 2>&1"


def _engine_inputs(w):
    """Traces of every rate and seed of an engine experiment, kappa, and a Whisper model folder."""
    exp = EXPERIMENTS[w.experiment]
    traces = [f"{R}/traces/{exp['workload']}/rate{rate_label(r)}_seed{s}.parquet"
              for s in config["seeds"] for r in exp["rates"]]
    folder = [rules.whisper_files.output[0].format(model=exp["model"])] if exp["model"].startswith("whisper") else []
    return {"traces": traces, "kappa": rules.kappa.output[0], "folder": folder}


def _engine_shell(w, input, output):
    """One `schedlab vllm-serve` per seed: a server started with the policy, every rate
    replayed `vllm.repeats` times, then the server stopped."""
    exp = EXPERIMENTS[w.experiment]
    eng = exp["engine"]
    folder = input.folder[0] if input.folder else str(model_dir(exp["model"]))
    labels = [rate_label(r) for r in exp["rates"]]
    cmds = []
    for s in config["seeds"]:
        traces = [t for t in input.traces if t.endswith(f"_seed{s}.parquet")]
        cmds.append(
            f"schedlab vllm-serve --policy {w.policy} --kappa {input.kappa} --model {exp['model']} "
            f"--model-folder {folder} --traces {' '.join(traces)} --rates {' '.join(labels)} "
            f"--workload {exp['workload']} --seed {s} --repeats {VLLM['repeats']} --device {VLLM['device']} "
            f"--kv-cache-gib {VLLM['kv_cache_gib']} --max-num-seqs {eng['max_num_seqs']} "
            f"--max-num-batched-tokens {eng['max_num_batched_tokens']} "
            f"--server-log {R}/logs/runs/vllm/{w.experiment}/{w.policy}.server_seed{s}.log --out-dir {output[0]}"
        )
    return " && ".join(cmds)


rule vllm_serve:
    input:
        unpack(_engine_inputs),
    output:
        directory(f"{R}/runs/vllm/{{experiment}}/{{policy}}"),
    # The client's log; each server's output goes beside it (`<policy>.server_seed<seed>.log`).
    log:
        f"{R}/logs/runs/vllm/{{experiment}}/{{policy}}.log",
    wildcard_constraints:
        experiment="[^/]+",
        policy="[^/]+",
    params:
        cmd=lambda w, input, output: _engine_shell(w, input, output),
    # The engine's timing is the measurement: it gets the whole machine (or one GPU).
    threads: all_cores
    resources:
        gpu=int(VLLM["device"].startswith("cuda")),
    conda:
        "../../envs/gpu.yaml" if VLLM["device"].startswith("cuda") else "../../envs/cpu.yaml"
    shell:
        "({params.cmd}) > {log} 2>&1"


rule collect_engine_asr:
    input:
        engine_asr_runs(),
    output:
        f"{R}/summary/engine_asr.parquet",
    log:
        f"{R}/logs/summary/engine_asr.log",
    conda:
        "../../envs/cpu.yaml"
    shell:
        "schedlab collect --out {output} {input} > {log} 2>&1"


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
