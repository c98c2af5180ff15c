"""``schedlab slai ...``: paper C's length pool, engine profile and calibration, runs and studies."""

from __future__ import annotations

import argparse
from pathlib import Path

from schedlab.cli_types import (
    InputPath,
    OutputFolder,
    OutputPath,
    duration,
    number,
    positive_number,
    rate_type,
    registered,
    seed,
    vllm_engine_args,
)
from schedlab.contracts import MAX_RATE_RPS, MAX_REPLICAS, MAX_REQUESTS, MAX_RUN_S
from schedlab import registry
from schedlab.errors import SchedlabError
from schedlab.io import write_outputs, write_parquet

TABLES = ("summary", "buckets", "timeline")
#: The tables of one scheduler's served sweep (`schedlab slai serve`).
SERVED_TABLES = ("summary", "buckets")


def _scheduler_tables(args, tables) -> list[Path]:
    """``<out-dir>/<scheduler>/<table>.parquet`` of every scheduler: what a sweep writes."""
    return [Path(args.out_dir) / s / f"{t}.parquet" for s in args.scheduler for t in tables]


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"a share is within [0, 1], got {text}")
    return value


def _target(text: str) -> tuple[str, float]:
    """``paying=0.5``: one class's TBT target in seconds."""
    cls, sep, value = text.partition("=")
    try:
        seconds = float(value)
    except ValueError:
        seconds = float("nan")
    if not sep or cls not in ("paying", "free") or not 0 < seconds <= MAX_RUN_S:
        raise argparse.ArgumentTypeError(f"need paying=SECONDS or free=SECONDS (positive), got {text!r}")
    return cls, seconds


def _workload_args(g) -> None:
    g.add_argument("--pool", type=InputPath, required=True, help="length pool parquet from `schedlab slai lengths` (or `scale`)")
    g.add_argument("--duration-s", type=float, default=2100.0, help="seconds of arrivals (35 minutes)")
    g.add_argument("--warmup-s", type=float, default=120.0, help="arrivals before this are not measured (< --duration-s)")
    g.add_argument("--tbt-targets", type=_target, nargs=2, default=None,
                   help="TBT target (s) per class, e.g. paying=0.5 free=2.5 (default: the paper's 0.1 and 0.5)")


def _setup(args):
    from schedlab.engine import Arena
    from schedlab.slai.studies import Setup
    from schedlab.validation import check_run_length, read_pool, read_steptime

    check_run_length(args.duration_s, args.warmup_s, "--duration-s/--warmup-s")
    if hasattr(args, "backend"):  # paper C's builders are batch schedulers
        registry.backend_entry(args.backend, kind=registry.BATCH, simulated=True)
    arena = None
    if getattr(args, "steptime", None):
        arena = Arena.build(read_steptime(args.steptime), args.hardware, args.model, block_size=args.block_size,
                            max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens,
                            kv_blocks=args.kv_capacity_blocks)
    pool = read_pool(args.pool, ("prompt_tokens", "output_tokens"))
    targets = dict(args.tbt_targets or ())
    if args.tbt_targets and set(targets) != {"paying", "free"}:
        raise SchedlabError("--tbt-targets needs paying=SECONDS and free=SECONDS")
    extra = {"targets": targets} if targets else {}
    return Setup(pool, arena, args.duration_s, args.warmup_s, getattr(args, "backend", "vllm"), args.model, **extra)


def cmd_lengths(args) -> None:
    from schedlab.data.openchat import openchat_lengths

    write_parquet(openchat_lengths(), args.out)


def cmd_profile(args) -> None:
    from schedlab.fit.sources import source_table
    from schedlab.slai.model import measured_profile, roofline_profile
    from schedlab.latency.catalogue import hardware, model_arch

    # the paper's mixed batches, priced by the roofline or by the measured passes; another
    # registered source's own table
    if args.source in ("roofline", "measured"):
        hw, arch = hardware(args.hardware), model_arch(args.model)
        table = measured_profile(hw, arch) if args.source == "measured" else roofline_profile(hw, arch, tile=args.tile)
    else:
        table = source_table(args.source, hardware=args.hardware, model=args.model)
    write_parquet(table, args.out)


