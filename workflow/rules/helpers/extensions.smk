# Helpers of Paper A's extensions (extensions.smk): config sections, paths and flags.


EXTENSIONS = config["extensions"]
EXTENSIONS_DIR = f"{RESULTS}/extensions"
SWITCHING_TABLES = ("summary", "by_phase", "timeline", "switches", "regimes", "phases")


def asr_engine_spec():
    """Paper A's calibrated engine, as the extension and tournament CLIs read it."""
    model = ASR["calibration"]["model"]
    return {
        **ASR["engine"],
        "hardware": ASR["hardware"],
        "model": model,
        "kappa": rules.kappa.output[0],
        "steptime": f"{RESULTS}/fit/steptime/calibrated/{ASR['hardware']}/{model}.json",
    }


def extension_inputs():
    return {
        "vad_runs": rules.extension_vad.output.runs,
        "vad_accuracy": rules.extension_vad.output.accuracy,
        "kappa_runs": rules.extension_kappa.output.runs,
        "kappa_quality": rules.extension_kappa.output.quality,
        **{f"switching_{t}": f"{EXTENSIONS_DIR}/switching/{t}.parquet" for t in SWITCHING_TABLES},
    }


NOTEBOOK_INPUTS["asr_extensions"] = extension_inputs
