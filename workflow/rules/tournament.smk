# The cross-paper tournament: timed trace pools -> one job per workload (capacity, then every
# entrant with a meaning on it at each load) -> one table with the Pareto fronts marked.
# `snakemake tournament` runs only this (and what it needs).
from schedlab.errors import SchedlabError
from schedlab.tournament.entrants import entrant
from schedlab.tournament.workloads import check_spec, modality, pool_names

TN = config["tournament"]
TD = f"{R}/tournament"


def _check_tournament():
    """Cross-references of the tournament section, as one-line errors."""
    try:
        for name in TN["entrants"]:
            entrant(name)
        for name, spec in TN["workloads"].items():
            check_spec(name, spec)
    except SchedlabError as e:
        raise ValueError(f"config.yaml: tournament: {e}")
    if TN["engines"]["llm"]["model"] not in model_names():
        raise ValueError(f"config.yaml: tournament.engines.llm.model {TN['engines']['llm']['model']!r} is not a known model")


_check_tournament()


def tournament_arena(w):
    spec = TN["workloads"][w.workload]
    if modality(spec) == "asr":
        return asr_engine_spec()
    return {**TN["engines"]["llm"], "steptime": rules.slai_calibrate.output[0]}


def arena_files(arena):
    """The files an engine spec names (its step-time model, and kappa for ASR)."""
    return {k: arena[k] for k in ("steptime", "kappa") if k in arena}


def tournament_pools(w):
    where = {"utterances": rules.librispeech.output[0], "short": rules.ewsjf_pools.output.short,
             "long": rules.ewsjf_pools.output.long, "openchat": rules.slai_lengths.output[0]}
    return {p: where.get(p, f"{TD}/pools/{p}.parquet") for p in pool_names(TN["workloads"][w.workload]["kind"])}


rule tournament_pool:
    output:
        f"{TD}/pools/{{kind}}.parquet",
    log:
        f"{R}/logs/tournament/pool_{{kind}}.log",
    wildcard_constraints:
        kind="azure-code|azure-conv|mooncake",
    conda:
        "../../envs/cpu.yaml"
    shell:
        "schedlab tournament pool --kind {wildcards.kind} --out {output} > {log} 2>&1"


rule tournament_play:
    input:
        unpack(lambda w: {**tournament_pools(w), **arena_files(tournament_arena(w))}),
    output:
        f"{TD}/runs/{{workload}}.parquet",
    log:
        f"{R}/logs/tournament/{{workload}}.log",
    params:
        spec=lambda w: shell_json(TN["workloads"][w.workload]),
        arena=lambda w: shell_json(tournament_arena(w)),
        pools=lambda w: " ".join(f"--pool {k}={v}" for k, v in tournament_pools(w).items()),
        loads=",".join(map(str, TN["loads"])),
        entrants=",".join(TN["entrants"]),
    conda:
        "../../envs/cpu.yaml"
    shell:
        "schedlab tournament play --workload {wildcards.workload} --spec {params.spec} --arena {params.arena} "
        "{params.pools} --loads {params.loads} --entrants {params.entrants} --out {output} > {log} 2>&1"


rule tournament_table:
    input:
        [f"{TD}/runs/{w}.parquet" for w in TN["workloads"]],
    output:
        f"{TD}/table.parquet",
    log:
        f"{R}/logs/tournament/table.log",
    conda:
        "../../envs/cpu.yaml"
    shell:
        "schedlab tournament table --runs {input} --out {output} > {log} 2>&1"


rule tournament:
    input:
        notebook_outputs("tournament"),
