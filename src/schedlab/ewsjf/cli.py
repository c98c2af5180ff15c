"""``schedlab ewsjf ...``: paper B's length pools, calibrated engine, traces and studies."""

from __future__ import annotations

import argparse

from schedlab import registry
from schedlab.cli_types import InputPath, OutputPath, count, duration, positive_number, rate_type, registered, seed
from schedlab.contracts import MAX_RATE_RPS
from schedlab.errors import SchedlabError
from schedlab.io import read_json, write_outputs, write_parquet

STUDIES = ("queues", "load", "tuning", "starvation")
POOL_COLUMNS = ("prompt_tokens", "output_tokens")


def _setup(args):
    from schedlab.validation import read_pool, read_steptime
    from schedlab.engine import Arena
    from schedlab.ewsjf.studies import Setup, engine_limits
    from schedlab.latency.catalogue import hardware, model_arch

    limits = engine_limits(hardware(args.hardware), model_arch(args.model), args.prefix_caching)
    return Setup(
        Arena(read_steptime(args.steptime), limits),
        read_pool(args.short, POOL_COLUMNS),
        read_pool(args.long, POOL_COLUMNS),
    )


def _params(path: str | None):
    from schedlab.ewsjf.optimise import checked_params
    from schedlab.ewsjf.policy import Params

    return Params() if path is None else checked_params(read_json(path), path)


def cmd_pools(args) -> None:
    from schedlab.ewsjf.workload import pools

    short, long = pools()
    write_outputs({args.short: short, args.long: long})


def cmd_steptime(args) -> None:
    from schedlab.latency.catalogue import hardware, model_arch
    from schedlab.fit.sources import source_table
    from schedlab.fit.steptime import fit_steptime, measured_grid_steptime, roofline_grid_steptime
    from schedlab.validation import write_steptime

    # the latency predictor's grid, priced by the roofline or by the measured passes; another
    # registered source's own table, fitted as `schedlab steptime` fits it
    grids = {"roofline": roofline_grid_steptime, "measured": measured_grid_steptime}
    if args.source in grids:
        model = grids[args.source](hardware(args.hardware), model_arch(args.model))
    else:
        model = fit_steptime(source_table(args.source, hardware=args.hardware, model=args.model))
    write_steptime(model, args.out)


def cmd_calibrate(args) -> None:
    from schedlab.validation import read_pool, read_steptime, write_steptime
    from schedlab.engine import Arena
    from schedlab.ewsjf.studies import Setup, engine_limits
    from schedlab.fit.calibrate import SEED_STATISTIC, saturation_factor
    from schedlab.latency.catalogue import hardware, model_arch

    base = read_steptime(args.base)
    arena = Arena(base, engine_limits(hardware(args.hardware), model_arch(args.model), args.prefix_caching))
    setup = Setup(arena, read_pool(args.short, POOL_COLUMNS), read_pool(args.long, POOL_COLUMNS))
    seeds = list(dict.fromkeys(args.seeds))
    overload = [setup.trace("mixed", args.n_requests, args.overload_rate, s) for s in seeds]
    compute = saturation_factor(arena, overload, args.saturation_rps)
    record = {"targets": {"saturation_rps": args.saturation_rps}, "compute": compute, "memory": 1.0,
              "overload_rate": args.overload_rate, "n_requests": args.n_requests, "seeds": seeds,
              "seed_statistic": SEED_STATISTIC}
    write_steptime(base.scaled(compute, 1.0, calibration=record), args.out)


def cmd_workload(args) -> None:
    from schedlab.validation import read_pool
    from schedlab.ewsjf.workload import trace

    short, long = read_pool(args.short, POOL_COLUMNS), read_pool(args.long, POOL_COLUMNS)
    write_parquet(trace(args.kind, short, long, args.n_requests, args.rate, args.seed), args.out)


