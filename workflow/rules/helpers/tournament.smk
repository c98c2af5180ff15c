# Helpers of The tournament (tournament.smk): config sections, paths, flags and checks.


TOURNAMENT = config["tournament"]
TOURNAMENT_DIR = f"{RESULTS}/tournament"
TOURNAMENT_CLUSTER = TOURNAMENT["cluster"]
#: The pools `schedlab tournament pool` writes: every registered one (those another rule makes
#: are read from that rule's output, tournament_pools).
TOURNAMENT_POOLS = "|".join(re.escape(pool.name) for pool in registry.pool_entries())


def _check_tournament():
    """Cross-references of the tournament section, as one-line errors."""
    try:  # each workload's kind and its parameters, against the registry
        for name, spec in TOURNAMENT["workloads"].items():
            check_spec(name, spec)
    except SchedlabError as e:
        config_error(f"config: tournament: {e}")
    problems = scheduler_problems("entrants", TOURNAMENT["entrants"])
    problems += scheduler_problems("cluster.entrants", TOURNAMENT_CLUSTER["entrants"], modality=registry.LLM)
    problems += router_problems("cluster.routers", TOURNAMENT_CLUSTER["routers"])
    for name in TOURNAMENT_CLUSTER["workloads"]:
        if name not in TOURNAMENT["workloads"]:
            problems.append(f"cluster.workloads: {name!r} is not in tournament.workloads")
        elif modality(TOURNAMENT["workloads"][name]) != "llm":
            problems.append(f"cluster.workloads: {name!r} is not an LLM workload")
    if problems:
        config_error("config: tournament: " + "; ".join(problems))
    if TOURNAMENT["engines"]["llm"]["model"] not in model_names():
        config_error(
            f"config: tournament.engines.llm.model {TOURNAMENT['engines']['llm']['model']!r} is not a known model"
        )


_check_tournament()


def tournament_arena(w):
    spec = TOURNAMENT["workloads"][w.workload]
    if modality(spec) == "asr":
        return asr_engine_spec()
    return {**TOURNAMENT["engines"]["llm"], "steptime": rules.slai_calibrate.output[0]}


def arena_files(arena):
    """The files an engine spec names (its step-time model, and kappa for ASR)."""
    return {k: arena[k] for k in ("steptime", "kappa") if k in arena}


def tournament_pools(w):
    where = {
        "utterances": rules.librispeech.output[0],
        "short": rules.ewsjf_pools.output.short,
        "long": rules.ewsjf_pools.output.long,
        "openchat": rules.slai_lengths.output[0],
    }
    return {
        p: where.get(p, f"{TOURNAMENT_DIR}/pools/{p}.parquet")
        for p in pool_names(TOURNAMENT["workloads"][w.workload]["kind"])
    }


NOTEBOOK_INPUTS["tournament"] = lambda: {
    "table": rules.tournament_table.output[0],
    "cluster": rules.tournament_cluster_table.output[0],
}
