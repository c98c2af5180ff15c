"""``schedlab simulate``: simulated runs of one policy, one per trace, on schedlab's engine or
a real engine's scheduler on a virtual clock."""

from __future__ import annotations

from schedlab import registry, validation
from schedlab.cli import options
from schedlab.cli_types import InputPath
from schedlab.contracts import BATCHINGS
from schedlab.errors import SchedlabError
from schedlab.io import write_outputs

# The engine and the run loop (numpy, pandas, numba) are imported inside the command: every
# command, `--help` too, imports this module (start-up time).


def cmd_simulate(args) -> None:
    """One run per ``--trace`` (a rate sweep in one process: the step-time model, kappa and
    the compiled engine are loaded once), each written as soon as it finishes."""
    from schedlab.engine import Arena
    from schedlab.simulate import run_summary

    n = len(args.trace)
    rates = args.rate if args.rate is not None else [float("nan")] * n
    if not len(rates) == len(args.out_results) == len(args.out_summary) == n:
        raise SchedlabError("--trace, --rate, --out-results and --out-summary need one value per run")
    if len(args.steptime) not in (1, n):
        raise SchedlabError("--steptime needs one model for every run or one per run")
    registry.entry(args.policy)  # fail early on an unknown name
    registry.backend_entry(args.backend, simulated=True)
    engine, kappa = options.engine(args), options.kappa(args.kappa)
    arenas = {path: Arena(validation.read_steptime(path), engine, kappa) for path in args.steptime}
    steptimes = args.steptime * n if len(args.steptime) == 1 else args.steptime
    traces = [options.trace(args, path) for path in args.trace]  # every input checked before any run
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
        write_outputs({out_results: result.requests,
                       out_summary: validation.check_measured(summary, f"the run of {trace_path}")})


def add_commands(sub) -> None:
    s = sub.add_parser("simulate", help="simulated runs of one policy, one per trace (schedlab's engine, or vLLM's scheduler)")
    s.add_argument("--backend", default="sim",
                   help="sim: schedlab's engine, or another backend on a virtual clock: vLLM's or transformers' real "
                        "scheduler (`schedlab backends` lists them)")
    s.add_argument("--batching", choices=BATCHINGS, default="vllm",
                   help="the batching rules a queue policy runs inside: vLLM v1's, or transformers' FIFO or "
                        "prefill-first scheduler's (sim, transformers-sim)")
    options.run_args(s, sweep=True)
    s.add_argument("--steptime", type=InputPath, required=True, nargs="+",
                   help="step-time JSON from `schedlab fit`: one for every run, or one per run")
    s.add_argument("--steptime-fit", help="which fit the step-time models are, recorded in the summaries")
    s.add_argument("--max-in-flight", type=options.positive_int,
                   help="the client's cap on requests in flight (latencies count from sending)")
    options.engine_args(s)
    s.set_defaults(func=cmd_simulate)
