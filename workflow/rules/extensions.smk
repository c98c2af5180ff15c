# Paper A's future work on its calibrated engine: VAD job sizes on silence-padded clips,
# per-language kappa on a multilingual mix, dynamic policy switching under drift.
EX = config["extensions"]
XD = f"{R}/extensions"
SWITCHING_TABLES = ("summary", "by_phase", "timeline", "switches", "regimes", "phases")


def asr_engine_spec():
    """Paper A's calibrated engine, as the extension and tournament CLIs read it."""
    model = ASR["calibration"]["model"]
    return {**ASR["engine"], "hardware": ASR["hardware"], "model": model, "kappa": rules.kappa.output[0],
            "steptime": f"{R}/fit/steptime/calibrated/{ASR['hardware']}/{model}.json"}


def extension_inputs():
    return {
        "vad_runs": rules.extension_vad.output.runs,
        "vad_accuracy": rules.extension_vad.output.accuracy,
        "kappa_runs": rules.extension_kappa.output.runs,
        "kappa_quality": rules.extension_kappa.output.quality,
        **{f"switching_{t}": f"{XD}/switching/{t}.parquet" for t in SWITCHING_TABLES},
    }


rule extension_vad:
    input:
        utterances=rules.librispeech.output[0],
        steptime=asr_engine_spec()["steptime"],
        kappa=rules.kappa.output[0],
    output:
        runs=f"{XD}/vad/runs.parquet",
        accuracy=f"{XD}/vad/accuracy.parquet",
    log:
        f"{R}/logs/extensions/vad.log",
    params:
        engine=shell_json(asr_engine_spec()),
        spec=shell_json(EX["vad"]),
    conda:
        "../../envs/cpu.yaml"
    shell:
        "schedlab extension vad --utterances {input.utterances} --engine {params.engine} --spec {params.spec} "
        "--out-runs {output.runs} --out-accuracy {output.accuracy} > {log} 2>&1"


rule extension_kappa:
    input:
        utterances=rules.librispeech.output[0],
        steptime=asr_engine_spec()["steptime"],
        kappa=rules.kappa.output[0],
    output:
        runs=f"{XD}/kappa/runs.parquet",
        quality=f"{XD}/kappa/quality.parquet",
    log:
        f"{R}/logs/extensions/kappa.log",
    params:
        engine=shell_json(asr_engine_spec()),
        spec=shell_json(EX["kappa"]),
    conda:
        "../../envs/cpu.yaml"
    shell:
        "schedlab extension kappa --utterances {input.utterances} --engine {params.engine} --spec {params.spec} "
        "--out-runs {output.runs} --out-quality {output.quality} > {log} 2>&1"


rule extension_switching:
    input:
        utterances=rules.librispeech.output[0],
        steptime=asr_engine_spec()["steptime"],
        kappa=rules.kappa.output[0],
    output:
        [f"{XD}/switching/{t}.parquet" for t in SWITCHING_TABLES],
    log:
        f"{R}/logs/extensions/switching.log",
    params:
        engine=shell_json(asr_engine_spec()),
        spec=shell_json(EX["switching"]),
        out=f"{XD}/switching",
    conda:
        "../../envs/cpu.yaml"
    shell:
        "schedlab extension switching --utterances {input.utterances} --engine {params.engine} --spec {params.spec} "
        "--out-dir {params.out} > {log} 2>&1"
