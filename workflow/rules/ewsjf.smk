# Paper B: prompt-length pools -> LLaMA-2-13B roofline step model on 4xA100-80GB -> calibrated on
# the paper's FCFS saturation -> tuning (meta-optimiser beside a run) -> studies with the tuned
# parameters.


rule ewsjf_pools:
    output:
        short=f"{EWSJF_DIR}/pools/short.parquet",
        long=f"{EWSJF_DIR}/pools/long.parquet",
    log:
        f"{RESULTS}/logs/ewsjf/pools.log",
    conda:
        SIM_ENV
    shell:
        "schedlab ewsjf pools --short {output.short} --long {output.long} > {log} 2>&1"


rule ewsjf_steptime:
    output:
        f"{EWSJF_DIR}/fit/roofline.json",
    log:
        f"{RESULTS}/logs/ewsjf/steptime.log",
    conda:
        SIM_ENV
    params:
        flags=ewsjf_flags(),
    shell:
        "schedlab ewsjf steptime {params.flags} --out {output} > {log} 2>&1"


rule ewsjf_calibrate:
    input:
        base=rules.ewsjf_steptime.output[0],
        short=rules.ewsjf_pools.output.short,
        long=rules.ewsjf_pools.output.long,
    output:
        f"{EWSJF_DIR}/fit/calibrated.json",
    log:
        f"{RESULTS}/logs/ewsjf/calibrate.log",
    conda:
        SIM_ENV
    params:
        flags=ewsjf_flags(),
        cache=ewsjf_cache_flag(),
        c=EWSJF["calibration"],
        seeds=words(EWSJF["seeds"]),
    shell:
        "schedlab ewsjf calibrate --base {input.base} --short {input.short} --long {input.long} {params.flags} "
        "{params.cache} "
        "--saturation-rps {params.c[saturation_rps]} --overload-rate {params.c[overload_rate]} "
        "--n-requests {params.c[n_requests]} --seeds {params.seeds} --out {output} > {log} 2>&1"


rule ewsjf_tuning:
    input:
        **ewsjf_inputs(),
    output:
        table=f"{EWSJF_DIR}/study/tuning.parquet",
        params=f"{EWSJF_DIR}/study/params.json",
    log:
        f"{RESULTS}/logs/ewsjf/study_tuning.log",
    conda:
        SIM_ENV
    params:
        flags=ewsjf_flags(),
        cache=ewsjf_cache_flag(),
        t=EWSJF["tuning"],
        seed=EWSJF["seeds"][0],
    shell:
        "schedlab ewsjf study tuning --steptime {input.steptime} --short {input.short} --long {input.long} "
        "{params.flags} {params.cache} --n-requests {params.t[n_requests]} --rate {params.t[rate]} --trial-s {params.t[trial_s]} "
        "--max-trials {params.t[max_trials]} --seed {params.seed} --out {output.table} --out-params {output.params} "
        "> {log} 2>&1"


rule ewsjf_study:
    input:
        **ewsjf_inputs(),
        tuned=rules.ewsjf_tuning.output.params,
    output:
        f"{EWSJF_DIR}/study/{{study}}.parquet",
    log:
        f"{RESULTS}/logs/ewsjf/study_{{study}}.log",
    wildcard_constraints:
        study="queues-mixed|queues-short|queues-long|load",
    conda:
        SIM_ENV
    params:
        flags=ewsjf_flags(),
        cache=ewsjf_cache_flag(),
        study=lambda w: ewsjf_study_flags(w.study),
    shell:
        "schedlab ewsjf study {params.study} --steptime {input.steptime} --short {input.short} --long {input.long} "
        "{params.flags} {params.cache} --params {input.tuned} --out {output} > {log} 2>&1"


rule ewsjf_starvation:
    input:
        **ewsjf_inputs(),
        tuned=rules.ewsjf_tuning.output.params,
    output:
        table=f"{EWSJF_DIR}/study/starvation.parquet",
        timeline=f"{EWSJF_DIR}/study/starvation_timeline.parquet",
    log:
        f"{RESULTS}/logs/ewsjf/study_starvation.log",
    conda:
        SIM_ENV
    params:
        flags=ewsjf_flags(),
        cache=ewsjf_cache_flag(),
        study=ewsjf_study_flags("starvation"),
    shell:
        "schedlab ewsjf study {params.study} --steptime {input.steptime} --short {input.short} --long {input.long} "
        "{params.flags} {params.cache} --params {input.tuned} --out {output.table} "
        "--out-timeline {output.timeline} > {log} 2>&1"


