"""``schedlab cluster`` (several simulated engines behind a router) and ``schedlab
cluster-replay`` (a trace replayed across running `vllm serve` servers behind the same router
code)."""

from __future__ import annotations

from schedlab import registry, validation
from schedlab.cli import options
from schedlab.cli_types import InputPath, OutputPath, positive_number, rate_type, seed, server_url
from schedlab.contracts import MAX_REPLICAS
from schedlab.errors import SchedlabError
from schedlab.io import write_outputs

# The cluster's run loop and its HTTP replay (numpy, pandas, numba, aiohttp) are imported
# inside the commands that use them: every command, `--help` too, imports this module (start-up
# time).


def cmd_cluster(args) -> None:
    """One run of ``--replicas`` engines behind ``--router``: the engine limits and kappa
    alike, the step-time model and the scheduler one for all or one per replica."""
    from schedlab.cluster import cluster_summary, run_cluster
    from schedlab.engine import Arena

    n = args.replicas
    for option, values in (("--scheduler", args.policy), ("--steptime", args.steptime)):
        if len(values) not in (1, n):
            raise SchedlabError(f"{option} needs one value for every replica or one per replica ({n})")
    for name in args.policy:
        registry.entry(name)  # fail early on an unknown name
    registry.router_entry(args.router)
    engine, kappa = options.engine(args), options.kappa(args.kappa)
    arenas = {path: Arena(validation.read_steptime(path), engine, kappa) for path in args.steptime}
    trace = options.trace(args)
    steptimes = args.steptime * n if len(args.steptime) == 1 else args.steptime
    schedulers = args.policy * n if len(args.policy) == 1 else args.policy
    result = run_cluster(trace, schedulers, [arenas[path] for path in steptimes], args.router, seed=args.seed)
    summary, per_replica = cluster_summary(result, {"workload": args.workload, "rate": args.rate, "model": args.model,
                                                    "hardware": args.hardware, "seed": args.seed})
    write_outputs({args.out_results: result.requests,
                   args.out_summary: validation.check_measured(summary, "the cluster's run"),
                   args.out_replicas: per_replica})


def cmd_cluster_replay(args) -> None:
    """A trace replayed across running `vllm serve` servers behind ``--router``."""
    from schedlab.cluster.served import replay_across_servers

    registry.router_entry(args.router)  # fail early on an unknown name
    trace = validation.read_trace(args.trace)  # the servers' own context is theirs to check
    served = replay_across_servers(args.servers, trace, args.router, model=args.model, block_size=args.block_size,
                                   seed=args.seed, timeout_s=args.timeout_s, one_at_a_time=args.one_at_a_time,
                                   identity={"policy": args.policy, "workload": args.workload, "rate": args.rate,
                                             "model": args.model, "seed": args.seed})
    write_outputs({args.out_results: served.requests,
                   args.out_summary: validation.check_measured(served.summary, "the replay"),
                   args.out_replicas: served.replicas})


def add_commands(sub) -> None:
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
    options.engine_args(cl)
    cl.set_defaults(func=cmd_cluster)

    cr = sub.add_parser("cluster-replay", help="a trace replayed across running `vllm serve` servers behind a router "
                                               "(the simulated cluster's router code)")
    cr.add_argument("--servers", type=server_url, nargs="+", required=True,
                    help="the servers' base URLs, e.g. http://127.0.0.1:8000 http://127.0.0.1:8001")
    cr.add_argument("--trace", type=InputPath, required=True, help="a decoder model's trace")
    cr.add_argument("--router", required=True, help="a registered router, e.g. round-robin, least-requests, "
                                                    "least-kv, prefix-affinity")
    cr.add_argument("--model", required=True, help="the model the servers serve (--served-model-name)")
    cr.add_argument("--block-size", type=options.positive_int, default=16,
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
