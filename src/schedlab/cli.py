"""``schedlab`` command line: data, workload(s), profile, steptime, fit, simulate, cluster, schedulers, collect,
vllm-run, vllm-serve, transformers-run, slosa, ewsjf, slai, tournament, extensions."""

from __future__ import annotations

import argparse
import errno
import os
import signal
import sys
import traceback
from pathlib import Path

from schedlab.cli_types import (
    InputPath,
    OutputFolder,
    OutputPath,
    command_paths,
    count,
    duration,
    input_folder,
    named_path,
    number,
    parameter,
    positive_number,
    rate_type,
    rate_label,
    seed,
    server_url,
    vllm_engine_args,
)
from schedlab.contracts import BATCHINGS, MAX_REPLICAS, TOO_LONG
from schedlab.errors import SchedlabError
from schedlab.io import check_paths, end_guard, read_json, write_json, write_outputs, write_parquet


def read_pool(path, required):
    """A table of utterances or request lengths, checked (:func:`schedlab.validation.read_pool`)."""
    from schedlab.validation import read_pool as read

    return read(path, required)


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line (``schedlab: error: ...``), exit status 2, like other errors."""

    def error(self, message: str):
        print(f"schedlab: error: {message}", file=sys.stderr)
        sys.exit(2)


#: Profile sources that need no machine: a catalogue GPU and model are enough.
#: The environment variable that makes every command print an error's traceback (as --debug).
DEBUG_VARIABLE = "SCHEDLAB_DEBUG"

_positive = positive_number(float)
_positive_int = positive_number(int)


def _engine_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("engine")
    g.add_argument("--hardware", required=True, help="catalogue name, e.g. A100-40GB, or a label with --kv-capacity-blocks")
    g.add_argument("--model", required=True, help="model architecture, e.g. whisper-large-v3")
    g.add_argument("--max-num-seqs", type=_positive_int, default=256)
    g.add_argument("--max-num-batched-tokens", type=_positive_int, default=8192)
    g.add_argument("--block-size", type=_positive_int, default=16)
    g.add_argument("--gpu-memory-utilization", type=_positive, default=0.95)
    g.add_argument("--kv-capacity-blocks", type=positive_number(int, 2**40),
                   help="KV blocks of a measured engine, instead of deriving them from --hardware")
    g.add_argument("--prefix-caching", action=argparse.BooleanOptionalAction, default=False,
                   help="vLLM's prefix cache, for traces with sharing data (hash_ids, token_ids or prefix_id)")


def _engine(args):
    from schedlab.engine import engine_config

    return engine_config(
        args.hardware,
        args.model,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        block_size=args.block_size,
        gpu_memory_utilization=args.gpu_memory_utilization,
        kv_blocks=args.kv_capacity_blocks,
        prefix_caching=args.prefix_caching,
    )


def check_measured(summary: dict, what: str) -> dict:
    """``summary``, unless its run measured nothing (:func:`schedlab.validation.check_measured`)."""
    from schedlab.validation import check_measured as check

    return check(summary, what)


def _kappa(path: str | None) -> dict[str, float]:
    """A kappa file's fitted languages; none without a file (sizes are then max_tokens)."""
    from schedlab.validation import read_kappa

    return read_kappa(path) if path else {}


def _trace(args, path: str | None = None):
    """The run's trace (``path``, default ``--trace``), checked, every request within
    ``--model``'s context."""
    from schedlab.latency.catalogue import model_arch
    from schedlab.validation import read_trace

    return read_trace(path or args.trace, context=model_arch(args.model).max_target_positions)


# -- data ---------------------------------------------------------------------------------
def cmd_data(args) -> None:
    from schedlab.data.librispeech import load_test_clean
    from schedlab.data.whisper_tokens import count_text_tokens

    utts = load_test_clean()
    utts["text_tokens"] = count_text_tokens(utts["transcript"])
    utts["output_tokens"] = utts["text_tokens"] + 1  # the generated <|endoftext|>
    write_parquet(utts, args.out)


# -- workload -----------------------------------------------------------------------------
def cmd_workload(args) -> None:
    """One trace per ``--rate`` of a registered workload kind; each rate's trace is what a run of
    that rate alone gives."""
    from schedlab import registry
    from schedlab.latency.catalogue import model_arch
    from schedlab.validation.documents import kind_parameters
    from schedlab.workload.kinds import Draw, check_draw, make_trace, read_pools

    if len(args.rate) != len(args.out):
        raise SchedlabError("--rate and --out need one value per trace")
    entry = registry.workload_entry(args.kind)
    parameters = dict(args.param)
    kind_parameters(entry, parameters, "--param")  # every input checked before any work
    if args.clips_per_duration is not None:
        parameters["clips_per_duration"] = args.clips_per_duration
        kind_parameters(entry, parameters, "--clips-per-duration")
    if args.burstiness is not None and entry.arrivals == registry.OWN:
        raise SchedlabError(f"--burstiness: {entry.describe()} times its own requests")
    draw = dict(n_requests=args.n_requests, duration_s=args.duration_s, seed=args.seed,
                burstiness=1.0 if args.burstiness is None else args.burstiness,
                max_tokens=model_arch(args.model).max_target_positions if args.model else None)
    check_draw(entry, Draw({}, 1.0, **draw))
    files = dict(args.pool)
    if args.utterances:
        files["utterances"] = args.utterances
    pools = read_pools(entry, files)
    write_outputs({out: make_trace(args.kind, Draw(pools, rate, **draw), parameters, too_long=args.too_long,
                                   model=args.model, scale=(args.prompt_scale, args.output_scale))
                   for rate, out in zip(args.rate, args.out)})


def _print_table(header, rows) -> None:
    """Columns padded to their widest value, the last one as it is."""
    widths = [max(len(str(r[k])) for r in [header, *rows]) for k in range(len(header) - 1)]
    for row in [header, *rows]:
        print("  ".join(str(v).ljust(w) for v, w in zip(row, widths)) + "  " + row[-1])


