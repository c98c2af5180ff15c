# Runs: one job per (backend, experiment, policy, seed) sweeping the experiment's rates in one
# process (one rule per (backend, experiment), since each has its own rates), writing each
# run's per-request table and summary; then one summary table per study. A served
# experiment's `-heldout` twin runs each rate with its own step-time fit (fit_engine_steps_*).


for (_backend, _experiment), _job in simulation_plan().items():
    _exp = EXPERIMENTS[_experiment]
    _labels = [rate_label(r) for r in _job["rates"]]
    _runs = f"{RESULTS}/runs/{_backend}/{_experiment}/{{policy}}"

    rule:
        name:
            rule_name("simulate", _backend, _experiment)
        input:
            traces=[f"{RESULTS}/traces/{_exp['workload']}/rate{r}_seed{{seed}}.parquet" for r in _labels],
            steptime=steptime_inputs(_experiment, _job["rates"]),
            kappa=rules.kappa.output[0],
        output:
            results=[f"{_runs}/rate{r}_seed{{seed}}.parquet" for r in _labels],
            summaries=[f"{_runs}/rate{r}_seed{{seed}}.json" for r in _labels],
        log:
            f"{RESULTS}/logs/runs/{_backend}/{_experiment}/{{policy}}/seed{{seed}}.log",
        wildcard_constraints:
            policy="|".join(_job["policies"]),
            seed="[0-9]+",
        conda:
            backend_env(_backend)
        params:
            backend=_backend,
            model=_exp["model"],
            workload=_exp["workload"],
            rates=" ".join(_labels),
            engine=simulate_flags(_experiment),
            client=client_flags(_experiment),
            fit=fit_flag(_experiment),
        shell:
            "schedlab simulate --backend {params.backend} --trace {input.traces} --policy {wildcards.policy} "
            "--steptime {input.steptime} {params.fit} --kappa {input.kappa} --model {params.model} {params.engine} {params.client} "
            "--workload {params.workload} --rate {params.rates} --seed {wildcards.seed} "
            "--out-results {output.results} --out-summary {output.summaries} > {log} 2>&1"


rule vllm_serve:
    input:
        unpack(vllm_serve_inputs),
    output:
        directory(f"{RESULTS}/runs/vllm/{{experiment}}/{{policy}}"),
    # The client's log; each server's output goes beside it (`<policy>.server_seed<seed>.log`).
    log:
        f"{RESULTS}/logs/runs/vllm/{{experiment}}/{{policy}}.log",
    wildcard_constraints:
        experiment="[^/]+",
        policy="[^/]+",
    conda:
        ENGINE_ENV
    # The engine's timing is the measurement: it gets the whole machine (or one GPU).
    threads: all_cores
    resources:
        gpu=int(VLLM["device"].startswith("cuda")),
    params:
        cmd=vllm_serve_command,
    shell:
        "({params.cmd}) > {log} 2>&1"


rule collect_engine_asr:
    input:
        engine_asr_runs(),
    output:
        f"{RESULTS}/summary/engine_asr.parquet",
    log:
        f"{RESULTS}/logs/summary/engine_asr.log",
    conda:
        SIM_ENV
    shell:
        "schedlab collect --out {output} {input} > {log} 2>&1"


rule collect_asr:
    input:
        lambda w: asr_sweep(w.backend),
    output:
        f"{RESULTS}/summary/asr_{{backend}}.parquet",
    log:
        f"{RESULTS}/logs/summary/asr_{{backend}}.log",
    conda:
        SIM_ENV
    shell:
        "schedlab collect --out {output} {input} > {log} 2>&1"


rule collect_fidelity:
    input:
        fidelity_runs(),
    output:
        f"{RESULTS}/summary/fidelity.parquet",
    log:
        f"{RESULTS}/logs/summary/fidelity.log",
    conda:
        SIM_ENV
    shell:
        "schedlab collect --out {output} {input} > {log} 2>&1"
