"""``schedlab tournament ...``: the pools workloads draw from, one workload's matches, the results table."""

from __future__ import annotations

from schedlab import progress
from schedlab.cli_types import InputPath, OutputPath, engine_object, json_object, named_path, positive_number
from schedlab.contracts import MAX_REPLICAS
from schedlab.errors import SchedlabError
from schedlab.io import read_parquet, write_parquet

#: What every pool holds (a trace's requests, utterances, answers): the output lengths.
POOL_COLUMNS = ("output_tokens",)
#: What every match table (`tournament play`, `tournament cluster`) holds: the Pareto front's
#: group and axes.
MATCH_COLUMNS = ("workload", "load", "policy", "p50_e2el_ms", "p99_e2el_ms")


def cmd_pool(args) -> None:
    from schedlab import registry

    write_parquet(registry.pool_entry(args.kind).load(), args.out)


def _workload(args):
    """The workload's spec checked, its pools read, its modality and its arena."""
    from schedlab import registry
    from schedlab.tournament.workloads import check_spec, modality, pool_names
    from schedlab.validation import check_arena_spec, read_arena, read_pool

    check_spec(args.workload, args.spec)
    check_arena_spec(args.arena, "--arena")
    pools = dict(args.pool)
    missing = [p for p in pool_names(args.spec["kind"]) if p not in pools]
    if missing:
        raise SchedlabError(f"workload {args.workload!r} needs --pool {' '.join(f'{m}=PATH' for m in missing)}")
    # a timed pool (a trace the kind replays at its timestamps, from `tournament pool`) is one
    # trace, in time order; others (paper B's long prompts) may join several
    pools = {name: read_pool(path, POOL_COLUMNS, one_trace="timestamp_s" in registry.pool_entry(name).columns)
             for name, path in pools.items()}
    kind = modality(args.spec)
    return pools, kind, read_arena(args.arena, kind, "--arena")


def cmd_cluster(args) -> None:
    import pandas as pd
    from schedlab import registry
    from schedlab.tournament.entrants import lineup
    from schedlab.tournament.play import capacity, cluster_match
    from schedlab.tournament.workloads import trace

    for name in args.routers:
        registry.router_entry(name)
    pools, kind, ring = _workload(args)
    players = lineup(args.entrants, kind)
    ring = ring.with_limits(prefix_caching=bool(args.spec.get("prefix_caching", False)))
    # loads are fractions of the replicas' summed capacity: N times one engine's FCFS backlog rate
    cap = capacity(args.spec, pools, ring, registry.entry("fcfs"))
    rows = []
    total = len(args.replicas) * len(args.loads) * len(args.routers) * len(players)
    with progress.stage(f"tournament cluster {args.workload}", total=total, unit="matches") as matches:
        for n in args.replicas:
            for load in args.loads:
                served = trace(args.spec, pools, load * n * cap, max_tokens=ring.max_tokens)
                for router in args.routers:
                    for player in players:
                        rows.append(cluster_match(player, served, ring, router, n, workload=args.workload,
                                                  modality=kind, load=load, rate=load * n * cap, capacity_rps=cap,
                                                  offered=len(served), prefix_caching=ring.limits.prefix_caching))
                        matches.advance()
    write_parquet(pd.DataFrame(rows), args.out)


def cmd_play(args) -> None:
    import pandas as pd
    from schedlab import registry
    from schedlab.tournament.entrants import lineup
    from schedlab.tournament.play import capacity, match
    from schedlab.tournament.workloads import trace

    pools, kind, ring = _workload(args)
    players = lineup(args.entrants, kind)
    # loads are fractions of FCFS's capacity without the cache: a workload played with the cache
    # serves the very traces it is played on without (its own capacity is recorded beside)
    cap = capacity(args.spec, pools, ring, registry.entry("fcfs"))
    caching = bool(args.spec.get("prefix_caching", False))
    ring = ring.with_limits(prefix_caching=caching)
    cap_cached = capacity(args.spec, pools, ring, registry.entry("fcfs")) if caching else float("nan")
    rows = []
    with progress.stage(f"tournament {args.workload}", total=len(args.loads) * len(players), unit="matches") as matches:
        for load in args.loads:
            served = trace(args.spec, pools, load * cap, max_tokens=ring.max_tokens)
            for player in players:
                rows.append(match(player, served, ring, workload=args.workload, modality=kind, load=load,
                                  rate=load * cap, capacity_rps=cap, offered=len(served), prefix_caching=caching,
                                  capacity_cached_rps=cap_cached))
                matches.advance()
    write_parquet(pd.DataFrame(rows), args.out)


