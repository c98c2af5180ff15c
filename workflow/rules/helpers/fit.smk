# Helpers of The calibration notebook's inputs (fit.smk): config sections, paths, flags and checks.


def calibration_notebook_inputs():
    """The calibration notebook's inputs."""
    hw = ASR["hardware"]
    torch_models = config["profile"]["torch_models"]
    models = sorted({e["model"] for e in ASR["experiments"].values()})
    fitted = (
        [("roofline", hw, m) for m in models]
        + [("torch", "local", m) for m in torch_models]
        + [("vllm", "local", VLLM["model"])]
    )
    # Served experiments whose own steps are fitted: the decoder study's, and paper A's
    # reduced Whisper sweep when it runs.
    served = ["fidelity-engine"] + (
        [f"{n}-engine" for n in VLLM["reduced_experiments"]] if config["backend"] == "vllm" else []
    )
    return {
        **asr_notebook_common(),
        # Step-time fits and the profiles they were fitted to, in the same order.
        "fits": [f"{RESULTS}/fit/steptime/{s}/{h}/{m}.json" for s, h, m in fitted],
        "profiles": [f"{RESULTS}/profile/{s}/{h}/{m}.parquet" for s, h, m in fitted],
        # Fits of the served runs' own steps (each rate held out, and all rates) and the
        # engine jobs' folders holding those steps (`*.steps.parquet`).
        "held_out_fits": [
            held_out_fit(n, r, p, s)
            for n in served
            for p in EXPERIMENTS[n]["policies"]
            for s in config["seeds"]
            for r in EXPERIMENTS[n]["rates"]
        ],
        "all_rates_fits": [
            held_out_fit(n, None, p, s) for n in served for p in EXPERIMENTS[n]["policies"] for s in config["seeds"]
        ],
        "engine_steps": [engine_run_dir(n, p) for n in served for p in EXPERIMENTS[n]["policies"]],
        "fidelity": rules.collect_fidelity.output[0],
        # GPU profiles shipped with the package, their fits, and the factors the papers'
        # calibrations settled on (paper A's is `calibration`), to hold against them.
        "gpu_profiles": [str(shipped_path(h, m)) for h in config["profile"]["gpu"] for m in shipped_models(h)],
        "gpu_fits": [gpu_fit(h, m) for h in config["profile"]["gpu"] for m in shipped_models(h)],
        "slai_calibrated": f"{SLAI_DIR}/fit/calibrated.json",
        # Paper A's reduced sweep on the Whisper engine beside sim and vllm-sim (its
        # runs are made when the sweep's backend is the engine: `--config backend=vllm`).
        **({"engine_asr": rules.collect_engine_asr.output[0]} if config["backend"] == "vllm" else {}),
    }


NOTEBOOK_INPUTS["calibration"] = calibration_notebook_inputs