def cmd_workloads(args) -> None:
    """Every registered workload kind, one line each, then every pool."""
    from schedlab import registry

    table = _print_table

    def parameters(entry):
        return ", ".join(f"{name}={default!r}" for name, (_, default) in entry.parameters().items()) or "-"

    table(("kind", "requests", "paper", "pools", "timed by", "parameters", "from", "what it makes"),
          [(e.name, e.modality, e.paper or "-", ",".join(e.pools), "its own" if e.arrivals == registry.OWN else "rate",
            parameters(e), f"{e.distribution} ({e.module})", e.summary) for e in registry.workload_entries()])
    print()
    table(("pool", "columns", "from", "what it holds"),
          [(e.name, ",".join(e.columns), f"{e.distribution} ({e.module})", e.summary) for e in registry.pool_entries()])


# -- profile ------------------------------------------------------------------------------
def cmd_sources(args) -> None:
    """Every registered step-time source, one line each."""
    from schedlab import registry

    _print_table(("source", "prices", "from", "what it gives"),
                 [(e.name, "this machine" if e.machine else "a catalogue GPU", f"{e.distribution} ({e.module})",
                   e.summary) for e in registry.source_entries()])


def cmd_profile(args) -> None:
    from schedlab import registry

    source = registry.source_entry(args.source)

    def engine():  # the vLLM engine's limits, read from the options (and checked) when a source asks
        from schedlab.backends.vllm.engine import launch_spec

        return launch_spec(args)

    from schedlab.validation import check_profile

    table = source.profile(hardware=args.hardware, model=args.model, device=args.device, repeats=args.repeats,
                           engine=engine)
    write_parquet(check_profile(table, source.describe()), args.out)


# -- fit ----------------------------------------------------------------------------------
def cmd_fit_steptime(args) -> None:
    from schedlab.fit.steptime import fit_steptime
    from schedlab.validation import read_profile, write_steptime

    if len(args.profile) != len(args.out):
        raise SchedlabError("--profile and --out need one output per profile")
    fits = {out: fit_steptime(read_profile(path), tile=args.tile) for path, out in zip(args.profile, args.out)}
    for out, model in fits.items():
        write_steptime(model, out)


def cmd_steptime(args) -> None:
    """A catalogue GPU and model's step-time model in one command: the profile of a source that
    prices a catalogue GPU, fitted as `schedlab fit steptime` fits one."""
    from schedlab import registry
    from schedlab.fit.steptime import fit_steptime
    from schedlab.validation import check_profile, write_steptime

    source = registry.source_entry(args.source)
    if source.machine:
        raise SchedlabError(f"--source: {source.describe()} times this machine, not a catalogue GPU: "
                            f"`schedlab profile --source {source.name}`, then `schedlab fit steptime`")
    table = check_profile(source.profile(hardware=args.hardware, model=args.model), source.describe())
    write_steptime(fit_steptime(table, tile=args.tile), args.out)


def cmd_fit_engine_steps(args) -> None:
    from schedlab.fit.steptime import fit_held_out, read_engine_steps
    from schedlab.validation import write_steptime

    if len(args.held_out) != len(args.out):
        raise SchedlabError("--held-out and --out need one output per held-out rate")
    if not args.out and not args.out_all:
        raise SchedlabError("nothing to fit: give --held-out with --out, or --out-all")
    steps = read_engine_steps(args.steps, seed=args.seed)
    models = {out: fit_held_out(steps, rate) for rate, out in zip(args.held_out, args.out)}
    if args.out_all:
        models[args.out_all] = fit_held_out(steps, None)
    for out, model in models.items():
        write_steptime(model, out)


def cmd_fit_kappa(args) -> None:
    from schedlab.data import fleurs
    from schedlab.data.sources import DataUnavailable
    from schedlab.data.whisper_tokens import count_text_tokens
    from schedlab.fit.kappa import fit_languages

    tables: dict = {"en": read_pool(args.librispeech, ("duration_s", "text_tokens"))}
    for lang in args.fleurs:
        try:
            t = fleurs.load_test(lang)
            t["text_tokens"] = count_text_tokens(t["transcript"])
            tables[lang] = t
        except DataUnavailable as e:
            tables[lang] = f"FLEURS {lang} not available offline ({e})"
    write_json(fit_languages(tables), args.out)