# Paper B tested without tuning against the prefix cache: Table 3 at each sharing level (the long
# prompts as documents asked 1..q times), FCFS calibrated anew at each level, every other row a
# prediction.
rule ewsjf_sharing:
    input:
        base=rules.ewsjf_steptime.output[0],
        short=rules.ewsjf_pools.output.short,
        long=rules.ewsjf_pools.output.long,
        tuned=rules.ewsjf_tuning.output.params,
    output:
        f"{EWSJF_DIR}/study/sharing.parquet",
    log:
        f"{RESULTS}/logs/ewsjf/study_sharing.log",
    conda:
        SIM_ENV
    params:
        flags=ewsjf_flags(),
        levels=words(EWSJF["sharing"]["levels"]),
        c=EWSJF["calibration"],
        q=EWSJF["queue_count"],
        seed=EWSJF["seeds"][0],
    shell:
        "schedlab ewsjf sharing --base {input.base} --short {input.short} --long {input.long} {params.flags} "
        "--params {input.tuned} --levels {params.levels} --n-requests {params.q[mixed]} --rate {params.q[rate]} "
        "--saturation-rps {params.c[saturation_rps]} --overload-rate {params.c[overload_rate]} "
        "--calibration-requests {params.c[n_requests]} --seed {params.seed} --out {output} > {log} 2>&1"


# Paper B's throughput claim on a real engine (`ewsjf.engine`): the mixed workload with prompts
# scaled to the local vLLM engine (schedlab.ewsjf.scaled), replayed in overload through `vllm
# serve` under each policy, and on sim with a step-time model fitted to the FCFS server's steps.
rule ewsjf_engine_trace:
    input:
        short=rules.ewsjf_pools.output.short,
        long=rules.ewsjf_pools.output.long,
    output:
        f"{EWSJF_DIR}/engine/trace.parquet",
    log:
        f"{RESULTS}/logs/ewsjf/engine_trace.log",
    conda:
        SIM_ENV
    params:
        e=EWSJF_ENGINE,
        scale=lambda w: ewsjf_engine().prompt_scale,
        model=VLLM["model"],
        mean_output=EWSJF_MEAN_OUTPUT,
    shell:
        "schedlab workload --kind mixed --pool short={input.short} --pool long={input.long} "
        "--param mean_output={params.mean_output} --n-requests {params.e[n_requests]} --rate {params.e[rate]} "
        "--seed 0 --model {params.model} --too-long clip --prompt-scale {params.scale} --out {output} > {log} 2>&1"


rule ewsjf_engine_serve:
    input:
        rules.ewsjf_engine_trace.output,
    output:
        directory(f"{EWSJF_DIR}/engine/vllm/{{policy}}"),
    log:
        f"{RESULTS}/logs/ewsjf/engine_vllm_{{policy}}.log",
    wildcard_constraints:
        policy="[^/]+",
    conda:
        ENGINE_ENV
    # The engine's timing is the measurement: it gets the whole machine (or one GPU).
    threads: all_cores
    resources:
        gpu=int(VLLM["device"].startswith("cuda")),
    params:
        e=EWSJF_ENGINE,
        model=VLLM["model"],
        folder=str(model_dir(VLLM["model"])),
        engine=lambda w: vllm_engine_flags(ewsjf_engine().max_num_seqs, ewsjf_engine().max_num_batched_tokens),
        server=lambda w: f"{RESULTS}/logs/ewsjf/engine_servers/{w.policy}.log",
        attempts=VLLM["replay_attempts"],
    shell:
        "schedlab vllm-serve --policy {wildcards.policy} --model {params.model} --model-folder {params.folder} "
        "--traces {input} --rates {params.e[rate]} --repeats {params.e[repeats]} --workload ewsjf-mixed-scaled "
        "--replay-attempts {params.attempts} "
        "{params.engine} --server-log {params.server} --out-dir {output} > {log} 2>&1"


rule ewsjf_engine_fit:
    input:
        f"{EWSJF_DIR}/engine/vllm/fcfs",
    output:
        f"{EWSJF_DIR}/engine/fcfs_steps.json",
    log:
        f"{RESULTS}/logs/ewsjf/engine_fit.log",
    conda:
        SIM_ENV
    shell:
        "schedlab fit engine-steps --steps {input} --out-all {output} > {log} 2>&1"


rule ewsjf_engine_simulate:
    input:
        trace=rules.ewsjf_engine_trace.output,
        steptime=rules.ewsjf_engine_fit.output,
    output:
        results=f"{EWSJF_DIR}/engine/sim/{{policy}}.parquet",
        summary=f"{EWSJF_DIR}/engine/sim/{{policy}}.json",
    log:
        f"{RESULTS}/logs/ewsjf/engine_sim_{{policy}}.log",
    wildcard_constraints:
        policy="[^/]+",
    conda:
        SIM_ENV
    params:
        e=EWSJF_ENGINE,
        model=VLLM["model"],
        engine=lambda w: local_engine_flags(
            VLLM["model"], ewsjf_engine().max_num_seqs, ewsjf_engine().max_num_batched_tokens
        ),
    shell:
        "schedlab simulate --backend sim --policy {wildcards.policy} --trace {input.trace} --steptime {input.steptime} "
        "--steptime-fit 'FCFS server steps' --workload ewsjf-mixed-scaled --rate {params.e[rate]} --model "
        "{params.model} {params.engine} --out-results {output.results} --out-summary {output.summary} > {log} 2>&1"
