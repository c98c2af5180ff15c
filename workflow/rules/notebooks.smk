# Notebooks: the jupytext source (notebooks/*.py) is converted, executed by papermill with the
# pipeline's outputs as parameters, and exported to HTML. Figures go to results/figures/<name>/.


def notebook_inputs(name):
    hw = ASR["hardware"]
    common = {
        "utterances": rules.librispeech.output[0],
        "kappa": rules.kappa.output[0],
        "calibration": f"{R}/fit/calibration/{hw}.json",
    }
    if name == "calibration":
        torch_models = config["profile"]["torch_models"]
        models = sorted({e["model"] for e in ASR["experiments"].values()})
        return {
            **common,
            "roofline": [f"{R}/fit/steptime/roofline/{hw}/{m}.json" for m in models],
            "torch": [f"{R}/fit/steptime/torch/local/{m}.json" for m in torch_models],
            "vllm": f"{R}/fit/steptime/vllm/local/{VLLM['model']}.json",
            "fidelity": rules.collect_fidelity.output[0],
            # Paper A's reduced sweep on the Whisper engine beside sim and vllm-sim (its
            # runs are made when the sweep's backend is the engine: `--config backend=vllm`).
            **({"engine_asr": rules.collect_engine_asr.output[0]} if config["backend"] == "vllm" else {}),
        }
    if name == "slosa":
        studies = ("compare", "schedule", "lengths", "coefficients", "instances")
        return {
            **{s: f"{SD}/study/{s}.parquet" for s in studies},
            **{f"fit_{s}": f"{SD}/fit/{s}.json" for s in ("roofline", "torch", "vllm", "reference")},
            **{f"profile_{s}": f"{SD}/profile/{s}.parquet" for s in ("roofline", "torch", "vllm")},
            "chat": rules.slosa_pools.output.chat,
            "code": rules.slosa_pools.output.code,
        }
    if name == "ewsjf":
        studies = ("tuning", "queues-mixed", "queues-short", "queues-long", "load", "starvation", "starvation_timeline")
        return {
            **{s: f"{ED}/study/{s}.parquet" for s in studies},
            "params": rules.ewsjf_tuning.output.params,
            "calibrated": rules.ewsjf_calibrate.output[0],
            "short": rules.ewsjf_pools.output.short,
            "long": rules.ewsjf_pools.output.long,
        }
    if name == "slai":
        return {
            "sweeps": slai_sweeps(),
            "fidelity": slai_fidelity_runs(),
            "capacity": [f"{CD}/capacity/p{slai_share_label(p)}.parquet" for p in SLAI["shares"]],
            "params": rules.slai_params.output[0],
            "throughput": rules.slai_throughput.output.capacity,
            "queue": rules.slai_throughput.output.queue,
            "fit": rules.slai_fit.output[0],
            "calibrated": rules.slai_calibrate.output[0],
            "profile": rules.slai_profile.output[0],
            "pool": rules.slai_lengths.output[0],
        }
    if name == "tournament":
        return {"table": rules.tournament_table.output[0]}
    if name == "asr_extensions":
        return extension_inputs()
    return {**common, "summary": f"{R}/summary/asr_{config['backend']}.parquet"}


rule notebook:
    input:
        unpack(lambda w: {"source": f"notebooks/{w.name}.py", **notebook_inputs(w.name)}),
    output:
        ipynb=f"{R}/notebooks/{{name}}.ipynb",
        html=f"{R}/notebooks/{{name}}.html",
        figures=directory(f"{R}/figures/{{name}}"),
    log:
        f"{R}/logs/notebooks/{{name}}.log",
    params:
        results=R,
        backend=config["backend"],
        tmp=lambda w: f"{R}/notebooks/.{w.name}.source.ipynb",
    wildcard_constraints:
        name="calibration|asr_duration|slosa|ewsjf|slai|tournament|asr_extensions",
    conda:
        "../../envs/cpu.yaml"
    shell:
        "(jupytext --to ipynb --set-kernel python3 -o {params.tmp} {input.source}"
        " && papermill {params.tmp} {output.ipynb} -k python3 --no-progress-bar"
        " -p results_dir {params.results} -p figures_dir {output.figures} -p backend {params.backend}"
        " && jupyter nbconvert --to html --output-dir $(dirname {output.html}) {output.ipynb}"
        " && rm -f {params.tmp}) > {log} 2>&1"