def cmd_calibrate(args) -> None:
    from schedlab.engine import Arena
    from schedlab.fit.chunk_times import calibrate_chunks
    from schedlab.slai.serving import capacity_sensitivity, serving_overhead
    from schedlab.slai.studies import Setup
    from schedlab.validation import check_run_length, read_pool, read_steptime, write_steptime

    model = read_steptime(args.base)
    if args.chunk_factors:
        model = calibrate_chunks(model, args.chunks, [t / 1e3 for t in args.times_ms])[0]
    if args.capacity_rps is not None:
        if not args.pool:
            raise SchedlabError("--capacity-rps needs --pool (the length pool the runs draw from)")
        check_run_length(args.duration_s, args.warmup_s, "--duration-s/--warmup-s")
        arena = Arena.build(model, args.hardware, args.model, block_size=args.block_size)
        setup = Setup(read_pool(args.pool, ("prompt_tokens", "output_tokens")), arena, args.duration_s, args.warmup_s)
        model, record = serving_overhead(setup, capacity_rps=args.capacity_rps, shares=args.shares)
        record["sensitivity"] = capacity_sensitivity(setup, record, share=min(args.shares)).to_dict(orient="records")
    write_steptime(model, args.out)


def cmd_sweep(args) -> None:
    from schedlab.slai.studies import sweep

    for scheduler in args.scheduler:
        registry.entry(scheduler)  # fail early on an unknown name
    setup = _setup(args)
    for scheduler in args.scheduler:
        tables = sweep(setup, scheduler, args.share, args.rates, args.seeds)
        write_outputs({Path(args.out_dir) / scheduler / f"{name}.parquet": tables[name] for name in TABLES})


def cmd_scale(args) -> None:
    from schedlab.validation import read_pool
    from schedlab.latency.catalogue import model_arch
    from schedlab.workload.openchat import scaled_pool

    pool = read_pool(args.pool, ("prompt_tokens", "output_tokens"))
    write_parquet(scaled_pool(pool, args.factor, model_arch(args.model).max_target_positions), args.out)


def cmd_serve(args) -> None:
    from schedlab.backends.vllm.engine import launch_spec
    from schedlab.latency.catalogue import model_dir
    from schedlab.slai.served import served_sweep

    for scheduler in args.scheduler:
        registry.entry(scheduler, registry.BATCH)  # fail early on an unknown name
    setup, spec = _setup(args), launch_spec(args)
    folder = args.model_folder or model_dir(args.model)
    for scheduler in args.scheduler:
        tables = served_sweep(setup, spec, folder, scheduler, args.share, args.rates, args.seeds,
                              server_log=Path(args.server_log_dir) / f"{scheduler}.log")
        write_outputs({Path(args.out_dir) / scheduler / f"{name}.parquet": tables[name] for name in SERVED_TABLES})


def cmd_capacity(args) -> None:
    import pandas as pd
    from schedlab.slai.studies import capacity

    from schedlab.io import read_parquet

    grid = pd.concat([read_parquet(p, ("scheduler", "share", "rate", "seed", "within_capacity")) for p in args.summaries])
    write_parquet(capacity(_setup(args), grid, iterations=args.iterations), args.out)


def cmd_params(args) -> None:
    import pandas as pd
    from schedlab.slai.studies import budget_study, kv_study, mixed_batch_study

    setup = _setup(args)
    tables = {"budget": budget_study(setup.arena), "kv": kv_study(setup.arena),
              "mixed": mixed_batch_study(setup.arena.step_time)}
    out = pd.concat([t.assign(study=k) for k, t in tables.items()], ignore_index=True)
    write_parquet(out, args.out)


def cmd_throughput(args) -> None:
    from schedlab.slai.studies import throughput

    for name in args.schedulers:
        registry.entry(name)  # fail early on an unknown name
    tables = throughput(_setup(args), args.schedulers, backlog=args.backlog, queue_duration_s=args.queue_duration_s)
    write_outputs({args.out: tables["capacity"], args.out_queue: tables["queue"]})


def cmd_routing(args) -> None:
    from schedlab.slai.studies import routing

    for name in args.schedulers:
        registry.entry(name)  # fail early on an unknown name
    for name in args.routers:
        registry.router_entry(name)
    table = routing(_setup(args), args.schedulers, args.routers, args.replicas, args.factors, share=args.share,
                    seed=args.seed, backlog=args.backlog)
    write_parquet(table, args.out)


def cmd_run(args) -> None:
    registry.entry(args.scheduler)  # fail early on an unknown name
    setup = _setup(args)
    res, s = setup.run(args.scheduler, args.rate, args.share, args.seed)
    if not s["completed"]:  # a summary of nulls measures nothing
        raise SchedlabError(f"no request arrived after the {args.warmup_s:g} s warm-up and completed at {args.rate:g} req/s: "
                            "raise --rate or --duration-s")
    write_outputs({args.out_results: res.requests, args.out_summary: s})


def _grid_args(p: argparse.ArgumentParser) -> None:
    """A sweep's schedulers, paying share, rates and seeds."""
    p.add_argument("--scheduler", nargs="+", required=True, help="registered schedulers (schedlab schedulers)")
    p.add_argument("--share", type=_share, required=True)
    p.add_argument("--rates", type=positive_number(float, MAX_RATE_RPS), nargs="+", required=True, help="req/s")
    p.add_argument("--seeds", type=seed, nargs="+", default=[0])


