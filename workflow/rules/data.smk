# Data: LibriSpeech test-clean with Whisper token counts (downloads, or reads SCHEDLAB_DATA_MIRROR).


rule librispeech:
    output:
        f"{RESULTS}/data/librispeech_test_clean.parquet",
    log:
        f"{RESULTS}/logs/data/librispeech.log",
    conda:
        ENGINE_ENV
    shell:
        "schedlab data --out {output} > {log} 2>&1"


for _workload, _rates in trace_plan().items():
    _labels = [rate_label(r) for r in _rates]

    rule:
        name:
            rule_name("workload", _workload)
        input:
            rules.librispeech.output[0],
        output:
            [f"{RESULTS}/traces/{_workload}/rate{r}_seed{{seed}}.parquet" for r in _labels],
        log:
            f"{RESULTS}/logs/traces/{_workload}/seed{{seed}}.log",
        wildcard_constraints:
            seed="[0-9]+",
        conda:
            SIM_ENV
        params:
            flags=workload_flags(_workload),
            rates=" ".join(_labels),
        shell:
            "schedlab workload {params.flags} --utterances {input} --rate {params.rates} "
            "--seed {wildcards.seed} --out {output} > {log} 2>&1"


rule whisper_files:
    output:
        directory(f"{RESULTS}/models/{{model}}"),
    log:
        f"{RESULTS}/logs/models/{{model}}.log",
    wildcard_constraints:
        model="whisper-[^/]+",
    conda:
        ENGINE_ENV
    shell:
        "schedlab whisper-files --model {wildcards.model} --out {output} > {log} 2>&1"