def cmd_table(args) -> None:
    import pandas as pd
    from schedlab.tournament.pareto import on_front

    table = pd.concat([read_parquet(p, MATCH_COLUMNS, numeric=("load",), rows=True) for p in args.runs],
                      ignore_index=True)
    write_parquet(on_front(table), args.out)


def add_commands(sub) -> None:
    t = sub.add_parser("tournament", help="every paper's policies on shared workloads, one table")
    tsub = t.add_subparsers(dest="tournament_command", required=True)

    p = tsub.add_parser("pool", help="a pool workload kinds draw from, as parquet (not a trace: `schedlab workload` "
                                     "makes one)")
    p.add_argument("--kind", required=True,
                   help="a registered pool (`schedlab workloads`), e.g. a real trace's timestamps and lengths: "
                        "azure-code, azure-conv, mooncake")
    p.add_argument("--out", type=OutputPath, required=True)
    p.set_defaults(func=cmd_pool)

    m = tsub.add_parser("play", help="every entrant with a meaning on one workload, at each load")
    m.add_argument("--workload", required=True, help="the workload's name (a label)")
    m.add_argument("--spec", type=json_object, required=True, help='workload spec as JSON, e.g. {"kind": "mixed", "n_requests": 1000}')
    m.add_argument("--arena", type=engine_object, required=True,
                   help='engine spec as JSON: steptime, hardware, model, engine limits, kappa (file)')
    m.add_argument("--pool", type=named_path, action="append", default=[], help="NAME=PATH of a pool the kind draws from")
    m.add_argument("--loads", type=positive_number(float), nargs="+", required=True, help="offered rates as fractions of FCFS's backlog capacity")
    m.add_argument("--entrants", nargs="+", required=True, help="registered schedulers (schedlab schedulers)")
    m.add_argument("--out", type=OutputPath, required=True)
    m.set_defaults(func=cmd_play)

    c = tsub.add_parser("cluster", help="routers x per-replica schedulers on one workload, at each load and replica count")
    c.add_argument("--workload", required=True, help="the workload's name (a label)")
    c.add_argument("--spec", type=json_object, required=True, help="workload spec as JSON (as for play)")
    c.add_argument("--arena", type=engine_object, required=True, help="every replica's engine spec as JSON (as for play)")
    c.add_argument("--pool", type=named_path, action="append", default=[], help="NAME=PATH of a pool the kind draws from")
    c.add_argument("--replicas", type=positive_number(int, MAX_REPLICAS), nargs="+", required=True, help="cluster sizes")
    c.add_argument("--routers", nargs="+", required=True, help="registered routers (schedlab schedulers)")
    c.add_argument("--loads", type=positive_number(float), nargs="+", required=True,
                   help="offered rates as fractions of the replicas' summed FCFS backlog capacity")
    c.add_argument("--entrants", nargs="+", required=True, help="registered schedulers, each run on every replica")
    c.add_argument("--out", type=OutputPath, required=True)
    c.set_defaults(func=cmd_cluster)

    tb = tsub.add_parser("table", help="gather the workloads' matches into one table, Pareto front marked")
    tb.add_argument("--runs", type=InputPath, nargs="+", required=True,
                    help="matches of play, or of cluster (fronts then per replica count too)")
    tb.add_argument("--out", type=OutputPath, required=True)
    tb.set_defaults(func=cmd_table)
