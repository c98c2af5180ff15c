# Runs: every experiment x policy x rate x seed on the configured backend, then one table.


rule simulate:
    input:
        trace=lambda w: f"{R}/traces/{ASR['experiments'][w.experiment]['workload']}/rate{w.rate}_seed{w.seed}.parquet",
        steptime=lambda w: f"{R}/fit/steptime/calibrated/{ASR['hardware']}/{ASR['experiments'][w.experiment]['model']}.json",
        kappa=rules.kappa.output,
    output:
        results=f"{R}/runs/sim/{{experiment}}/{{policy}}/rate{{rate}}_seed{{seed}}.parquet",
        summary=f"{R}/runs/sim/{{experiment}}/{{policy}}/rate{{rate}}_seed{{seed}}.json",
    log:
        f"{R}/logs/runs/sim/{{experiment}}/{{policy}}/rate{{rate}}_seed{{seed}}.log",
    params:
        model=lambda w: ASR["experiments"][w.experiment]["model"],
        workload=lambda w: ASR["experiments"][w.experiment]["workload"],
        hardware=ASR["hardware"],
        engine=engine_flags(),
    conda:
        "../../envs/cpu.yaml"
    shell:
        "schedlab simulate --trace {input.trace} --policy {wildcards.policy} --steptime {input.steptime} "
        "--kappa {input.kappa} --hardware {params.hardware} --model {params.model} {params.engine} "
        "--workload {params.workload} --rate {wildcards.rate} --seed {wildcards.seed} "
        "--out-results {output.results} --out-summary {output.summary} > {log} 2>&1"


rule collect_asr:
    input:
        run_summaries("sim"),
    output:
        f"{R}/summary/asr_sim.parquet",
    log:
        f"{R}/logs/summary/asr_sim.log",
    conda:
        "../../envs/cpu.yaml"
    shell:
        "schedlab collect --out {output} {input} > {log} 2>&1"
