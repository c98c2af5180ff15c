# Helpers of The tournament (tournament.smk): config sections, paths and flags.


TOURNAMENT = config["tournament"]
TOURNAMENT_DIR = f"{RESULTS}/tournament"
TOURNAMENT_CLUSTER = TOURNAMENT["cluster"]
#: The pools `schedlab tournament pool` writes: every registered one (those another rule makes
#: are read from that rule's output, tournament_pools).
TOURNAMENT_POOLS = "|".join(re.escape(pool.name) for pool in registry.pool_entries())


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