def cmd_study(args) -> None:
    import pandas as pd

    from schedlab.ewsjf import studies
    from schedlab.ewsjf.optimise import values_of

    setup, params = _setup(args), _params(args.params)
    extra = {}
    seeds = list(dict.fromkeys(args.seed))
    if args.study != "queues" and len(seeds) > 1:
        raise SchedlabError(f"the {args.study} study runs on one trace seed, got {len(seeds)}")
    if args.study == "queues":
        table = pd.concat([studies.queue_count(setup, params, args.kind, args.n_requests, args.rate, s) for s in seeds],
                          ignore_index=True)
    elif args.study == "load":
        table = studies.load(setup, params, args.sizes, args.rates, seeds[0])
    elif args.study == "tuning":
        if args.out_params is None:
            raise SchedlabError("the tuning study needs --out-params")
        table, params = studies.tuning(setup, args.n_requests, args.rate, args.trial_s, args.max_trials, seeds[0])
        extra = {args.out_params: values_of(params)}
    else:
        if args.out_timeline is None:
            raise SchedlabError("the starvation study needs --out-timeline")
        timeline, table = studies.starvation(setup, params, args.n_requests, args.rates, seeds[0])
        extra = {args.out_timeline: timeline}
    write_outputs({args.out: studies.with_params(table, params), **extra})


def _engine_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--hardware", default="4xA100-80GB", help="catalogue name, <n>x<name> for tensor parallel")
    p.add_argument("--model", default="llama-2-13b")


def _cache_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--prefix-caching", action=argparse.BooleanOptionalAction, default=False,
                   help="vLLM's prefix cache (vLLM 0.11's default: on); it finds nothing on traces without sharing data")


def cmd_sharing(args) -> None:
    from schedlab.validation import read_pool, read_steptime
    from schedlab.engine import Arena
    from schedlab.ewsjf import studies
    from schedlab.latency.catalogue import hardware, model_arch

    setup = studies.Setup(
        Arena(read_steptime(args.base), studies.engine_limits(hardware(args.hardware), model_arch(args.model), True)),
        read_pool(args.short, POOL_COLUMNS), read_pool(args.long, POOL_COLUMNS),
    )
    params = _params(args.params)
    table = studies.sharing(setup, params, args.levels, args.n_requests, args.rate, args.saturation_rps,
                            args.overload_rate, args.calibration_requests, args.seed)
    write_outputs({args.out: studies.with_params(table, params)})


def _pool_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--short", type=InputPath, required=True, help="short pool parquet (from `schedlab ewsjf pools`)")
    p.add_argument("--long", type=InputPath, required=True, help="long pool parquet")