def cmd_fit_calibrate(args) -> None:
    import numpy as np
    from dataclasses import replace

    from schedlab.engine import Arena
    from schedlab.fit.calibrate import baseline_rows, bound_study, calibrate, implied_saturation, sensitivity
    from schedlab.asr.report import reported_asr_table1
    from schedlab.workload.arrivals import arrival_times
    from schedlab.validation import read_steptime, write_steptime
    from schedlab.workload.asr import asr_trace, librispeech_pool

    pool = librispeech_pool(read_pool(args.utterances, ("duration_s", "output_tokens")))
    seeds = list(dict.fromkeys(args.seeds))
    fit_seeds = list(dict.fromkeys(args.fit_seeds or seeds))
    if not set(fit_seeds) <= set(seeds):
        raise SchedlabError(f"--fit-seeds {fit_seeds} must be among --seeds {seeds}")

    def trace(rate: float, seed: int, **bound):
        arrivals = arrival_times(rate, rng=np.random.default_rng([seed, 0]), **bound)
        return asr_trace(pool, arrivals, rng=np.random.default_rng([seed, 1]))

    baseline = baseline_rows(reported_asr_table1())
    arena = Arena(read_steptime(args.base), _engine(args), _kappa(args.kappa))
    # Each trace is built once, per rate and seed: the fit, the runs by seed, the bounds and the
    # sensitivity share them.
    by_seed = {s: {r: trace(r, s, n_requests=args.requests_per_rate) for r in baseline.index} for s in seeds}
    overload = {s: trace(args.overload_rate, s, n_requests=args.n_requests) for s in fit_seeds}
    model, record = calibrate(arena, baseline=baseline, traces={r: [by_seed[s][r] for s in fit_seeds] for r in baseline.index},
                              overload_trace=[overload[s] for s in fit_seeds], saturation_rps=args.saturation_rps,
                              step_ms=args.step_ms, station=args.station)
    record["fit_seeds"], record["run_seeds"] = fit_seeds, seeds
    calibrated = replace(arena, step_time=model)
    # Every policy at every reported rate on every seed, under this fit: the rows each paper
    # number is counted on (median and band over the seeds), for this fit and any other.
    record["seed_runs"] = bound_study(calibrated, {f"seed {s}": (by_seed[s], None) for s in seeds}).to_dict(orient="records")
    if args.fit_only:
        write_steptime(model, args.out)
        return
    top = sorted(baseline.index)[-2:]
    first = seeds[0]
    fixed = {r: by_seed[first][r] for r in top}
    timed = {r: trace(r, first, duration_s=args.alt_duration_s) for r in top}
    bounds = {f"{args.requests_per_rate} requests": (fixed, None),
              f"{args.alt_duration_s:g} s, at most {args.alt_max_in_flight} in flight": (timed, args.alt_max_in_flight),
              f"{args.alt_duration_s:g} s, open": (timed, None)}
    if model.frontend_service_s:  # a client's cap is not modelled with a front-end station
        bounds = {k: v for k, v in bounds.items() if v[1] is None}
    record["bounds"] = bound_study(calibrated, bounds).to_dict(orient="records")  # the model's meta holds this record
    record["implied_saturation"] = implied_saturation(arena, model, baseline.loc[top], {r: [by_seed[s][r] for s in fit_seeds] for r in top},
                                                      [overload[s] for s in fit_seeds])
    record["sensitivity"] = sensitivity(arena, record, [by_seed[s][top[-1]] for s in fit_seeds]).assign(
        rate=float(top[-1])).to_dict(orient="records")
    write_steptime(model, args.out)


def cmd_fit_apply(args) -> None:
    from schedlab.validation import read_steptime, write_steptime

    calibrated = read_steptime(args.calibrated)
    record = calibrated.meta.get("calibration")
    if record is None:
        raise SchedlabError(f"{args.calibrated} holds no calibration")
    base = read_steptime(args.base)
    write_steptime(base.scaled(record["compute"], record["memory"], record["frontend_s"],
                               record.get("frontend_service_s", 0.0), calibration=record), args.out)


# -- simulate -----------------------------------------------------------------------------
def cmd_simulate(args) -> None:
    """One run per ``--trace`` (a rate sweep in one process: the step-time model, kappa and
    the compiled engine are loaded once), each written as soon as it finishes."""
    from schedlab import registry
    from schedlab.engine import Arena
    from schedlab.simulate import run_summary
    from schedlab.validation import read_steptime

    n = len(args.trace)
    rates = args.rate if args.rate is not None else [float("nan")] * n
    if not len(rates) == len(args.out_results) == len(args.out_summary) == n:
        raise SchedlabError("--trace, --rate, --out-results and --out-summary need one value per run")
    if len(args.steptime) not in (1, n):
        raise SchedlabError("--steptime needs one model for every run or one per run")
    registry.entry(args.policy)  # fail early on an unknown name
    registry.backend_entry(args.backend, simulated=True)
    engine, kappa = _engine(args), _kappa(args.kappa)
    arenas = {path: Arena(read_steptime(path), engine, kappa) for path in args.steptime}
    steptimes = args.steptime * n if len(args.steptime) == 1 else args.steptime
    traces = [_trace(args, path) for path in args.trace]  # every input checked before any run
    fit = {"steptime_fit": args.steptime_fit} if args.steptime_fit else {}
    for trace, trace_path, rate, steptime, out_results, out_summary in zip(
        traces, args.trace, rates, steptimes, args.out_results, args.out_summary
    ):
        result, summary = run_summary(
            trace,
            args.policy,
            arenas[steptime],
            identity={
                "workload": args.workload,
                "rate": rate,
                "model": args.model,
                "hardware": args.hardware,
                "seed": args.seed,
                **fit,
            },
            backend=args.backend,
            model=args.model,
            max_in_flight=args.max_in_flight,
            batching=args.batching,
        )
        write_outputs({out_results: result.requests, out_summary: check_measured(summary, f"the run of {trace_path}")})


def cmd_cluster(args) -> None:
    """One run of ``--replicas`` engines behind ``--router``: the engine limits and kappa
    alike, the step-time model and the scheduler one for all or one per replica."""
    from schedlab import registry
    from schedlab.cluster import cluster_summary, run_cluster
    from schedlab.engine import Arena
    from schedlab.validation import read_steptime

    n = args.replicas
    for option, values in (("--scheduler", args.policy), ("--steptime", args.steptime)):
        if len(values) not in (1, n):
            raise SchedlabError(f"{option} needs one value for every replica or one per replica ({n})")
    for name in args.policy:
        registry.entry(name)  # fail early on an unknown name
    registry.router_entry(args.router)
    engine, kappa = _engine(args), _kappa(args.kappa)
    arenas = {path: Arena(read_steptime(path), engine, kappa) for path in args.steptime}
    trace = _trace(args)
    steptimes = args.steptime * n if len(args.steptime) == 1 else args.steptime
    schedulers = args.policy * n if len(args.policy) == 1 else args.policy
    result = run_cluster(trace, schedulers, [arenas[path] for path in steptimes], args.router, seed=args.seed)
    summary, per_replica = cluster_summary(result, {"workload": args.workload, "rate": args.rate, "model": args.model,
                                                    "hardware": args.hardware, "seed": args.seed})
    write_outputs({args.out_results: result.requests, args.out_summary: check_measured(summary, "the cluster's run"),
                   args.out_replicas: per_replica})


