# Paper B: prompt-length pools -> LLaMA-2-13B roofline step model on 4xA100-80GB -> calibrated on
# the paper's FCFS saturation -> tuning (meta-optimiser beside a run) -> studies with the tuned
# parameters.
from schedlab.errors import SchedlabError
from schedlab.latency.catalogue import hardware

EW = config["ewsjf"]
ED = f"{R}/ewsjf"


def _check_ewsjf():
    """Cross-references of the ewsjf section, as one-line errors."""
    problems = []
    if EW["model"] not in model_names():
        problems.append(f"ewsjf.model {EW['model']!r} is not a known model ({', '.join(model_names())})")
    try:
        hardware(EW["hardware"])
    except SchedlabError as e:
        problems.append(f"ewsjf.hardware: {e}")
    if problems:
        raise ValueError("config.yaml: " + "; ".join(problems))


_check_ewsjf()


def ewsjf_flags():
    return f"--hardware {EW['hardware']} --model {EW['model']}"


def ewsjf_inputs():
    return {
        "steptime": f"{ED}/fit/calibrated.json",
        "short": rules.ewsjf_pools.output.short,
        "long": rules.ewsjf_pools.output.long,
    }


def ewsjf_numbers(values):
    return ",".join(map(str, values))


rule ewsjf_pools:
    output:
        short=f"{ED}/pools/short.parquet",
        long=f"{ED}/pools/long.parquet",
    log:
        f"{R}/logs/ewsjf/pools.log",
    conda:
        "../../envs/cpu.yaml"
    shell:
        "schedlab ewsjf pools --short {output.short} --long {output.long} > {log} 2>&1"


rule ewsjf_steptime:
    output:
        f"{ED}/fit/roofline.json",
    log:
        f"{R}/logs/ewsjf/steptime.log",
    params:
        flags=ewsjf_flags(),
    conda:
        "../../envs/cpu.yaml"
    shell:
        "schedlab ewsjf steptime {params.flags} --out {output} > {log} 2>&1"


rule ewsjf_calibrate:
    input:
        base=rules.ewsjf_steptime.output[0],
        short=rules.ewsjf_pools.output.short,
        long=rules.ewsjf_pools.output.long,
    output:
        f"{ED}/fit/calibrated.json",
    log:
        f"{R}/logs/ewsjf/calibrate.log",
    params:
        flags=ewsjf_flags(),
        c=EW["calibration"],
        seed=EW["seed"],
    conda:
        "../../envs/cpu.yaml"
    shell:
        "schedlab ewsjf calibrate --base {input.base} --short {input.short} --long {input.long} {params.flags} "
        "--saturation-rps {params.c[saturation_rps]} --overload-rate {params.c[overload_rate]} "
        "--n-requests {params.c[n_requests]} --seed {params.seed} --out {output} > {log} 2>&1"


rule ewsjf_tuning:
    input:
        **ewsjf_inputs(),
    output:
        table=f"{ED}/study/tuning.parquet",
        params=f"{ED}/study/params.json",
    log:
        f"{R}/logs/ewsjf/study_tuning.log",
    params:
        flags=ewsjf_flags(),
        t=EW["tuning"],
        seed=EW["seed"],
    conda:
        "../../envs/cpu.yaml"
    shell:
        "schedlab ewsjf study tuning --steptime {input.steptime} --short {input.short} --long {input.long} "
        "{params.flags} --n-requests {params.t[n_requests]} --rate {params.t[rate]} --trial-s {params.t[trial_s]} "
        "--max-trials {params.t[max_trials]} --seed {params.seed} --out {output.table} --out-params {output.params} "
        "> {log} 2>&1"


def ewsjf_study_flags(study):
    """`schedlab ewsjf study` arguments of one configured study."""
    q, seed = EW["queue_count"], EW["seed"]
    if study.startswith("queues-"):
        kind = study.split("-")[1]
        return f"queues --kind {kind} --n-requests {q[kind]} --rate {q['rate']} --seed {seed}"
    if study == "load":
        sizes, rates = ewsjf_numbers(EW["load"]["sizes"]), ewsjf_numbers(EW["load"]["rates"])
        return f"load --sizes {sizes} --rates {rates} --seed {seed}"
    s = EW["starvation"]
    return f"starvation --n-requests {s['n_requests']} --rates {ewsjf_numbers(s['rates'])} --seed {seed}"


rule ewsjf_study:
    input:
        **ewsjf_inputs(),
        tuned=rules.ewsjf_tuning.output.params,
    output:
        f"{ED}/study/{{study}}.parquet",
    log:
        f"{R}/logs/ewsjf/study_{{study}}.log",
    wildcard_constraints:
        study="queues-mixed|queues-short|queues-long|load",
    params:
        flags=ewsjf_flags(),
        study=lambda w: ewsjf_study_flags(w.study),
    conda:
        "../../envs/cpu.yaml"
    shell:
        "schedlab ewsjf study {params.study} --steptime {input.steptime} --short {input.short} --long {input.long} "
        "{params.flags} --params {input.tuned} --out {output} > {log} 2>&1"


rule ewsjf_starvation:
    input:
        **ewsjf_inputs(),
        tuned=rules.ewsjf_tuning.output.params,
    output:
        table=f"{ED}/study/starvation.parquet",
        timeline=f"{ED}/study/starvation_timeline.parquet",
    log:
        f"{R}/logs/ewsjf/study_starvation.log",
    params:
        flags=ewsjf_flags(),
        study=ewsjf_study_flags("starvation"),
    conda:
        "../../envs/cpu.yaml"
    shell:
        "schedlab ewsjf study {params.study} --steptime {input.steptime} --short {input.short} --long {input.long} "
        "{params.flags} --params {input.tuned} --out {output.table} --out-timeline {output.timeline} > {log} 2>&1"