def add_commands(sub) -> None:
    e = sub.add_parser("ewsjf", help="paper B: EWSJF adaptive multi-queue scheduling")
    esub = e.add_subparsers(dest="ewsjf_command", required=True)

    p = esub.add_parser("pools", help="short (Azure conv) and long (Mooncake, Azure code) prompt pools")
    p.add_argument("--short", type=OutputPath, required=True, help="parquet out: prompt_tokens, output_tokens, source")
    p.add_argument("--long", type=OutputPath, required=True, help="parquet out, same columns")
    p.set_defaults(func=cmd_pools)

    s = esub.add_parser("steptime", help="the engine's step-time model fitted to the roofline or to the passes "
                                         "measured on the shipped GPUs")
    _engine_args(s)
    s.add_argument("--source", choices=registered(lambda: registry.source_names(machine=False)), default="roofline",
                   metavar="SOURCE",
                   help="the step costs: roofline, the roofline's ideal curves; measured, the GPU's peaks at the "
                        "measured fractions; or another registered source that prices a catalogue GPU (`schedlab "
                        "sources`), its own table fitted")
    s.add_argument("--out", type=OutputPath, required=True)
    s.set_defaults(func=cmd_steptime)

    c = esub.add_parser("calibrate", help="scale compute costs so FCFS saturates at the paper's throughput")
    c.add_argument("--base", type=InputPath, required=True, help="step-time JSON from `schedlab ewsjf steptime`")
    _pool_args(c)
    _engine_args(c)
    c.add_argument("--saturation-rps", type=rate_type(), default=8.45, help="paper Table 3: FCFS req/s")
    c.add_argument("--overload-rate", type=rate_type(), default=40.0)
    c.add_argument("--n-requests", type=count, default=3000)
    c.add_argument("--seeds", type=seed, nargs="+", default=list(range(10)),
                   help="trace seeds: FCFS's throughput is the median over their overloaded traces")
    _cache_arg(c)
    c.add_argument("--out", type=OutputPath, required=True)
    c.set_defaults(func=cmd_calibrate)

    w = esub.add_parser("workload", help="a seeded mixed, short-only or long-only trace")
    w.add_argument("--kind", choices=("mixed", "short", "long"), required=True)
    _pool_args(w)
    w.add_argument("--n-requests", type=count, required=True)
    w.add_argument("--rate", type=rate_type(), required=True, help="req/s (Poisson)")
    w.add_argument("--seed", type=seed, default=0)
    w.add_argument("--out", type=OutputPath, required=True)
    w.set_defaults(func=cmd_workload)

    st = esub.add_parser("study", help="one of paper B's experiments, as a parquet table")
    st.add_argument("study", choices=STUDIES)
    st.add_argument("--steptime", type=InputPath, required=True, help="calibrated step-time JSON")
    _pool_args(st)
    _engine_args(st)
    st.add_argument("--params", type=InputPath, help="EWSJF parameters JSON (from the tuning study); default: built-in")
    st.add_argument("--kind", choices=("mixed", "short", "long"), default="mixed", help="queues: workload")
    st.add_argument("--n-requests", type=count, default=30_000, help="queues, tuning, starvation: requests per run")
    st.add_argument("--rate", type=rate_type(), default=40.0, help="queues, tuning: req/s")
    st.add_argument("--sizes", type=count, nargs="+", default=[10_000, 30_000], help="load: requests per run")
    st.add_argument("--rates", type=positive_number(float, MAX_RATE_RPS), nargs="+", default=[10, 20, 40, 60, 100, 500],
                    help="load, starvation: req/s")
    st.add_argument("--trial-s", type=duration, default=300.0, help="tuning: seconds per trial")
    st.add_argument("--max-trials", type=positive_number(int, 10**4), default=20, help="tuning: trials before it settles")
    st.add_argument("--seed", type=seed, nargs="+", default=[0],
                    help="trace seed (queues: one or more, a run of every method on each)")
    _cache_arg(st)
    st.add_argument("--out", type=OutputPath, required=True)
    st.add_argument("--out-params", type=OutputPath, help="tuning: the best parameters found (JSON)")
    st.add_argument("--out-timeline", type=OutputPath, help="starvation: waiting requests over time (parquet)")
    st.set_defaults(func=cmd_study)

    sh = esub.add_parser("sharing", help="Table 3 at each sharing level (documents asked 1..q times), the prefix "
                                         "cache on, FCFS calibrated at each level")
    sh.add_argument("--base", type=InputPath, required=True, help="uncalibrated step-time JSON (`schedlab ewsjf steptime`)")
    _pool_args(sh)
    _engine_args(sh)
    sh.add_argument("--params", type=InputPath, help="EWSJF parameters JSON (from the tuning study); default: built-in")
    sh.add_argument("--levels", type=positive_number(int, 10**6), nargs="+", required=True,
                    help="questions per document of the long prompts (1: none shared)")
    sh.add_argument("--n-requests", type=count, default=30_000, help="requests per Table 3 run")
    sh.add_argument("--rate", type=rate_type(), default=40.0, help="req/s of the Table 3 runs")
    sh.add_argument("--saturation-rps", type=rate_type(), default=8.45, help="paper Table 3: FCFS req/s")
    sh.add_argument("--overload-rate", type=rate_type(), default=40.0, help="req/s of the calibration trace")
    sh.add_argument("--calibration-requests", type=count, default=30_000)
    sh.add_argument("--seed", type=seed, default=0)
    sh.add_argument("--out", type=OutputPath, required=True)
    sh.set_defaults(func=cmd_sharing)

