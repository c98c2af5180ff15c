# Paper C: openchat lengths -> roofline profile of mixed batches (tile staircase) -> OLS fit ->
# calibration on the measured chunk times -> rate sweeps per (paying share, scheduler) ->
# serving capacity per share; engine-model parameter studies; throughput optimality; Fig. 7's
# schedulers on vLLM's real scheduler beside sim. The sweep and the capacity search run on the
# configured backend: `sim`, or vLLM's scheduler carrying out each step plan (`vllm-sim`; also
# with `backend=vllm`, since paper C's Mistral-7B on a 48 GB GPU is not a CPU engine).
SLAI = config["slai"]
SLAI_FID = SLAI["fidelity"]
SLAI_BACKEND = config["backend"] if config["backend"] in SIM_BACKENDS else "vllm-sim"
CD = f"{R}/slai"
SLAI_TABLES = ("summary", "buckets", "timeline")


def _check_slai():
    from schedlab.slai.registry import SCHEDULERS

    names = SLAI["schedulers"] + SLAI["throughput_schedulers"] + SLAI_FID["schedulers"]
    problems = [f"unknown scheduler {s!r}" for s in names if s not in SCHEDULERS]
    if SLAI["hardware"] not in hardware_names():
        problems.append(f"slai.hardware {SLAI['hardware']!r} is not in the catalogue")
    if SLAI["model"] not in model_names():
        problems.append(f"slai.model {SLAI['model']!r} is not a known model")
    if problems:
        raise ValueError("config.yaml: slai: " + "; ".join(problems))


_check_slai()


def slai_flags():
    return (
        f"--hardware {SLAI['hardware']} --model {SLAI['model']} "
        f"--duration-s {SLAI['duration_s']} --warmup-s {SLAI['warmup_s']}"
    )


def slai_share_label(share):
    return f"{round(share * 100)}"


def slai_sweep_dir(share, scheduler):
    return f"{CD}/sweep/p{slai_share_label(share)}/{scheduler}"


def slai_fidelity_runs():
    """The fidelity sweep's summaries, per backend and scheduler."""
    return [f"{CD}/fidelity/{b}/{s}/summary.parquet" for b in SIM_BACKENDS for s in SLAI_FID["schedulers"]]


def slai_sweeps():
    """Every sweep table of every (share, scheduler)."""
    return [
        f"{slai_sweep_dir(p, s)}/{t}.parquet" for p in SLAI["shares"] for s in SLAI["schedulers"] for t in SLAI_TABLES
    ]


rule slai_lengths:
    output:
        f"{CD}/lengths.parquet",
    log:
        f"{R}/logs/slai/lengths.log",
    conda:
        "../../envs/cpu.yaml"
    shell:
        "schedlab slai lengths --out {output} > {log} 2>&1"


rule slai_profile:
    output:
        f"{CD}/profile/roofline.parquet",
    log:
        f"{R}/logs/slai/profile.log",
    params:
        s=SLAI,
    conda:
        "../../envs/cpu.yaml"
    shell:
        "schedlab slai profile --hardware {params.s[hardware]} --model {params.s[model]} "
        "--tile {params.s[tile]} --out {output} > {log} 2>&1"


rule slai_fit:
    input:
        rules.slai_profile.output,
    output:
        f"{CD}/fit/roofline.json",
    log:
        f"{R}/logs/slai/fit.log",
    params:
        tile=SLAI["tile"],
    conda:
        "../../envs/cpu.yaml"
    shell:
        "schedlab fit steptime --profile {input} --tile {params.tile} --out {output} > {log} 2>&1"


rule slai_calibrate:
    input:
        base=rules.slai_fit.output,
        pool=rules.slai_lengths.output,
    output:
        f"{CD}/fit/calibrated.json",
    log:
        f"{R}/logs/slai/calibrate.log",
    params:
        flags=slai_flags(),
        capacity=SLAI["capacity_rps"],
        shares=",".join(map(str, SLAI["shares"])),
    conda:
        "../../envs/cpu.yaml"
    shell:
        "schedlab slai calibrate --base {input.base} --pool {input.pool} --capacity-rps {params.capacity} "
        "--shares {params.shares} {params.flags} --out {output} > {log} 2>&1"


