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
