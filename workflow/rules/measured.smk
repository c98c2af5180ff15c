# Step costs from the measured GPU tables: each paper's GPU priced at its own catalogue peaks
# times the fractions measured on the shipped GPUs (`--source measured`), and each paper's
# baseline calibration re-run on them, off the main path: the configured results stay the
# roofline-calibrated ones, and the calibration notebook sets the two side by side.


rule profile_measured:
    output:
        f"{RESULTS}/profile/measured/{{hardware}}/{{model}}.parquet",
    log:
        f"{RESULTS}/logs/profile/measured/{{hardware}}/{{model}}.log",
    conda:
        SIM_ENV
    shell:
        "schedlab profile --source measured --hardware {wildcards.hardware} --model {wildcards.model} "
        "--out {output} > {log} 2>&1"


# Paper A: the configured calibration's targets and seeds on the measured step costs.
rule calibrate_measured:
    input:
        base=f"{RESULTS}/fit/steptime/measured/{{hardware}}/{ASR['calibration']['model']}.json",
        utterances=rules.librispeech.output,
        kappa=rules.kappa.output,
    output:
        f"{RESULTS}/fit/calibration-measured/{{hardware}}.json",
    log:
        f"{RESULTS}/logs/fit/calibration-measured/{{hardware}}.log",
    conda:
        SIM_ENV
    params:
        c=ASR["calibration"],
        engine=engine_flags(),
        targets=calibration_flags(),
    shell:
        "schedlab fit calibrate --base {input.base} --utterances {input.utterances} --kappa {input.kappa} "
        "{params.targets} --requests-per-rate {params.c[requests_per_rate]} "
        "--overload-rate {params.c[overload_rate]} --n-requests {params.c[n_requests]} --fit-only "
        "--hardware {wildcards.hardware} --model {params.c[model]} {params.engine} --out {output} > {log} 2>&1"


# Paper B: the step-time model of the measured costs, its FCFS calibration on every seed (the
# compute factor left for the serving system), on each seed alone for both sources (the
# factor's band over seeds), and Table 3 on it with the configured run's tuned parameters.
rule ewsjf_steptime_measured:
    output:
        f"{EWSJF_DIR}/fit/measured.json",
    log:
        f"{RESULTS}/logs/ewsjf/steptime_measured.log",
    conda:
        SIM_ENV
    params:
        flags=ewsjf_flags(),
    shell:
        "schedlab ewsjf steptime --source measured {params.flags} --out {output} > {log} 2>&1"


rule ewsjf_calibrate_measured:
    input:
        base=rules.ewsjf_steptime_measured.output[0],
        short=rules.ewsjf_pools.output.short,
        long=rules.ewsjf_pools.output.long,
    output:
        f"{EWSJF_DIR}/fit/calibrated-measured.json",
    log:
        f"{RESULTS}/logs/ewsjf/calibrate_measured.log",
    conda:
        SIM_ENV
    params:
        flags=ewsjf_flags(),
        cache=ewsjf_cache_flag(),
        c=EWSJF["calibration"],
        seeds=words(EWSJF["seeds"]),
    shell:
        "schedlab ewsjf calibrate --base {input.base} --short {input.short} --long {input.long} {params.flags} "
        "{params.cache} --saturation-rps {params.c[saturation_rps]} --overload-rate {params.c[overload_rate]} "
        "--n-requests {params.c[n_requests]} --seeds {params.seeds} --out {output} > {log} 2>&1"


rule ewsjf_calibrate_seed:
    input:
        base=f"{EWSJF_DIR}/fit/{{source}}.json",
        short=rules.ewsjf_pools.output.short,
        long=rules.ewsjf_pools.output.long,
    output:
        ewsjf_seed_calibration("{source}", "{seed}"),
    log:
        f"{RESULTS}/logs/ewsjf/calibrate_seeds/{{source}}_seed{{seed}}.log",
    wildcard_constraints:
        source="|".join(STEP_SOURCES),
        seed="[0-9]+",
    conda:
        SIM_ENV
    params:
        flags=ewsjf_flags(),
        cache=ewsjf_cache_flag(),
        c=EWSJF["calibration"],
    shell:
        "schedlab ewsjf calibrate --base {input.base} --short {input.short} --long {input.long} {params.flags} "
        "{params.cache} --saturation-rps {params.c[saturation_rps]} --overload-rate {params.c[overload_rate]} "
        "--n-requests {params.c[n_requests]} --seeds {wildcards.seed} --out {output} > {log} 2>&1"


rule ewsjf_queues_measured:
    input:
        steptime=rules.ewsjf_calibrate_measured.output[0],
        short=rules.ewsjf_pools.output.short,
        long=rules.ewsjf_pools.output.long,
        tuned=rules.ewsjf_tuning.output.params,
    output:
        f"{EWSJF_DIR}/study/queues-mixed-measured.parquet",
    log:
        f"{RESULTS}/logs/ewsjf/study_queues-mixed-measured.log",
    conda:
        SIM_ENV
    params:
        flags=ewsjf_flags(),
        cache=ewsjf_cache_flag(),
        study=ewsjf_study_flags("queues-mixed"),
    shell:
        "schedlab ewsjf study {params.study} --steptime {input.steptime} --short {input.short} --long {input.long} "
        "{params.flags} {params.cache} --params {input.tuned} --out {output} > {log} 2>&1"


# Paper C: the mixed batches priced by the measured costs, fitted with the staircase as the
# roofline's are, then only the serving overhead fitted: the chunk times are predictions.
rule slai_profile_measured:
    output:
        f"{SLAI_DIR}/profile/measured.parquet",
    log:
        f"{RESULTS}/logs/slai/profile_measured.log",
    conda:
        SIM_ENV
    params:
        s=SLAI,
    shell:
        "schedlab slai profile --source measured --hardware {params.s[hardware]} --model {params.s[model]} "
        "--out {output} > {log} 2>&1"


rule slai_fit_measured:
    input:
        rules.slai_profile_measured.output,
    output:
        f"{SLAI_DIR}/fit/measured.json",
    log:
        f"{RESULTS}/logs/slai/fit_measured.log",
    conda:
        SIM_ENV
    params:
        tile=SLAI["tile"],
    shell:
        "schedlab fit steptime --profile {input} --tile {params.tile} --out {output} > {log} 2>&1"


rule slai_calibrate_measured:
    input:
        base=rules.slai_fit_measured.output,
        pool=rules.slai_lengths.output,
    output:
        f"{SLAI_DIR}/fit/calibrated-measured.json",
    log:
        f"{RESULTS}/logs/slai/calibrate_measured.log",
    conda:
        SIM_ENV
    params:
        flags=slai_flags(),
        capacity=SLAI["capacity_rps"],
        shares=words(SLAI["shares"]),
    shell:
        "schedlab slai calibrate --base {input.base} --no-chunk-factors --pool {input.pool} "
        "--capacity-rps {params.capacity} --shares {params.shares} {params.flags} --out {output} > {log} 2>&1"


# Paper D: the predictor's grid priced by the measured costs (fitted by the `slosa_fit` rule):
# nothing is left to calibrate, the paper's single-request times become predictions.
rule slosa_profile_measured:
    output:
        f"{SLOSA_DIR}/profile/measured.parquet",
    log:
        f"{RESULTS}/logs/slosa/profile_measured.log",
    conda:
        SIM_ENV
    params:
        flags=slosa_flags(),
    shell:
        "schedlab slosa profile --source measured {params.flags} --out {output} > {log} 2>&1"
