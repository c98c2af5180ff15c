# Paper C: openchat lengths -> roofline profile of mixed batches (tile staircase) -> OLS fit ->
# calibration on the measured chunk times -> rate sweeps per (paying share, scheduler) ->
# serving capacity per share; engine-model parameter studies; throughput optimality and its
# routing claim across identical engines; Fig. 7's schedulers on vLLM's real scheduler beside
# sim. The sweep and the capacity search run on the configured backend: `sim`, or vLLM's
# scheduler carrying out each step plan (`vllm-sim`; also with `backend=vllm`, since paper C's Mistral-7B on a 48 GB GPU is not a CPU engine, which then
# adds a reduced sweep on the real engine: the `slai_engine_*` rules).


rule slai_lengths:
    output:
        f"{SLAI_DIR}/lengths.parquet",
    log:
        f"{RESULTS}/logs/slai/lengths.log",
    conda:
        SIM_ENV
    shell:
        "schedlab slai lengths --out {output} > {log} 2>&1"


rule slai_profile:
    output:
        f"{SLAI_DIR}/profile/roofline.parquet",
    log:
        f"{RESULTS}/logs/slai/profile.log",
    conda:
        SIM_ENV
    params:
        s=SLAI,
    shell:
        "schedlab slai profile --hardware {params.s[hardware]} --model {params.s[model]} "
        "--tile {params.s[tile]} --out {output} > {log} 2>&1"


rule slai_fit:
    input:
        rules.slai_profile.output,
    output:
        f"{SLAI_DIR}/fit/roofline.json",
    log:
        f"{RESULTS}/logs/slai/fit.log",
    conda:
        SIM_ENV
    params:
        tile=SLAI["tile"],
    shell:
        "schedlab fit steptime --profile {input} --tile {params.tile} --out {output} > {log} 2>&1"


rule slai_calibrate:
    input:
        base=rules.slai_fit.output,
        pool=rules.slai_lengths.output,
    output:
        f"{SLAI_DIR}/fit/calibrated.json",
    log:
        f"{RESULTS}/logs/slai/calibrate.log",
    conda:
        SIM_ENV
    params:
        flags=slai_flags(),
        capacity=SLAI["capacity_rps"],
        shares=words(SLAI["shares"]),
    shell:
        "schedlab slai calibrate --base {input.base} --pool {input.pool} --capacity-rps {params.capacity} "
        "--shares {params.shares} {params.flags} --out {output} > {log} 2>&1"


rule slai_sweep:
    input:
        pool=rules.slai_lengths.output,
        steptime=rules.slai_calibrate.output,
    output:
        [f"{SLAI_DIR}/sweep/p{{share}}/{s}/{t}.parquet" for s in SLAI["schedulers"] for t in SLAI_TABLES],
    log:
        f"{RESULTS}/logs/slai/sweep_p{{share}}.log",
    wildcard_constraints:
        share="[0-9]+",
    conda:
        backend_env(SLAI_BACKEND)
    params:
        flags=slai_flags(),
        backend=SLAI_BACKEND,
        schedulers=" ".join(SLAI["schedulers"]),
        rates=words(SLAI["rates"]),
        seeds=words(SLAI["seeds"]),
        share=lambda w: int(w.share) / 100,
        out=lambda w: f"{SLAI_DIR}/sweep/p{w.share}",
    shell:
        "schedlab slai sweep --scheduler {params.schedulers} --share {params.share} --rates {params.rates} "
        "--seeds {params.seeds} --pool {input.pool} --steptime {input.steptime} {params.flags} "
        "--backend {params.backend} --out-dir {params.out} > {log} 2>&1"


rule slai_fidelity:
    input:
        pool=rules.slai_lengths.output,
        steptime=rules.slai_calibrate.output,
    output:
        [f"{SLAI_DIR}/fidelity/{{backend}}/{s}/{t}.parquet" for s in SLAI_FIDELITY["schedulers"] for t in SLAI_TABLES],
    log:
        f"{RESULTS}/logs/slai/fidelity_{{backend}}.log",
    wildcard_constraints:
        backend="|".join(SIM_BACKENDS),
    conda:
        lambda w: backend_env(w.backend)
    params:
        flags=f"--hardware {SLAI['hardware']} --model {SLAI['model']}",
        schedulers=" ".join(SLAI_FIDELITY["schedulers"]),
        rates=words(SLAI_FIDELITY["rates"]),
        share=SLAI_FIDELITY["share"],
        run=f"--duration-s {SLAI_FIDELITY['duration_s']} --warmup-s {SLAI_FIDELITY['warmup_s']}",
        out=lambda w: f"{SLAI_DIR}/fidelity/{w.backend}",
    shell:
        "schedlab slai sweep --scheduler {params.schedulers} --share {params.share} --rates {params.rates} "
        "--seeds 0 --pool {input.pool} --steptime {input.steptime} {params.flags} {params.run} "
        "--backend {wildcards.backend} --out-dir {params.out} > {log} 2>&1"


rule slai_capacity:
    input:
        pool=rules.slai_lengths.output,
        steptime=rules.slai_calibrate.output,
        summaries=lambda w: [f"{SLAI_DIR}/sweep/p{w.share}/{s}/summary.parquet" for s in SLAI["schedulers"]],
    output:
        f"{SLAI_DIR}/capacity/p{{share}}.parquet",
    log:
        f"{RESULTS}/logs/slai/capacity_p{{share}}.log",
    wildcard_constraints:
        share="[0-9]+",
    conda:
        backend_env(SLAI_BACKEND)
    params:
        flags=slai_flags(),
        backend=SLAI_BACKEND,
        iterations=SLAI["capacity_iterations"],
    shell:
        "schedlab slai capacity {input.summaries} --iterations {params.iterations} --pool {input.pool} "
        "--steptime {input.steptime} {params.flags} --backend {params.backend} --out {output} > {log} 2>&1"


