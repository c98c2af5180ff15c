# Helpers of the run of transformers' continuous-batching engine on this machine's CPU
# (transformers.smk): its config section, its folder and checks, and the engine runs the
# calibration notebook sets sim beside (this one when it is on, and the GPU runs shipped with
# the package).
from schedlab.fit.engine_runs import shipped_runs
from schedlab.latency.catalogue import model_arch

TRANSFORMERS = config["transformers"]
#: The CPU run's folder: its traces, per-request results, steps and provenance.
TRANSFORMERS_RUN = f"{RESULTS}/runs/transformers/cpu"


def _check_transformers():
    """Cross-references of the transformers section, as one-line errors."""
    problems = scheduler_problems("held_out", TRANSFORMERS["held_out"], kind=registry.QUEUE, modality=registry.LLM)
    # as the engine refuses them (schedlab.backends.transformers.engine.check_policy), without importing it
    problems += [
        f"held_out: {name!r} plans with a step-time model, which transformers' real engine does not have"
        for name in TRANSFORMERS["held_out"]
        if name in registry.names(registry.QUEUE) and "arena" in registry.entry(name).needs
    ]
    model = TRANSFORMERS["model"]
    if model not in model_names():
        problems.append(f"model {model!r} is not a known model ({', '.join(model_names())})")
    elif model_arch(model).encoder_frames:
        problems.append(f"model {model!r} is an encoder-decoder model; transformers' engine serves decoder models")
    if problems:
        config_error("config: transformers: " + "; ".join(problems))


_check_transformers()


def transformers_study_flags():
    """The study's options from the transformers section (the CPU, float32, every run: no time budget)."""
    t, e = TRANSFORMERS, TRANSFORMERS["engine"]
    return (
        f"--device cpu --dtype float32 --model {t['model']} --requests {t['requests']} "
        f"--prompt-median {t['prompt_median']} --output-median {t['output_median']} "
        f"--fit-loads {words(t['fit_loads'])} --held-out {words(t['held_out'])} "
        f"--held-out-loads {words(t['held_out_loads'])} --seed {t['seed']} --order {e['order']} "
        f"--block-size {e['block_size']} --kv-capacity-blocks {e['kv_capacity_blocks']} "
        f"--max-num-batched-tokens {e['max_num_batched_tokens']} --max-num-seqs {e['max_num_seqs']} --budget-s inf"
    )


def transformers_runs():
    """The calibration notebook's engine runs of transformers' engine: the CPU run when it is on,
    and every GPU run shipped with the package (none: no input)."""
    runs = ([TRANSFORMERS_RUN] if TRANSFORMERS["enabled"] else []) + [str(p) for p in shipped_runs().values()]
    return {"transformers_runs": runs} if runs else {}