def cmd_cluster_replay(args) -> None:
    """A trace replayed across running `vllm serve` servers behind ``--router``."""
    from schedlab import registry
    from schedlab.cluster.served import replay_across_servers
    from schedlab.validation import read_trace

    registry.router_entry(args.router)  # fail early on an unknown name
    trace = read_trace(args.trace)  # the servers' own context is theirs to check
    served = replay_across_servers(args.servers, trace, args.router, model=args.model, block_size=args.block_size,
                                   seed=args.seed, timeout_s=args.timeout_s, one_at_a_time=args.one_at_a_time,
                                   identity={"policy": args.policy, "workload": args.workload, "rate": args.rate,
                                             "model": args.model, "seed": args.seed})
    write_outputs({args.out_results: served.requests, args.out_summary: check_measured(served.summary, "the replay"),
                   args.out_replicas: served.replicas})


def cmd_schedulers(args) -> None:
    """Every registered scheduler and router, one line each, and a line per plug-in that
    failed to load."""
    from schedlab import registry

    rows = [(e.name, e.kind, e.paper or "-", ",".join(e.modalities), f"{e.distribution} ({e.module})", e.summary)
            for e in registry.entries()]
    rows += [(e.name, "router", e.paper or "-", "-", f"{e.distribution} ({e.module})", e.summary)
             for e in registry.router_entries()]
    header = ("name", "kind", "paper", "workloads", "from", "what it does")
    widths = [max(len(str(r[k])) for r in [header, *rows]) for k in range(5)]
    for row in [header, *rows]:
        print("  ".join(str(v).ljust(w) for v, w in zip(row, widths)) + "  " + row[5])
    reasons = list(registry.broken().values())
    for reason in reasons[:-1]:
        print(f"schedlab: error: {reason}", file=sys.stderr)
    if reasons:  # the last one as the command's own error: the listing exits non-zero
        raise SchedlabError(reasons[-1])


def cmd_backends(args) -> None:
    """Every registered backend, one line each."""
    from schedlab import registry

    _print_table(("backend", "clock", "schedulers", "from", "what it is"),
                 [(e.name, "virtual" if e.simulated else "wall", ",".join(e.kinds), f"{e.distribution} ({e.module})",
                   e.summary) for e in registry.backend_entries()])


def cmd_collect(args) -> None:
    import pandas as pd
    from schedlab.validation import check_summaries

    # A folder (one engine job's runs) stands for the run summaries in it: it must hold one.
    paths = []
    for p in args.summaries:
        found = sorted(map(str, Path(p).glob("*.json"))) if Path(p).is_dir() else [p]
        if not found:
            raise SchedlabError(f"{p}: a folder without run summaries (*.json): nothing to collect")
        paths += found
    rows = [read_json(p) for p in paths]
    check_summaries(rows, paths)
    write_parquet(pd.DataFrame(rows), args.out)


def cmd_vllm_run(args) -> None:
    import time

    from schedlab.backends.vllm.engine import kv_capacity_blocks, launch_spec, replay, start_engine
    from schedlab import registry
    from schedlab.metrics import summarize

    registry.entry(args.policy, registry.QUEUE)  # fail early on an unknown name
    trace, kappa = _trace(args), _kappa(args.kappa)
    t0 = time.perf_counter()
    llm = start_engine(launch_spec(args), policy=args.policy, kappa=kappa)
    result = replay(llm, trace)
    summary = summarize(
        result.requests, result.gaps, policy=args.policy, backend="vllm", workload=args.workload,
        rate=args.rate, model=args.model, hardware=args.device, seed=args.seed,
    )
    summary.update(
        mean_step_ms=result.busy_s / max(result.steps, 1) * 1e3,
        kv_capacity_blocks=kv_capacity_blocks(llm),
        preemptions=int(result.requests["preemptions"].sum()),
        sched_overhead_us_per_req=float("nan"),
        wall_s=time.perf_counter() - t0,
    )
    write_outputs({args.out_results: result.requests, args.out_summary: check_measured(summary, "the run")})


def cmd_transformers_run(args) -> None:
    """A trace replayed through transformers' real engine (random weights) running a queue policy."""
    from schedlab import registry
    from schedlab.backends.transformers.engine import Engine, TransformersSpec, run_summary

    registry.entry(args.policy, registry.QUEUE)  # fail early on an unknown name
    spec = TransformersSpec(model=args.model, device=args.device, dtype=args.dtype, order=args.order,
                            block_size=args.block_size, kv_capacity_blocks=args.kv_capacity_blocks,
                            max_num_batched_tokens=args.max_num_batched_tokens, max_num_seqs=args.max_num_seqs,
                            seed=args.seed, threads=args.threads)
    trace = _trace(args)
    engine = Engine(spec, args.policy, _kappa(args.kappa))
    result, summary, steps = run_summary(engine, trace, {"workload": args.workload, "rate": args.rate, "seed": args.seed})
    write_outputs({args.out_results: result.requests, args.out_summary: summary, args.out_steps: steps})


def cmd_vllm_serve(args) -> None:
    from schedlab import registry
    from schedlab.backends.vllm.engine import launch_spec
    from schedlab.backends.served.run import run_served

    registry.entry(args.policy, registry.QUEUE)  # fail early on an unknown name
    if len(args.traces) != len(args.rates):
        raise SchedlabError("--traces and --rates need one rate label per trace")
    run_served(
        launch_spec(args),
        args.model_folder,
        policy=args.policy,
        kappa=_kappa(args.kappa) if args.kappa else {},
        traces={label: _trace(args, t) for t, label in zip(args.traces, args.rates)},
        identity={"workload": args.workload},
        repeats=args.repeats,
        seed=args.seed,
        server_log=args.server_log,
        out_dir=args.out_dir,
    )


