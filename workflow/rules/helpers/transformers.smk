# Helpers of the run of transformers' continuous-batching engine on this machine's CPU
# (transformers.smk): its config section and folder, and the engine runs the
# calibration notebook sets sim beside (this one when it is on, and the GPU runs shipped with
# the package).
from schedlab.fit.engine_runs import shipped_runs

TRANSFORMERS = config["transformers"]
#: The CPU run's folder: its traces, per-request results, steps and provenance.
TRANSFORMERS_RUN = f"{RESULTS}/runs/transformers/cpu"


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
