# Paper A's future work on its calibrated engine: VAD job sizes on silence-padded clips,
# per-language kappa on a multilingual mix, dynamic policy switching under drift.


rule extension_vad:
    input:
        utterances=rules.librispeech.output[0],
        steptime=asr_engine_spec()["steptime"],
        kappa=rules.kappa.output[0],
    output:
        runs=f"{EXTENSIONS_DIR}/vad/runs.parquet",
        accuracy=f"{EXTENSIONS_DIR}/vad/accuracy.parquet",
    log:
        f"{RESULTS}/logs/extensions/vad.log",
    conda:
        ENGINE_ENV
    params:
        engine=shell_json(asr_engine_spec()),
        spec=shell_json(EXTENSIONS["vad"]),
    shell:
        "schedlab extension vad --utterances {input.utterances} --engine {params.engine} --spec {params.spec} "
        "--out-runs {output.runs} --out-accuracy {output.accuracy} > {log} 2>&1"


rule extension_kappa:
    input:
        utterances=rules.librispeech.output[0],
        steptime=asr_engine_spec()["steptime"],
        kappa=rules.kappa.output[0],
    output:
        runs=f"{EXTENSIONS_DIR}/kappa/runs.parquet",
        quality=f"{EXTENSIONS_DIR}/kappa/quality.parquet",
    log:
        f"{RESULTS}/logs/extensions/kappa.log",
    conda:
        ENGINE_ENV
    params:
        engine=shell_json(asr_engine_spec()),
        spec=shell_json(EXTENSIONS["kappa"]),
    shell:
        "schedlab extension kappa --utterances {input.utterances} --engine {params.engine} --spec {params.spec} "
        "--out-runs {output.runs} --out-quality {output.quality} > {log} 2>&1"


rule extension_switching:
    input:
        utterances=rules.librispeech.output[0],
        steptime=asr_engine_spec()["steptime"],
        kappa=rules.kappa.output[0],
    output:
        [f"{EXTENSIONS_DIR}/switching/{t}.parquet" for t in SWITCHING_TABLES],
    log:
        f"{RESULTS}/logs/extensions/switching.log",
    conda:
        SIM_ENV
    params:
        engine=shell_json(asr_engine_spec()),
        spec=shell_json(EXTENSIONS["switching"]),
        out=lambda w, output: os.path.dirname(output[0]),
    shell:
        "schedlab extension switching --utterances {input.utterances} --engine {params.engine} --spec {params.spec} "
        "--out-dir {params.out} > {log} 2>&1"
