# The cross-paper tournament: timed trace pools -> one job per workload (capacity, then every
# entrant with a meaning on it at each load) -> one table with the Pareto fronts marked; the
# cluster study likewise (routers x per-replica schedulers at each replica count and load).
# `snakemake tournament` runs only this (and what it needs).


rule tournament_pool:
    output:
        f"{TOURNAMENT_DIR}/pools/{{kind}}.parquet",
    log:
        f"{RESULTS}/logs/tournament/pool_{{kind}}.log",
    wildcard_constraints:
        kind=TOURNAMENT_POOLS,
    conda:
        SIM_ENV
    shell:
        "schedlab tournament pool --kind {wildcards.kind} --out {output} > {log} 2>&1"


rule tournament_play:
    input:
        unpack(lambda w: {**tournament_pools(w), **arena_files(tournament_arena(w))}),
    output:
        f"{TOURNAMENT_DIR}/runs/{{workload}}.parquet",
    log:
        f"{RESULTS}/logs/tournament/{{workload}}.log",
    conda:
        SIM_ENV
    params:
        spec=lambda w: shell_json(TOURNAMENT["workloads"][w.workload]),
        arena=lambda w: shell_json(tournament_arena(w)),
        pools=lambda w: " ".join(f"--pool {k}={v}" for k, v in tournament_pools(w).items()),
        loads=words(TOURNAMENT["loads"]),
        entrants=words(TOURNAMENT["entrants"]),
    shell:
        "schedlab tournament play --workload {wildcards.workload} --spec {params.spec} --arena {params.arena} "
        "{params.pools} --loads {params.loads} --entrants {params.entrants} --out {output} > {log} 2>&1"


rule tournament_table:
    input:
        [f"{TOURNAMENT_DIR}/runs/{w}.parquet" for w in TOURNAMENT["workloads"]],
    output:
        f"{TOURNAMENT_DIR}/table.parquet",
    log:
        f"{RESULTS}/logs/tournament/table.log",
    conda:
        SIM_ENV
    shell:
        "schedlab tournament table --runs {input} --out {output} > {log} 2>&1"


rule tournament_cluster:
    input:
        unpack(lambda w: {**tournament_pools(w), **arena_files(tournament_arena(w))}),
    output:
        f"{TOURNAMENT_DIR}/cluster/{{workload}}.parquet",
    log:
        f"{RESULTS}/logs/tournament/cluster_{{workload}}.log",
    conda:
        SIM_ENV
    params:
        spec=lambda w: shell_json(TOURNAMENT["workloads"][w.workload]),
        arena=lambda w: shell_json(tournament_arena(w)),
        pools=lambda w: " ".join(f"--pool {k}={v}" for k, v in tournament_pools(w).items()),
        replicas=words(TOURNAMENT_CLUSTER["replicas"]),
        routers=words(TOURNAMENT_CLUSTER["routers"]),
        loads=words(TOURNAMENT_CLUSTER["loads"]),
        entrants=words(TOURNAMENT_CLUSTER["entrants"]),
    shell:
        "schedlab tournament cluster --workload {wildcards.workload} --spec {params.spec} --arena {params.arena} "
        "{params.pools} --replicas {params.replicas} --routers {params.routers} --loads {params.loads} "
        "--entrants {params.entrants} --out {output} > {log} 2>&1"


rule tournament_cluster_table:
    input:
        [f"{TOURNAMENT_DIR}/cluster/{w}.parquet" for w in TOURNAMENT_CLUSTER["workloads"]],
    output:
        f"{TOURNAMENT_DIR}/cluster_table.parquet",
    log:
        f"{RESULTS}/logs/tournament/cluster_table.log",
    conda:
        SIM_ENV
    shell:
        "schedlab tournament table --runs {input} --out {output} > {log} 2>&1"


rule tournament:
    input:
        notebook_outputs("tournament"),
