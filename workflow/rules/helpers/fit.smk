# Helpers of the fits (fit.smk): the calibration's targets and alternatives, and the calibration
# notebook's inputs.


#: The calibration's alternatives beside the configured one (``calibrate_variant``): without
#: the step-time target, with the front end modelled the other way, fitted on the first trace
#: seed alone instead of the median over every seed (what one draw of arrivals gives), and with
#: the front end a queue whose service time is measured (``front_end_cost``), not fitted.
CALIBRATION_VARIANTS = ("without-step-target", "other-front-end", "first-seed", "measured-front-end")


def front_end_fit():
    """The measured front-end cost of paper A's calibrated Whisper model."""
    return f"{RESULTS}/fit/front-end/local/{ASR['calibration']['model']}.json"


def calibration_flags(variant=None):
    """The targets and trace seeds of paper A's calibration, as configured or as one of its
    alternatives."""
    c = ASR["calibration"]
    step = variant != "without-step-target"
    station = c["front_end_station"] != (variant == "other-front-end") and variant != "measured-front-end"
    low, high = c["step_ms_at_load"]
    return (
        f"--saturation-rps {c['saturation_rps']} --seeds {words(ASR['seeds'])}"
        + (f" --fit-seeds {ASR['seeds'][0]}" if variant == "first-seed" else "")
        + (f" --step-ms {low} {high}" if step else "")
        + (" --station" if station else "")
        + (f" --station-measured {front_end_fit()}" if variant == "measured-front-end" else "")
    )


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
        # sim's requests over the same traces with those held-out fits (where sim's latency
        # differs from the engine's, part by part).
        "heldout_sim_runs": [
            run_path("sim", f"{n}{HELD_OUT}", p, r, s, "parquet")
            for n in served
            for p in EXPERIMENTS[n]["policies"]
            for s in config["seeds"]
            for r in EXPERIMENTS[n]["rates"]
        ],
        "fidelity": rules.collect_fidelity.output[0],
        # vLLM's scheduler's own CPU time per step, and its fit.
        "scheduler_cost_table": rules.scheduler_cost.output.table,
        "scheduler_cost_fit": rules.scheduler_cost.output.fit,
        "calibration_variants": [
            f"{RESULTS}/fit/calibration-variants/{ASR['hardware']}/{v}.json" for v in CALIBRATION_VARIANTS
        ],
        # GPU profiles shipped with the package, their fits, and the factors the papers'
        # calibrations settled on (paper A's is `calibration`), to hold against them.
        "gpu_profiles": [str(shipped_path(h, m)) for h in config["profile"]["gpu"] for m in shipped_models(h)],
        "gpu_fits": [gpu_fit(h, m) for h in config["profile"]["gpu"] for m in shipped_models(h)],
        "slai_calibrated": f"{SLAI_DIR}/fit/calibrated.json",
        # Each paper's calibration on the step costs from the measured GPU tables (measured.smk).
        **measured_notebook_inputs(),
        # Paper A's reduced sweep on the Whisper engine beside sim and vllm-sim (its
        # runs are made when the sweep's backend is the engine: `--config backend=vllm`).
        **({"engine_asr": rules.collect_engine_asr.output[0]} if config["backend"] == "vllm" else {}),
        # transformers' engine beside sim: the CPU run (`transformers.enabled`) and the shipped GPU runs.
        **transformers_runs(),
    }


NOTEBOOK_INPUTS["calibration"] = calibration_notebook_inputs