def _setup_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("setup")
    _workload_args(g)
    g.add_argument("--steptime", type=InputPath, required=True, help="engine model JSON (calibrated)")
    g.add_argument("--hardware", default="RTX-6000-Ada")
    g.add_argument("--model", default="mistral-7b")
    g.add_argument("--block-size", type=positive_number(int), default=16)
    g.add_argument("--max-num-seqs", type=positive_number(int), default=256)
    g.add_argument("--max-num-batched-tokens", type=positive_number(int), default=8192)
    g.add_argument("--kv-capacity-blocks", type=positive_number(int, 2**40),
                   help="KV blocks of a measured engine, instead of deriving them from --hardware")
    g.add_argument("--backend", default="sim",
                   help="sim: schedlab's engine, or another backend on a virtual clock that runs batch schedulers, "
                        "vLLM's scheduler carrying out each step plan (runs, sweeps, capacity; `schedlab backends` "
                        "lists them)")


def add_commands(sub) -> None:
    from schedlab.slai.lineups import (ROUTING_FACTORS, ROUTING_REPLICAS, ROUTING_ROUTERS, ROUTING_SCHEDULERS,
                                       THROUGHPUT_SCHEDULERS)

    s = sub.add_parser("slai", help="paper C: Sarathi-Serve, RAD and SLAI batch builders")
    ssub = s.add_subparsers(dest="slai_command", required=True)

    p = ssub.add_parser("lengths", help="openchat_sharegpt4 (prompt, output) pairs, capped at 8192 tokens")
    p.add_argument("--out", type=OutputPath, required=True)
    p.set_defaults(func=cmd_lengths)

    pr = ssub.add_parser("profile", help="profile of mixed batches: the roofline (additive, tile staircase), or the "
                                          "passes measured on the shipped GPUs")
    pr.add_argument("--source", choices=registered(lambda: registry.source_names(machine=False)), default="roofline",
                    metavar="SOURCE",
                    help="measured: the hardware's peaks at the fractions measured on the shipped GPUs; another "
                         "registered source that prices a catalogue GPU (`schedlab sources`): its own table")
    pr.add_argument("--hardware", default="RTX-6000-Ada")
    pr.add_argument("--model", default="mistral-7b")
    pr.add_argument("--tile", type=number(int, minimum=0, strict=False, maximum=2**20), default=128,
                    help="roofline: GEMM tile width in tokens (0: no staircase)")
    pr.add_argument("--out", type=OutputPath, required=True)
    pr.set_defaults(func=cmd_profile)

    c = ssub.add_parser("calibrate", help="scale a step-time fit to measured prefill-chunk batch times")
    c.add_argument("--base", type=InputPath, required=True, help="step-time JSON from `schedlab fit steptime`")
    c.add_argument("--chunks", type=positive_number(int, MAX_REQUESTS), nargs="+", default=[64, 512, 1024],
                   help="chunk sizes (tokens)")
    c.add_argument("--times-ms", type=positive_number(float), nargs="+", default=[22.7, 46.5, 74.7], help="measured batch times (ms)")
    c.add_argument("--chunk-factors", action=argparse.BooleanOptionalAction, default=True,
                   help="fit compute and memory factors to the chunk times; --no-chunk-factors keeps the base's "
                        "costs (a model of the measured GPU passes), the chunk times then predictions")
    c.add_argument("--capacity-rps", type=rate_type(),
                   help="the baseline's (Sarathi-Serve, FCFS) published serving capacity: fit a per-batch overhead to it")
    c.add_argument("--shares", type=positive_number(float), nargs="+", default=[0.05, 0.5, 0.95], help="paying shares of that fit")
    c.add_argument("--pool", type=InputPath, help="length pool parquet (with --capacity-rps)")
    c.add_argument("--hardware", default="RTX-6000-Ada")
    c.add_argument("--model", default="mistral-7b")
    c.add_argument("--block-size", type=positive_number(int), default=16)
    c.add_argument("--duration-s", type=float, default=2100.0)
    c.add_argument("--warmup-s", type=float, default=120.0)
    c.add_argument("--out", type=OutputPath, required=True)
    c.set_defaults(func=cmd_calibrate)

    r = ssub.add_parser("run", help="one scheduler at one rate and paying share")
    r.add_argument("--scheduler", required=True, help="a registered scheduler (schedlab schedulers)")
    r.add_argument("--rate", type=rate_type(), required=True, help="req/s")
    r.add_argument("--share", type=_share, default=0.05, help="probability a request is a paying user's")
    r.add_argument("--seed", type=seed, default=0)
    _setup_args(r)
    r.add_argument("--out-results", type=OutputPath, required=True)
    r.add_argument("--out-summary", type=OutputPath, required=True)
    r.set_defaults(func=cmd_run)

    w = ssub.add_parser("sweep", help="schedulers, one after another, over rates x seeds at one paying share")
    _grid_args(w)
    _setup_args(w)
    w.add_argument("--out-dir", type=OutputFolder, required=True,
                   help="gets <scheduler>/summary.parquet, buckets.parquet, timeline.parquet")
    w.set_defaults(func=cmd_sweep, planned_outputs=lambda a: _scheduler_tables(a, TABLES))

    sc = ssub.add_parser("scale", help="a length pool scaled to a smaller engine (prompts cut to its context)")
    sc.add_argument("--pool", type=InputPath, required=True)
    sc.add_argument("--factor", type=positive_number(float), required=True, help="length scale, within (0, 1]")
    sc.add_argument("--model", required=True, help="the engine's model architecture (its context caps every request)")
    sc.add_argument("--out", type=OutputPath, required=True)
    sc.set_defaults(func=cmd_scale)

    sv = ssub.add_parser("serve", help="schedulers on a real engine (`vllm serve`), one server each, over rates x seeds")
    _grid_args(sv)
    _workload_args(sv)
    sv.add_argument("--model", default="tiny-llama", help="architecture folder under schedlab/assets/models")
    sv.add_argument("--model-folder", type=InputPath, help="folder the server loads (default: the bundled architecture)")
    vllm_engine_args(sv, device=True)
    sv.add_argument("--server-log-dir", type=OutputFolder, required=True, help="gets <scheduler>.log, each server's output")
    sv.add_argument("--out-dir", type=OutputFolder, required=True, help="gets <scheduler>/summary.parquet and buckets.parquet")
    sv.set_defaults(func=cmd_serve, planned_outputs=lambda a: [
        *_scheduler_tables(a, SERVED_TABLES), *(Path(a.server_log_dir) / f"{s}.log" for s in a.scheduler)])

    cap = ssub.add_parser("capacity", help="serving capacity per scheduler, bisected from sweep summaries")
    cap.add_argument("summaries", type=InputPath, nargs="+")
    cap.add_argument("--iterations", type=number(int, minimum=0, strict=False, maximum=100), default=3)
    _setup_args(cap)
    cap.add_argument("--out", type=OutputPath, required=True)
    cap.set_defaults(func=cmd_capacity)

    pa = ssub.add_parser("params", help="engine-model parameter studies (Fig. 6)")
    _setup_args(pa)
    pa.add_argument("--out", type=OutputPath, required=True)
    pa.set_defaults(func=cmd_params)

    t = ssub.add_parser("throughput", help="highest stable rate per scheduler, and queues around it")
    t.add_argument("--schedulers", nargs="+", default=list(THROUGHPUT_SCHEDULERS))
    t.add_argument("--backlog", type=number(int, minimum=10, strict=False, maximum=MAX_REQUESTS, requests=True), default=1500,
                   help="requests waiting at t = 0 for the saturation runs (10 at least)")
    t.add_argument("--queue-duration-s", type=duration, default=1200.0, help="seconds of arrivals around capacity")
    _setup_args(t)
    t.add_argument("--out", type=OutputPath, required=True)
    t.add_argument("--out-queue", type=OutputPath, required=True)
    t.set_defaults(func=cmd_throughput)

    rt = ssub.add_parser("routing", help="random routing against join-the-shortest-queue on clusters of identical engines")
    rt.add_argument("--schedulers", nargs="+", default=list(ROUTING_SCHEDULERS), help="each engine's scheduler, one study each")
    rt.add_argument("--routers", nargs="+", default=list(ROUTING_ROUTERS), help="registered routers (schedlab schedulers)")
    rt.add_argument("--replicas", type=positive_number(int, MAX_REPLICAS), nargs="+", default=list(ROUTING_REPLICAS),
                    help="cluster sizes (engines)")
    rt.add_argument("--factors", type=positive_number(float, 100.0), nargs="+", default=list(ROUTING_FACTORS),
                    help="offered load per engine, as multiples of one engine's saturation throughput")
    rt.add_argument("--share", type=_share, default=0.05, help="probability a request is a paying user's")
    rt.add_argument("--seed", type=seed, default=0, help="arrivals, lengths and the random router")
    rt.add_argument("--backlog", type=number(int, minimum=10, strict=False, maximum=MAX_REQUESTS, requests=True), default=1500,
                    help="requests waiting at t = 0 for one engine's saturation run (10 at least)")
    _setup_args(rt)
    rt.add_argument("--out", type=OutputPath, required=True)
    rt.set_defaults(func=cmd_routing)