rule slai_params:
    input:
        pool=rules.slai_lengths.output,
        steptime=rules.slai_calibrate.output,
    output:
        f"{SLAI_DIR}/study/params.parquet",
    log:
        f"{RESULTS}/logs/slai/params.log",
    conda:
        SIM_ENV
    params:
        flags=slai_flags(),
    shell:
        "schedlab slai params --pool {input.pool} --steptime {input.steptime} {params.flags} --out {output} > {log} 2>&1"


rule slai_throughput:
    input:
        pool=rules.slai_lengths.output,
        steptime=rules.slai_calibrate.output,
    output:
        capacity=f"{SLAI_DIR}/study/throughput.parquet",
        queue=f"{SLAI_DIR}/study/throughput_queue.parquet",
    log:
        f"{RESULTS}/logs/slai/throughput.log",
    conda:
        SIM_ENV
    params:
        flags=slai_flags(),
        schedulers=words(SLAI["throughput_schedulers"]),
        backlog=SLAI["throughput_backlog"],
        queue=SLAI["queue_duration_s"],
    shell:
        "schedlab slai throughput --schedulers {params.schedulers} --backlog {params.backlog} "
        "--queue-duration-s {params.queue} --pool {input.pool} --steptime {input.steptime} "
        "{params.flags} --out {output.capacity} --out-queue {output.queue} > {log} 2>&1"


rule slai_routing:
    input:
        pool=rules.slai_lengths.output,
        steptime=rules.slai_calibrate.output,
    output:
        f"{SLAI_DIR}/study/routing.parquet",
    log:
        f"{RESULTS}/logs/slai/routing.log",
    conda:
        SIM_ENV
    params:
        model=f"--hardware {SLAI['hardware']} --model {SLAI['model']}",
        run=f"--duration-s {SLAI_ROUTING['duration_s']} --warmup-s {SLAI_ROUTING['warmup_s']}",
        schedulers=words(SLAI_ROUTING["schedulers"]),
        routers=words(SLAI_ROUTING["routers"]),
        replicas=words(SLAI_ROUTING["replicas"]),
        factors=words(SLAI_ROUTING["factors"]),
        backlog=SLAI_ROUTING["backlog"],
    shell:
        "schedlab slai routing --schedulers {params.schedulers} --routers {params.routers} "
        "--replicas {params.replicas} --factors {params.factors} --backlog {params.backlog} "
        "--pool {input.pool} --steptime {input.steptime} {params.model} {params.run} --out {output} > {log} 2>&1"


# `--config backend=vllm`: Fig. 7's baseline and SLAI on a real engine, and on sim and vllm-sim
# with that engine's fitted step model, on the same traces (lengths scaled to the engine).
rule slai_engine_pool:
    input:
        rules.slai_lengths.output,
    output:
        f"{SLAI_DIR}/engine/pool.parquet",
    log:
        f"{RESULTS}/logs/slai/engine_pool.log",
    conda:
        SIM_ENV
    params:
        factor=SLAI_ENGINE["length_scale"],
        model=SLAI_ENGINE["model"],
    shell:
        "schedlab slai scale --pool {input} --factor {params.factor} --model {params.model} --out {output} > {log} 2>&1"


rule slai_engine_serve:
    input:
        pool=rules.slai_engine_pool.output,
    output:
        [f"{SLAI_DIR}/engine/vllm/{s}/{t}.parquet" for s in SLAI_ENGINE["schedulers"] for t in ("summary", "buckets")],
    log:
        f"{RESULTS}/logs/slai/engine_vllm.log",
    conda:
        ENGINE_ENV
    # The engine's timing is the measurement: it gets the whole machine (or one GPU).
    threads: all_cores
    resources:
        gpu=int(VLLM["device"].startswith("cuda")),
    params:
        run=slai_engine_workload_flags(),
        schedulers=" ".join(SLAI_ENGINE["schedulers"]),
        engine=vllm_engine_flags(SLAI_ENGINE["max_num_seqs"], VLLM["max_num_batched_tokens"]),
        out=lambda w: f"{SLAI_DIR}/engine/vllm",
        servers=lambda w: f"{RESULTS}/logs/slai/engine_servers",
    shell:
        "schedlab slai serve --scheduler {params.schedulers} {params.run} --pool {input.pool} {params.engine} "
        "--server-log-dir {params.servers} --out-dir {params.out} > {log} 2>&1"


rule slai_engine_simulate:
    input:
        pool=rules.slai_engine_pool.output,
        steptime=f"{RESULTS}/fit/steptime/vllm/local/{SLAI_ENGINE['model']}.json",
    output:
        [f"{SLAI_DIR}/engine/{{backend}}/{s}/{t}.parquet" for s in SLAI_ENGINE["schedulers"] for t in SLAI_TABLES],
    log:
        f"{RESULTS}/logs/slai/engine_{{backend}}.log",
    wildcard_constraints:
        backend="|".join(SIM_BACKENDS),
    conda:
        lambda w: backend_env(w.backend)
    params:
        run=slai_engine_workload_flags(),
        schedulers=" ".join(SLAI_ENGINE["schedulers"]),
        engine=local_engine_flags(SLAI_ENGINE["model"], SLAI_ENGINE["max_num_seqs"], VLLM["max_num_batched_tokens"]),
        out=lambda w: f"{SLAI_DIR}/engine/{w.backend}",
    shell:
        "schedlab slai sweep --scheduler {params.schedulers} {params.run} --pool {input.pool} "
        "--steptime {input.steptime} {params.engine} --backend {wildcards.backend} --out-dir {params.out} > {log} 2>&1"
