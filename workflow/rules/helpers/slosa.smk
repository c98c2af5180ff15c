# Helpers of Paper D: SLO-aware priority mapping (slosa.smk): config sections, paths and flags.


SLOSA = config["slosa"]
SLOSA_DIR = f"{RESULTS}/slosa"
#: The step-time sources whose predictor profile has a rule of its own (slosa.smk, measured.smk);
#: every other registered source's is made by slosa_profile_registered.
SLOSA_OWN_PROFILES = ("roofline", "torch", "vllm", "measured")
#: Wildcard patterns of the registered step-time sources, all of them and the others.
SLOSA_SOURCES = "|".join(re.escape(name) for name in registry.source_names())
SLOSA_OTHER_SOURCES = "|".join(re.escape(n) for n in registry.source_names() if n not in SLOSA_OWN_PROFILES) or "(?!)"


def slosa_flags():
    return f"--hardware {SLOSA['hardware']} --model {SLOSA['model']}"


def slosa_notebook_inputs():
    """Paper D's notebook's inputs."""
    studies = ("compare", "schedule", "lengths", "coefficients", "instances")
    return {
        **{s: f"{SLOSA_DIR}/study/{s}.parquet" for s in studies},
        **{f"fit_{s}": f"{SLOSA_DIR}/fit/{s}.json" for s in ("roofline", "torch", "vllm", "reference")},
        **{f"profile_{s}": f"{SLOSA_DIR}/profile/{s}.parquet" for s in ("roofline", "torch", "vllm")},
        "chat": rules.slosa_pools.output.chat,
        "code": rules.slosa_pools.output.code,
    }


NOTEBOOK_INPUTS["slosa"] = slosa_notebook_inputs
