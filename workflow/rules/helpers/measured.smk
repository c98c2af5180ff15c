# Helpers of the step costs from the measured GPU tables (measured.smk): each paper's baseline
# calibration re-run on step costs of the paper's GPU priced by the passes measured on the
# shipped GPUs (schedlab.fit.measured), beside the roofline's, for the calibration notebook.


#: The step-cost sources each paper's calibration is fitted on, the configured one first.
STEP_SOURCES = ("roofline", "measured")


def ewsjf_seed_calibration(source, seed):
    """Paper B's FCFS calibration on step costs of ``source``, fitted on trace ``seed`` alone:
    over the seeds, the band of its compute factor."""
    return f"{EWSJF_DIR}/fit/seeds/{source}/seed{seed}.json"


def measured_notebook_inputs():
    """What the calibration notebook reads of the measured source, per paper, beside the
    configured (roofline) calibrations."""
    return {
        "measured_calibration": f"{RESULTS}/fit/calibration-measured/{ASR['hardware']}.json",
        "ewsjf_calibrated": f"{EWSJF_DIR}/fit/calibrated.json",
        "ewsjf_calibrated_measured": f"{EWSJF_DIR}/fit/calibrated-measured.json",
        **{
            f"ewsjf_seed_fits_{source}": [ewsjf_seed_calibration(source, s) for s in EWSJF["seeds"]]
            for source in STEP_SOURCES
        },
        "ewsjf_queues": f"{EWSJF_DIR}/study/queues-mixed.parquet",
        "ewsjf_queues_measured": f"{EWSJF_DIR}/study/queues-mixed-measured.parquet",
        "slai_calibrated_measured": f"{SLAI_DIR}/fit/calibrated-measured.json",
        "slosa_fit_roofline": f"{SLOSA_DIR}/fit/roofline.json",
        "slosa_fit_measured": f"{SLOSA_DIR}/fit/measured.json",
        "slosa_compare": f"{SLOSA_DIR}/study/compare.parquet",
    }
