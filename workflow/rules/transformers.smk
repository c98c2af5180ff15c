# transformers' continuous-batching engine on this machine's CPU (`transformers.enabled`, off by
# default): the held-out study of schedlab.backends.transformers.study, at a tiny model's scale.


rule transformers_study:
    output:
        directory(TRANSFORMERS_RUN),
    log:
        f"{RESULTS}/logs/runs/transformers/cpu.log",
    conda:
        engine_env("cpu")
    # The engine's timing is the measurement: it gets the whole machine.
    threads: all_cores
    params:
        flags=transformers_study_flags(),
    shell:
        "python -m schedlab.backends.transformers.study {params.flags} --threads {threads} --out {output} > {log} 2>&1"
