# Helpers of Paper A's sweeps on the engine served over HTTP (run.smk): config sections, paths and flags.


def vllm_serve_inputs(w):
    """Traces of every rate and seed of an engine experiment, kappa, and a Whisper model folder."""
    exp = EXPERIMENTS[w.experiment]
    traces = [
        f"{RESULTS}/traces/{exp['workload']}/rate{rate_label(r)}_seed{s}.parquet"
        for s in config["seeds"]
        for r in exp["rates"]
    ]
    folder = [rules.whisper_files.output[0].format(model=exp["model"])] if exp["model"].startswith("whisper") else []
    return {"traces": traces, "kappa": rules.kappa.output[0], "folder": folder}


def vllm_serve_command(w, input, output):
    """One `schedlab vllm-serve` per seed: a server started with the policy, every rate
    replayed the experiment's `repeats` times (default `vllm.repeats`), then the server stopped."""
    exp = EXPERIMENTS[w.experiment]
    eng = exp["engine"]
    folder = input.folder[0] if input.folder else str(model_dir(exp["model"]))
    labels = [rate_label(r) for r in exp["rates"]]
    cmds = []
    for s in config["seeds"]:
        traces = [t for t in input.traces if t.endswith(f"_seed{s}.parquet")]
        cmds.append(
            f"schedlab vllm-serve --policy {w.policy} --kappa {input.kappa} --model {exp['model']} "
            f"--model-folder {folder} --traces {' '.join(traces)} --rates {' '.join(labels)} "
            f"--workload {exp['workload']} --seed {s} --repeats {exp.get('repeats', VLLM['repeats'])} "
            f"--replay-attempts {VLLM['replay_attempts']} "
            f"{vllm_engine_flags(eng['max_num_seqs'], eng['max_num_batched_tokens'])} "
            f"--server-log {RESULTS}/logs/runs/vllm/{w.experiment}/{w.policy}.server_seed{s}.log --out-dir {output[0]}"
        )
    return " && ".join(cmds)


def asr_notebook_inputs():
    """Paper A's notebook's inputs: the sweep's summary table on the configured backend."""
    return {
        **asr_notebook_common(),
        "summary": f"{RESULTS}/summary/asr_{config['backend']}.parquet",
        # The calibration fitted on the first trace seed alone, beside the configured median fit.
        "calibration_first_seed": f"{RESULTS}/fit/calibration-variants/{ASR['hardware']}/first-seed.json",
        # The front end's measured CPU cost per clip, and the calibration with it as the station.
        "front_end_table": f"{RESULTS}/profile/front-end/local/{ASR['calibration']['model']}.parquet",
        "front_end_fit": front_end_fit(),
        "calibration_measured_front_end": f"{RESULTS}/fit/calibration-variants/{ASR['hardware']}/measured-front-end.json",
    }


NOTEBOOK_INPUTS["asr_duration"] = asr_notebook_inputs
