# Fit: kappa per language, step-time regressions, and the calibration to the paper's FCFS
# baseline (applied unchanged to every other model on that hardware).


rule kappa:
    input:
        rules.librispeech.output,
    output:
        f"{RESULTS}/fit/kappa.json",
    log:
        f"{RESULTS}/logs/fit/kappa.log",
    conda:
        ENGINE_ENV
    shell:
        "schedlab fit kappa --librispeech {input} --out {output} > {log} 2>&1"


rule fit_steptime:
    input:
        f"{RESULTS}/profile/{{source}}/{{hardware}}/{{model}}.parquet",
    output:
        f"{RESULTS}/fit/steptime/{{source}}/{{hardware}}/{{model}}.json",
    log:
        f"{RESULTS}/logs/fit/steptime/{{source}}/{{hardware}}/{{model}}.log",
    wildcard_constraints:
        source="roofline|measured|torch|vllm",
    conda:
        SIM_ENV
    shell:
        "schedlab fit steptime --profile {input} --out {output} > {log} 2>&1"


# The GPU profiles shipped with the package (torch passes timed on a real GPU by the profiling
# suite, src/schedlab/assets/profiles/<gpu>/), every model of one GPU fitted in one job.
for _gpu in config["profile"]["gpu"]:

    rule:
        name:
            rule_name("fit_gpu", _gpu)
        input:
            [str(shipped_path(_gpu, m)) for m in shipped_models(_gpu)],
        output:
            [gpu_fit(_gpu, m) for m in shipped_models(_gpu)],
        log:
            f"{RESULTS}/logs/fit/steptime/gpu/{_gpu}.log",
        conda:
            SIM_ENV
        shell:
            "schedlab fit steptime --profile {input} --out {output} > {log} 2>&1"


# The step-time model of a served experiment's simulations, fitted to the engine's own steps
# (every step its scheduler logged), one server at a time: each `vllm serve` runs its steps at a
# speed of its own. One fit per rate on the server's steps of every other rate, so no simulated
# rate sees its own steps; and one on all of them.
for _served in served_experiments():
    _exp = EXPERIMENTS[_served]

    rule:
        name:
            rule_name("fit_engine_steps", _served)
        input:
            engine_run_dir(_served, "{policy}"),
        output:
            held_out=[held_out_fit(_served, r) for r in _exp["rates"]],
            all_rates=held_out_fit(_served, None),
        log:
            f"{RESULTS}/logs/fit/steptime/served/{_served}/{{policy}}_seed{{seed}}.log",
        wildcard_constraints:
            policy="|".join(_exp["policies"]),
            seed="[0-9]+",
        conda:
            SIM_ENV
        params:
            rates=" ".join(rate_label(r) for r in _exp["rates"]),
        shell:
            "schedlab fit engine-steps --steps {input} --seed {wildcards.seed} --held-out {params.rates} "
            "--out {output.held_out} --out-all {output.all_rates} > {log} 2>&1"


rule calibrate:
    input:
        base=f"{RESULTS}/fit/steptime/roofline/{{hardware}}/{ASR['calibration']['model']}.json",
        utterances=rules.librispeech.output,
        kappa=rules.kappa.output,
    output:
        f"{RESULTS}/fit/calibration/{{hardware}}.json",
    log:
        f"{RESULTS}/logs/fit/calibration/{{hardware}}.log",
    conda:
        SIM_ENV
    params:
        c=ASR["calibration"],
        engine=engine_flags(),
        targets=calibration_flags(),
    shell:
        "schedlab fit calibrate --base {input.base} --utterances {input.utterances} --kappa {input.kappa} "
        "{params.targets} --requests-per-rate {params.c[requests_per_rate]} "
        "--overload-rate {params.c[overload_rate]} --n-requests {params.c[n_requests]} "
        "--alt-duration-s {params.c[alternative][duration_s]} --alt-max-in-flight {params.c[alternative][max_in_flight]} "
        "--hardware {wildcards.hardware} "
        "--model {params.c[model]} {params.engine} --out {output} > {log} 2>&1"


# The calibration's alternatives (CALIBRATION_VARIANTS), fitted alone for the calibration
# notebook.
rule calibrate_variant:
    input:
        base=f"{RESULTS}/fit/steptime/roofline/{{hardware}}/{ASR['calibration']['model']}.json",
        utterances=rules.librispeech.output,
        kappa=rules.kappa.output,
        front_end=lambda w: [front_end_fit()] if w.variant == "measured-front-end" else [],
    output:
        f"{RESULTS}/fit/calibration-variants/{{hardware}}/{{variant}}.json",
    log:
        f"{RESULTS}/logs/fit/calibration-variants/{{hardware}}/{{variant}}.log",
    wildcard_constraints:
        variant="|".join(CALIBRATION_VARIANTS),
    conda:
        SIM_ENV
    params:
        c=ASR["calibration"],
        engine=engine_flags(),
        targets=lambda w: calibration_flags(w.variant),
    shell:
        "schedlab fit calibrate --base {input.base} --utterances {input.utterances} --kappa {input.kappa} "
        "{params.targets} --requests-per-rate {params.c[requests_per_rate]} "
        "--overload-rate {params.c[overload_rate]} --n-requests {params.c[n_requests]} --fit-only "
        "--hardware {wildcards.hardware} --model {params.c[model]} {params.engine} --out {output} > {log} 2>&1"


rule apply_calibration:
    input:
        base=f"{RESULTS}/fit/steptime/roofline/{{hardware}}/{{model}}.json",
        calibration=f"{RESULTS}/fit/calibration/{{hardware}}.json",
    output:
        f"{RESULTS}/fit/steptime/calibrated/{{hardware}}/{{model}}.json",
    log:
        f"{RESULTS}/logs/fit/steptime/calibrated/{{hardware}}/{{model}}.log",
    conda:
        SIM_ENV
    shell:
        "schedlab fit apply --base {input.base} --calibrated {input.calibration} --out {output} > {log} 2>&1"
