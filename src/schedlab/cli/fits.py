"""``schedlab fit``: step-time coefficients from a profile table or from served runs' engine
steps, kappa per language, a calibration to paper A's FCFS baseline and its transfer to
another model's fit."""

from __future__ import annotations

from dataclasses import replace

from schedlab import validation
from schedlab.cli import options
from schedlab.cli_types import InputPath, OutputPath, count, duration, input_folder, rate_type, seed
from schedlab.errors import SchedlabError
from schedlab.io import write_json

# The fits, the engine, the datasets and the workloads they run on (numpy, pandas, numba) are
# imported inside the commands that use them: every command, `--help` too, imports this module
# (start-up time).


def cmd_fit_steptime(args) -> None:
    from schedlab.fit.steptime import fit_steptime

    if len(args.profile) != len(args.out):
        raise SchedlabError("--profile and --out need one output per profile")
    fits = {out: fit_steptime(validation.read_profile(path), tile=args.tile) for path, out in zip(args.profile, args.out)}
    for out, model in fits.items():
        validation.write_steptime(model, out)


def cmd_fit_engine_steps(args) -> None:
    from schedlab.fit.steptime import fit_held_out, read_engine_steps

    if len(args.held_out) != len(args.out):
        raise SchedlabError("--held-out and --out need one output per held-out rate")
    if not args.out and not args.out_all:
        raise SchedlabError("nothing to fit: give --held-out with --out, or --out-all")
    steps = read_engine_steps(args.steps, seed=args.seed)
    models = {out: fit_held_out(steps, rate) for rate, out in zip(args.held_out, args.out)}
    if args.out_all:
        models[args.out_all] = fit_held_out(steps, None)
    for out, model in models.items():
        validation.write_steptime(model, out)


def cmd_fit_kappa(args) -> None:
    from schedlab.data import fleurs
    from schedlab.data.sources import DataUnavailable
    from schedlab.data.whisper_tokens import count_text_tokens
    from schedlab.fit.kappa import fit_languages

    tables: dict = {"en": validation.read_pool(args.librispeech, ("duration_s", "text_tokens"))}
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

    from schedlab.engine import Arena
    from schedlab.fit.calibrate import baseline_rows, bound_study, calibrate, implied_saturation, sensitivity
    from schedlab.fit.front_end_cost import front_end_service
    from schedlab.asr.report import reported_asr_table1
    from schedlab.workload.arrivals import arrival_times
    from schedlab.workload.asr import asr_trace, librispeech_pool

    pool = librispeech_pool(validation.read_pool(args.utterances, ("duration_s", "output_tokens")))
    seeds = list(dict.fromkeys(args.seeds))
    fit_seeds = list(dict.fromkeys(args.fit_seeds or seeds))
    if not set(fit_seeds) <= set(seeds):
        raise SchedlabError(f"--fit-seeds {fit_seeds} must be among --seeds {seeds}")

    def trace(rate: float, seed: int, **bound):
        arrivals = arrival_times(rate, rng=np.random.default_rng([seed, 0]), **bound)
        return asr_trace(pool, arrivals, rng=np.random.default_rng([seed, 1]))

    baseline = baseline_rows(reported_asr_table1())
    arena = Arena(validation.read_steptime(args.base), options.engine(args), options.kappa(args.kappa))
    # Each trace is built once, per rate and seed: the fit, the runs by seed, the bounds and the
    # sensitivity share them.
    by_seed = {s: {r: trace(r, s, n_requests=args.requests_per_rate) for r in baseline.index} for s in seeds}
    overload = {s: trace(args.overload_rate, s, n_requests=args.n_requests) for s in fit_seeds}
    model, record = calibrate(arena, baseline=baseline, traces={r: [by_seed[s][r] for s in fit_seeds] for r in baseline.index},
                              overload_trace=[overload[s] for s in fit_seeds], saturation_rps=args.saturation_rps,
                              step_ms=args.step_ms, station=args.station,
                              station_service_s=front_end_service(args.station_measured) if args.station_measured else None)
    record["fit_seeds"], record["run_seeds"] = fit_seeds, seeds
    calibrated = replace(arena, step_time=model)
    # Every policy at every reported rate on every seed, under this fit: the rows each paper
    # number is counted on (median and band over the seeds), for this fit and any other.
    record["seed_runs"] = bound_study(calibrated, {f"seed {s}": (by_seed[s], None) for s in seeds}).to_dict(orient="records")
    if args.fit_only:
        validation.write_steptime(model, args.out)
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
    validation.write_steptime(model, args.out)


def cmd_fit_apply(args) -> None:
    calibrated = validation.read_steptime(args.calibrated)
    record = calibrated.meta.get("calibration")
    if record is None:
        raise SchedlabError(f"{args.calibrated} holds no calibration")
    base = validation.read_steptime(args.base)
    validation.write_steptime(base.scaled(record["compute"], record["memory"], record["frontend_s"],
                                          record.get("frontend_service_s", 0.0), calibration=record), args.out)


def add_commands(sub) -> None:
    f = sub.add_parser("fit", help="fit kappa, step-time coefficients, calibration")
    fsub = f.add_subparsers(dest="what", required=True)
    fs = fsub.add_parser("steptime", help="OLS step-time coefficients from a profile table")
    fs.add_argument("--profile", type=InputPath, nargs="+", required=True, help="profile tables, each fitted on its own")
    options.tile_arg(fs)
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
    fc.add_argument("--alt-max-in-flight", type=options.positive_int, default=100, help="... with this cap on requests in flight")
    fc.add_argument("--seeds", type=seed, nargs="+", default=list(range(10)),
                    help="trace seeds: the fit matches the median of each FCFS cell over them, and every policy runs "
                         "on each at every reported rate")
    fc.add_argument("--fit-seeds", type=seed, nargs="+",
                    help="fit on these of --seeds only (default: all), e.g. one seed to see what one draw gives")
    fc.add_argument("--step-ms", type=options.positive, nargs=2, metavar=("LOW", "HIGH"),
                    help="FCFS's mean step time on the overloaded trace, a target interval (ms)")
    station = fc.add_mutually_exclusive_group()
    station.add_argument("--station", action="store_true", help="fit the front end as a queue (its service time)")
    station.add_argument("--station-measured", type=InputPath, metavar="FIT_JSON",
                         help="the front end as a queue with the service time measured by `schedlab front-end-cost` "
                              "(its --out-fit), held fixed")
    fc.add_argument("--fit-only", action="store_true",
                    help="the fit and its runs by seed alone, without the bounds, sensitivity and implied speeds")
    options.engine_args(fc)
    fc.add_argument("--out", type=OutputPath, required=True)
    fc.set_defaults(func=cmd_fit_calibrate)
    fa = fsub.add_parser("apply", help="apply a calibration to another model's step-time fit")
    fa.add_argument("--base", type=InputPath, required=True)
    fa.add_argument("--calibrated", type=InputPath, required=True)
    fa.add_argument("--out", type=OutputPath, required=True)
    fa.set_defaults(func=cmd_fit_apply)