rule slai_sweep:
    input:
        pool=rules.slai_lengths.output,
        steptime=rules.slai_calibrate.output,
    output:
        [f"{CD}/sweep/p{{share}}/{{scheduler}}/{t}.parquet" for t in SLAI_TABLES],
    log:
        f"{R}/logs/slai/sweep_p{{share}}_{{scheduler}}.log",
    wildcard_constraints:
        share="[0-9]+",
    params:
        flags=slai_flags(),
        backend=SLAI_BACKEND,
        rates=",".join(map(str, SLAI["rates"])),
        seeds=",".join(map(str, SLAI["seeds"])),
        share=lambda w: int(w.share) / 100,
        out=lambda w: f"{CD}/sweep/p{w.share}/{w.scheduler}",
    conda:
        "../../envs/cpu.yaml"
    shell:
        "schedlab slai sweep --scheduler {wildcards.scheduler} --share {params.share} --rates {params.rates} "
        "--seeds {params.seeds} --pool {input.pool} --steptime {input.steptime} {params.flags} "
        "--backend {params.backend} --out-dir {params.out} > {log} 2>&1"


rule slai_fidelity:
    input:
        pool=rules.slai_lengths.output,
        steptime=rules.slai_calibrate.output,
    output:
        [f"{CD}/fidelity/{{backend}}/{{scheduler}}/{t}.parquet" for t in SLAI_TABLES],
    log:
        f"{R}/logs/slai/fidelity_{{backend}}_{{scheduler}}.log",
    wildcard_constraints:
        backend="|".join(SIM_BACKENDS),
    params:
        flags=f"--hardware {SLAI['hardware']} --model {SLAI['model']}",
        rates=",".join(map(str, SLAI_FID["rates"])),
        share=SLAI_FID["share"],
        run=f"--duration-s {SLAI_FID['duration_s']} --warmup-s {SLAI_FID['warmup_s']}",
        out=lambda w: f"{CD}/fidelity/{w.backend}/{w.scheduler}",
    conda:
        "../../envs/cpu.yaml"
    shell:
        "schedlab slai sweep --scheduler {wildcards.scheduler} --share {params.share} --rates {params.rates} "
        "--seeds 0 --pool {input.pool} --steptime {input.steptime} {params.flags} {params.run} "
        "--backend {wildcards.backend} --out-dir {params.out} > {log} 2>&1"


rule slai_capacity:
    input:
        pool=rules.slai_lengths.output,
        steptime=rules.slai_calibrate.output,
        summaries=lambda w: [f"{CD}/sweep/p{w.share}/{s}/summary.parquet" for s in SLAI["schedulers"]],
    output:
        f"{CD}/capacity/p{{share}}.parquet",
    log:
        f"{R}/logs/slai/capacity_p{{share}}.log",
    wildcard_constraints:
        share="[0-9]+",
    params:
        flags=slai_flags(),
        backend=SLAI_BACKEND,
        iterations=SLAI["capacity_iterations"],
    conda:
        "../../envs/cpu.yaml"
    shell:
        "schedlab slai capacity {input.summaries} --iterations {params.iterations} --pool {input.pool} "
        "--steptime {input.steptime} {params.flags} --backend {params.backend} --out {output} > {log} 2>&1"


rule slai_params:
    input:
        pool=rules.slai_lengths.output,
        steptime=rules.slai_calibrate.output,
    output:
        f"{CD}/study/params.parquet",
    log:
        f"{R}/logs/slai/params.log",
    params:
        flags=slai_flags(),
    conda:
        "../../envs/cpu.yaml"
    shell:
        "schedlab slai params --pool {input.pool} --steptime {input.steptime} {params.flags} --out {output} > {log} 2>&1"


rule slai_throughput:
    input:
        pool=rules.slai_lengths.output,
        steptime=rules.slai_calibrate.output,
    output:
        capacity=f"{CD}/study/throughput.parquet",
        queue=f"{CD}/study/throughput_queue.parquet",
    log:
        f"{R}/logs/slai/throughput.log",
    params:
        flags=slai_flags(),
        schedulers=",".join(SLAI["throughput_schedulers"]),
        backlog=SLAI["throughput_backlog"],
        queue=SLAI["queue_duration_s"],
    conda:
        "../../envs/cpu.yaml"
    shell:
        "schedlab slai throughput --schedulers {params.schedulers} --backlog {params.backlog} "
        "--queue-duration-s {params.queue} --pool {input.pool} --steptime {input.steptime} "
        "{params.flags} --out {output.capacity} --out-queue {output.queue} > {log} 2>&1"