def _served_outputs(args) -> list:
    """What `schedlab vllm-serve` writes: every replay's tables and the server's step logs."""
    from schedlab.backends.served.run import served_outputs

    return served_outputs(args.out_dir, args.rates, seed=args.seed, repeats=args.repeats, server_log=args.server_log)


def cmd_whisper_files(args) -> None:
    from schedlab.data.whisper_files import write_model_folder

    write_model_folder(args.model, args.out)


# -- parser -------------------------------------------------------------------------------
def _run_args(p: argparse.ArgumentParser, *, sweep: bool = False) -> None:
    """A run's trace, policy, identity and outputs (vllm-run); with ``sweep`` (simulate), one
    value per run for the trace, rate and outputs."""
    many = {"nargs": "+"} if sweep else {}
    p.add_argument("--trace", type=InputPath, required=True, **many)
    p.add_argument("--scheduler", "--policy", dest="policy", required=True,
                   help="a registered scheduler (`schedlab schedulers`): a queue policy, or with simulate a batch builder too")
    p.add_argument("--kappa", type=InputPath, help="kappa JSON; without it every job's size is its max_tokens (output length)")
    p.add_argument("--workload", default="custom", help="name recorded in the summary")
    p.add_argument("--rate", type=rate_type(inf=True), default=None if sweep else float("nan"),
                   help="recorded in the summary (inf: a burst)", **many)
    p.add_argument("--seed", type=seed, default=0, help="recorded in the summary")
    p.add_argument("--out-results", type=OutputPath, required=True, **many)
    p.add_argument("--out-summary", type=OutputPath, required=True, **many)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="schedlab", description=__doc__)
    p.add_argument("--debug", action="store_true",
                   help=f"print an error's traceback before its one line (also: {DEBUG_VARIABLE}=1)")
    sub = p.add_subparsers(dest="command", required=True)

    d = sub.add_parser("data", help="LibriSpeech test-clean utterances with Whisper token counts")
    d.add_argument("--out", type=OutputPath, required=True,
                   help="parquet: utterance_id, duration_s, transcript, text_tokens, output_tokens")
    d.set_defaults(func=cmd_data)

    w = sub.add_parser("workload", help="seeded traces of a registered workload kind, one per rate")
    w.add_argument("--kind", required=True,
                   help="a registered workload kind (`schedlab workloads`), e.g. azure-conv, mooncake, librispeech")
    w.add_argument("--rate", type=rate_type(inf=True), nargs="+", required=True, help="req/s; inf = burst at t=0")
    w.add_argument("--seed", type=seed, default=0)
    n = w.add_mutually_exclusive_group(required=True)
    n.add_argument("--duration-s", type=duration, help="seconds of arrivals (a kind timed by the rate)")
    n.add_argument("--n-requests", type=count, help="number of requests")
    w.add_argument("--param", type=parameter, action="append", default=[], metavar="KEY=VALUE",
                   help="one of the kind's parameters (`schedlab workloads` lists them), e.g. share=0.3")
    w.add_argument("--pool", type=named_path, action="append", default=[], metavar="NAME=PATH",
                   help="a pool the kind draws from, from a file (default: its data, from the mirror or downloaded)")
    w.add_argument("--utterances", type=InputPath, help="the utterances pool: parquet from `schedlab data`")
    w.add_argument("--model", help="a catalogue model whose context every request must fit, e.g. mistral-7b")
    w.add_argument("--too-long", choices=TOO_LONG, default="refuse",
                   help="a request past --model's context: refuse the trace, clip its prompt, or drop it")
    w.add_argument("--prompt-scale", type=positive_number(float, 1.0), default=1.0,
                   help="prompt lengths times this (at most 1), before --model's context: the workload's shape "
                        "on a smaller engine (its KV cache and prefill budget scaled alike)")
    w.add_argument("--output-scale", type=positive_number(float, 1.0), default=1.0,
                   help="output lengths times this (at most 1)")
    w.add_argument("--burstiness", type=_positive, help="gamma shape of the arrivals; 1 (default) = Poisson")
    w.add_argument("--clips-per-duration", type=count, help="the uniform kind's clips per duration (its parameter)")
    w.add_argument("--out", type=OutputPath, nargs="+", required=True, help="one parquet per rate")
    w.set_defaults(func=cmd_workload)
    ws = sub.add_parser("workloads", help="list the registered workload kinds and the pools they draw from")
    ws.set_defaults(func=cmd_workloads)
    so = sub.add_parser("sources", help="list the registered step-time sources (where profile and steptime get their tables)")
    so.set_defaults(func=cmd_sources)

    pr = sub.add_parser("profile", help="a latency profile table (roofline, the passes measured on the shipped GPUs, "
                                         "timed torch passes or vLLM steps, or a GPU profile shipped with the package)")
    pr.add_argument("--source", required=True,
                    help="a registered step-time source (`schedlab sources` lists them), e.g. roofline, measured, "
                         "shipped (a catalogue GPU), torch, vllm (this machine)")
    pr.add_argument("--hardware", default="A100-40GB", help="catalogue device (roofline, measured, shipped)")
    pr.add_argument("--model", required=True)
    pr.add_argument("--repeats", type=_positive_int, default=3, help="timed repeats per point (torch)")
    pr.add_argument("--device", default="cpu", help="device, e.g. cpu or cuda:0 (torch, vllm)")
    vllm_engine_args(pr, device=False)
    pr.add_argument("--out", type=OutputPath, required=True)
    pr.set_defaults(func=cmd_profile)

    st = sub.add_parser("steptime", help="a step-time model for a catalogue GPU and model: its shipped profile or "
                                         "the roofline's, fitted (profile and fit steptime in one)")
    st.add_argument("--source", required=True,
                    help="a registered step-time source that prices a catalogue GPU (`schedlab sources`): shipped, a "
                         "GPU profile measured and shipped with the package; roofline, predicted; measured, the "
                         "shipped GPUs' step costs priced at this GPU's peaks")
    st.add_argument("--hardware", required=True, help="catalogue device, e.g. H100-SXM")
    st.add_argument("--model", required=True, help="model architecture, e.g. mistral-7b")
    st.add_argument("--tile", type=number(int, minimum=0, strict=False, maximum=2**20), default=0,
                    help="GEMM tile width: fit the tile staircase (0: none)")
    st.add_argument("--out", type=OutputPath, required=True, help="step-time JSON")
    st.set_defaults(func=cmd_steptime)

    f = sub.add_parser("fit", help="fit kappa, step-time coefficients, calibration")
    fsub = f.add_subparsers(dest="what", required=True)
    fs = fsub.add_parser("steptime", help="OLS step-time coefficients from a profile table")
    fs.add_argument("--profile", type=InputPath, nargs="+", required=True, help="profile tables, each fitted on its own")
    fs.add_argument("--tile", type=number(int, minimum=0, strict=False, maximum=2**20), default=0,
                    help="GEMM tile width: fit the tile staircase (0: none)")
    fs.add_argument("--out", type=OutputPath, nargs="+", required=True, help="one step-time JSON per profile")
    fs.set_defaults(func=cmd_fit_steptime)
    fe = fsub.add_parser("engine-steps", help="step-time OLS on served runs' engine steps, one rate held out per fit")
    fe.add_argument("--steps", type=input_folder("*.steps.parquet"), nargs="+", required=True,
                    help="step tables (*.steps.parquet from `schedlab vllm-serve`), or folders of them")
    fe.add_argument("--seed", type=seed, help="only the steps of the server started with this seed (default: every step)")
    fe.add_argument("--held-out", type=rate_type(), nargs="+", default=[],
                    help="rates to hold out, one fit each (fitted on the steps of every other rate)")
    fe.add_argument("--out", type=OutputPath, nargs="+", default=[], help="one step-time JSON per held-out rate")
    fe.add_argument("--out-all", type=OutputPath, help="also a fit on every step (no rate held out)")
    fe.set_defaults(func=cmd_fit_engine_steps)
    fk = fsub.add_parser("kappa", help="tokens per second of audio, per language")
    fk.add_argument("--librispeech", type=InputPath, required=True, help="parquet from `schedlab data`")
    fk.add_argument("--fleurs", nargs="*", default=["es", "hi", "ar"])
    fk.add_argument("--out", type=OutputPath, required=True)
    fk.set_defaults(func=cmd_fit_kappa)
    fc = fsub.add_parser("calibrate", help="scale a step-time model to an FCFS baseline")
    fc.add_argument("--base", type=InputPath, required=True, help="step-time JSON to calibrate")
    fc.add_argument("--utterances", type=InputPath, required=True)
    fc.add_argument("--kappa", type=InputPath, required=True)
    fc.add_argument("--saturation-rps", type=rate_type(), required=True)
    fc.add_argument("--requests-per-rate", type=count, default=1000,
                    help="requests of each Table 1 rate's trace (vllm bench serve's default count)")
    fc.add_argument("--overload-rate", type=rate_type(), default=25.0)
    fc.add_argument("--n-requests", type=count, default=2000, help="requests of the overloaded trace")
    fc.add_argument("--alt-duration-s", type=duration, default=300.0,
                    help="the other bound, shown beside the fit: seconds of arrivals ...")
    fc.add_argument("--alt-max-in-flight", type=_positive_int, default=100, help="... with this cap on requests in flight")
    fc.add_argument("--seeds", type=seed, nargs="+", default=list(range(10)),
                    help="trace seeds: the fit matches the median of each FCFS cell over them, and every policy runs "
                         "on each at every reported rate")
    fc.add_argument("--fit-seeds", type=seed, nargs="+",
                    help="fit on these of --seeds only (default: all), e.g. one seed to see what one draw gives")
    fc.add_argument("--step-ms", type=_positive, nargs=2, metavar=("LOW", "HIGH"),
                    help="FCFS's mean step time on the overloaded trace, a target interval (ms)")
    fc.add_argument("--station", action="store_true", help="fit the front end as a queue (its service time)")
    fc.add_argument("--fit-only", action="store_true",
                    help="the fit and its runs by seed alone, without the bounds, sensitivity and implied speeds")
    _engine_args(fc)
    fc.add_argument("--out", type=OutputPath, required=True)
    fc.set_defaults(func=cmd_fit_calibrate)
    fa = fsub.add_parser("apply", help="apply a calibration to another model's step-time fit")
    fa.add_argument("--base", type=InputPath, required=True)
    fa.add_argument("--calibrated", type=InputPath, required=True)
    fa.add_argument("--out", type=OutputPath, required=True)
    fa.set_defaults(func=cmd_fit_apply)

    s = sub.add_parser("simulate", help="simulated runs of one policy, one per trace (schedlab's engine, or vLLM's scheduler)")
    s.add_argument("--backend", default="sim",
                   help="sim: schedlab's engine, or another backend on a virtual clock: vLLM's or transformers' real "
                        "scheduler (`schedlab backends` lists them)")
    s.add_argument("--batching", choices=BATCHINGS, default="vllm",
                   help="the batching rules a queue policy runs inside: vLLM v1's, or transformers' FIFO or "
                        "prefill-first scheduler's (sim, transformers-sim)")
    _run_args(s, sweep=True)
    s.add_argument("--steptime", type=InputPath, required=True, nargs="+",
                   help="step-time JSON from `schedlab fit`: one for every run, or one per run")
    s.add_argument("--steptime-fit", help="which fit the step-time models are, recorded in the summaries")
    s.add_argument("--max-in-flight", type=_positive_int,
                   help="the client's cap on requests in flight (latencies count from sending)")
    _engine_args(s)
    s.set_defaults(func=cmd_simulate)
    v = sub.add_parser("vllm-run", help="replay a trace through a real vLLM engine (dummy weights)")
    _run_args(v)
    v.add_argument("--model", default="tiny-llama", help="architecture folder under schedlab/assets/models")
    vllm_engine_args(v, device=True)
    v.set_defaults(func=cmd_vllm_run)
    tr = sub.add_parser("transformers-run", help="replay a trace through transformers' continuous-batching engine "
                                                 "(random weights) running a queue policy")
    _run_args(tr)
    tr.add_argument("--model", default="tiny-llama", help="architecture folder under schedlab/assets/models")
    tr.add_argument("--out-steps", type=OutputPath, required=True, help="the engine's steps (parquet, profile columns)")
    g = tr.add_argument_group("transformers engine")
    g.add_argument("--device", default="cpu", help="torch device, e.g. cpu or cuda:0")
    g.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default="float32")
    g.add_argument("--order", choices=("fifo", "prefill-first"), default="fifo",
                   help="transformers' scheduler class the policy's waiting queue sits in")
    g.add_argument("--block-size", type=_positive_int, default=16, help="tokens of a KV page")
    g.add_argument("--kv-capacity-blocks", type=positive_number(int, 2**24), default=1024)
    g.add_argument("--max-num-batched-tokens", type=_positive_int, default=256)
    g.add_argument("--max-num-seqs", type=_positive_int, default=32, help="requests per step")
    g.add_argument("--threads", type=_positive_int, help="torch threads on the CPU")
    tr.set_defaults(func=cmd_transformers_run)
    vs = sub.add_parser("vllm-serve", help="start `vllm serve` with a policy and replay traces over HTTP")
    vs.add_argument("--scheduler", "--policy", dest="policy", required=True,
                    help="a registered queue policy (`schedlab schedulers`), e.g. fcfs, sjf, hrrn, adaptive")
    vs.add_argument("--kappa", type=InputPath,
                    help="kappa JSON; without it every job's size is its max_tokens (output length)")
    vs.add_argument("--model", default="tiny-llama", help="architecture folder under schedlab/assets/models")
    vs.add_argument("--model-folder", type=InputPath, required=True,
                    help="folder the server loads (Whisper: from `schedlab whisper-files`)")
    vs.add_argument("--traces", type=InputPath, nargs="+", required=True, help="trace parquet files, replayed in this order")
    vs.add_argument("--rates", type=rate_label, nargs="+", required=True,
                    help="one rate label per trace (file names, summaries): the rate in req/s")
    vs.add_argument("--workload", default="custom", help="name recorded in the summaries")
    vs.add_argument("--seed", type=seed, default=0, help="recorded in the summaries and file names")
    vs.add_argument("--repeats", type=positive_number(int, 10**4), default=1, help="replays of every trace on the one server")
    vs.add_argument("--server-log", type=OutputPath, required=True, help="the server's output")
    vs.add_argument("--out-dir", type=OutputFolder, required=True,
                    help="rate<label>_seed<seed>_rep<k>.parquet and .json go here")
    vllm_engine_args(vs, device=True)
    vs.set_defaults(func=cmd_vllm_serve, planned_outputs=_served_outputs)
    wf = sub.add_parser("whisper-files", help="a Whisper model folder with tokenizer and processor files, offline")
    wf.add_argument("--model", required=True, help="a bundled Whisper architecture, e.g. whisper-tiny")
    wf.add_argument("--out", type=OutputFolder, required=True,
                    help="folder to write (config.json, tokenizer, preprocessor config)")
    wf.set_defaults(func=cmd_whisper_files)

    cl = sub.add_parser("cluster", help="a simulated run of several engines behind a router (schedlab's engine)")
    cl.add_argument("--trace", type=InputPath, required=True)
    cl.add_argument("--replicas", type=positive_number(int, MAX_REPLICAS), required=True, help="engines behind the router")
    cl.add_argument("--router", required=True,
                    help="a registered router (`schedlab schedulers`), e.g. round-robin, least-tokens, prefix-affinity")
    cl.add_argument("--scheduler", "--policy", dest="policy", required=True, nargs="+",
                    help="a registered scheduler for every replica, or one per replica")
    cl.add_argument("--steptime", type=InputPath, required=True, nargs="+",
                    help="step-time JSON from `schedlab fit`: one for every replica, or one per replica")
    cl.add_argument("--kappa", type=InputPath, help="kappa JSON; without it every job's size is its max_tokens (output length)")
    cl.add_argument("--workload", default="custom", help="name recorded in the summaries")
    cl.add_argument("--rate", type=rate_type(inf=True), default=float("nan"), help="recorded in the summaries (inf: a burst)")
    cl.add_argument("--seed", type=seed, default=0, help="the random router's seed, recorded in the summaries")
    cl.add_argument("--out-results", type=OutputPath, required=True,
                    help="per-request results (parquet), with the replica each request ran on")
    cl.add_argument("--out-summary", type=OutputPath, required=True, help="the cluster-wide run summary (JSON)")
    cl.add_argument("--out-replicas", type=OutputPath, required=True, help="one run summary per replica (parquet)")
    _engine_args(cl)
    cl.set_defaults(func=cmd_cluster)

    cr = sub.add_parser("cluster-replay", help="a trace replayed across running `vllm serve` servers behind a router "
                                               "(the simulated cluster's router code)")
    cr.add_argument("--servers", type=server_url, nargs="+", required=True,
                    help="the servers' base URLs, e.g. http://127.0.0.1:8000 http://127.0.0.1:8001")
    cr.add_argument("--trace", type=InputPath, required=True, help="a decoder model's trace")
    cr.add_argument("--router", required=True, help="a registered router, e.g. round-robin, least-requests, "
                                                    "least-kv, prefix-affinity")
    cr.add_argument("--model", required=True, help="the model the servers serve (--served-model-name)")
    cr.add_argument("--block-size", type=_positive_int, default=16,
                    help="the servers' KV block size, which prefix-affinity keys prompts by")
    cr.add_argument("--scheduler", "--policy", dest="policy", required=True,
                    help="the scheduler the servers run, recorded as the summaries' policy")
    cr.add_argument("--workload", default="custom", help="name recorded in the summaries")
    cr.add_argument("--rate", type=rate_type(inf=True), default=float("nan"), help="recorded in the summaries (inf: a burst)")
    cr.add_argument("--seed", type=seed, default=0, help="the random router's seed, recorded in the summaries")
    cr.add_argument("--timeout-s", type=positive_number(float, 86400), default=600.0, help="per request")
    cr.add_argument("--one-at-a-time", action="store_true",
                    help="send each request at its arrival or when the one before it has ended, whichever is later")
    cr.add_argument("--out-results", type=OutputPath, required=True,
                    help="per-request results (parquet), with the server (replica) each request went to")
    cr.add_argument("--out-summary", type=OutputPath, required=True, help="the run summary over every server (JSON)")
    cr.add_argument("--out-replicas", type=OutputPath, required=True, help="one run summary per server (parquet)")
    cr.set_defaults(func=cmd_cluster_replay)

    sc = sub.add_parser("schedulers", help="list the registered schedulers and routers (built-in and plug-ins)")
    sc.set_defaults(func=cmd_schedulers)
    bk = sub.add_parser("backends", help="list the registered backends (where simulate, vllm-run and the pipeline run a scheduler)")
    bk.set_defaults(func=cmd_backends)

    c = sub.add_parser("collect", help="gather run summaries (JSON) into one parquet table")
    c.add_argument("summaries", type=input_folder("*.json"), nargs="+", help="run summaries (JSON), or folders of them")
    c.add_argument("--out", type=OutputPath, required=True)
    c.set_defaults(func=cmd_collect)

    from schedlab.slai.cli import add_commands as add_slai_commands
    from schedlab.ewsjf.cli import add_commands as add_ewsjf_commands
    from schedlab.extensions.cli import add_commands as add_extension_commands
    from schedlab.slosa.cli import add_commands as add_slosa_commands
    from schedlab.tournament.cli import add_commands as add_tournament_commands

    add_slosa_commands(sub)
    add_ewsjf_commands(sub)
    add_slai_commands(sub)
    add_tournament_commands(sub)
    add_extension_commands(sub)
    return p


