# Data: LibriSpeech test-clean with Whisper token counts (downloads, or reads SCHEDLAB_DATA_MIRROR).


rule librispeech:
    output:
        f"{R}/data/librispeech_test_clean.parquet",
    log:
        f"{R}/logs/data/librispeech.log",
    conda:
        "../../envs/cpu.yaml"
    shell:
        "schedlab data --out {output} > {log} 2>&1"


rule workload:
    input:
        rules.librispeech.output,
    output:
        f"{R}/traces/{{workload}}/rate{{rate}}_seed{{seed}}.parquet",
    log:
        f"{R}/logs/traces/{{workload}}/rate{{rate}}_seed{{seed}}.log",
    params:
        flags=lambda w: workload_flags(w.workload),
    conda:
        "../../envs/cpu.yaml"
    shell:
        "schedlab workload {params.flags} --utterances {input} --rate {wildcards.rate} "
        "--seed {wildcards.seed} --out {output} > {log} 2>&1"


rule whisper_files:
    output:
        directory(f"{R}/models/{{model}}"),
    log:
        f"{R}/logs/models/{{model}}.log",
    wildcard_constraints:
        model="whisper-[^/]+",
    conda:
        "../../envs/cpu.yaml"
    shell:
        "schedlab whisper-files --model {wildcards.model} --out {output} > {log} 2>&1"