class _Stopped(SystemExit):
    """The exit that SIGTERM raises where the main thread stands (see :func:`main`)."""


def _stop(signum: int, frame) -> None:
    raise _Stopped(128 + signal.SIGTERM)


def _stop_again(unraisable) -> None:
    """An exception that Python cannot raise, from a finalizer or a weakref callback, is handed
    here and dropped. When it is the SIGTERM exit (the signal landed while such code ran), the
    exit is raised again 10 ms later, from a timer's signal, which lands where it can propagate
    (or, landing in such code again, comes back here); anything else is reported as Python
    reports it."""
    if isinstance(unraisable.exc_value, _Stopped):
        signal.signal(signal.SIGALRM, _stop)
        signal.setitimer(signal.ITIMER_REAL, 0.01)
    else:
        sys.__unraisablehook__(unraisable)


def main(argv: list[str] | None = None) -> int:
    """Run one command; bad input (any :class:`SchedlabError`) is one line on stderr and
    exit status 2, as for usage errors; an interrupt (Ctrl-C) is one line and exit status 130.
    Either way no output is left half-written (:mod:`schedlab.io`)."""
    from schedlab.data.sources import data_folders

    try:
        args = build_parser().parse_args(argv)
    except KeyboardInterrupt:
        return _interrupted()
    # A job runner stops a job with SIGTERM (Snakemake, SLURM's scancel): exit through the
    # context managers, so that servers started here are stopped and no partial output is left.
    signal.signal(signal.SIGTERM, _stop)
    sys.unraisablehook = _stop_again
    try:
        # Before any work: inputs readable, outputs where a file may go, none of them an input,
        # named or implicit (the data mirror and cache that any command may read).
        inputs, outputs, folders = command_paths(args)
        check_paths(inputs, outputs, folders, implicit=data_folders())
        args.func(args)
    except SchedlabError as e:
        if args.debug or os.environ.get(DEBUG_VARIABLE, "") not in ("", "0"):
            traceback.print_exc()
        print("schedlab: error: " + " ".join(str(e).split()), file=sys.stderr)
        return 2
    except PermissionError as e:  # a file of the user's that this user may not read or write
        print(f"schedlab: error: {e.filename or ''}: {e.strerror or e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return _interrupted()
    except BrokenPipeError:
        return _reader_gone()
    except OSError as e:
        if e.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        # a write outside the atomic writers (a cache, a log): theirs are removed already
        print(f"schedlab: error: {e.filename or 'a write'}: {e.strerror or os.strerror(e.errno)}", file=sys.stderr)
        return 2
    finally:
        end_guard()  # the command's inputs are guarded while it runs, not after
    return 0


def _reader_gone() -> int:
    """The reader of stdout stopped reading (``schedlab schedulers | head``): no more output and
    no error, the exit status a shell gives a process ended by SIGPIPE (128 + 13). stdout goes
    to /dev/null so that the interpreter's own flush as it exits does not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 128 + signal.SIGPIPE


def _interrupted() -> int:
    """Ctrl-C: one line, exit status 130 (128 + SIGINT, as a shell reports it). The command is
    ending: a second Ctrl-C is ignored, and CPython's record of the interrupt as unhandled (when
    it left a C extension's ``PyRun_*`` call) is cleared, or the process would end by SIGINT as
    it exits (:func:`schedlab.compat.cpython.forget_unhandled_interrupt`)."""
    from schedlab.compat.cpython import forget_unhandled_interrupt

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    forget_unhandled_interrupt()
    print("schedlab: interrupted", file=sys.stderr)
    return 128 + signal.SIGINT


if __name__ == "__main__":
    sys.exit(main())
