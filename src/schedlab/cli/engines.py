"""The real engines: ``schedlab vllm-run`` (a trace through an in-process vLLM engine),
``schedlab transformers-run`` (through transformers' continuous batching), ``schedlab
vllm-serve`` (`vllm serve` with a policy, traces replayed over HTTP) and ``schedlab
whisper-files`` (the Whisper model folder a server loads)."""

from __future__ import annotations

import time

from schedlab import registry, validation
from schedlab.cli import options
from schedlab.cli_types import InputPath, OutputFolder, OutputPath, positive_number, rate_label, seed, vllm_engine_args
from schedlab.errors import SchedlabError
from schedlab.io import write_outputs

# The engines, their servers and the metrics (vLLM, torch, transformers, pandas) are imported
# inside the commands that use them: every command, `--help` too, imports this module (start-up
# time).


def cmd_vllm_run(args) -> None:
    from schedlab.backends.vllm.engine import kv_capacity_blocks, launch_spec, replay, start_engine
    from schedlab.metrics import summarize

    registry.entry(args.policy, registry.QUEUE)  # fail early on an unknown name
    trace, kappa = options.trace(args), options.kappa(args.kappa)
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
    write_outputs({args.out_results: result.requests, args.out_summary: validation.check_measured(summary, "the run")})


def cmd_transformers_run(args) -> None:
    """A trace replayed through transformers' real engine (random weights) running a queue policy."""
    from schedlab.backends.transformers.engine import Engine, TransformersSpec, run_summary

    registry.entry(args.policy, registry.QUEUE)  # fail early on an unknown name
    spec = TransformersSpec(model=args.model, device=args.device, dtype=args.dtype, order=args.order,
                            block_size=args.block_size, kv_capacity_blocks=args.kv_capacity_blocks,
                            max_num_batched_tokens=args.max_num_batched_tokens, max_num_seqs=args.max_num_seqs,
                            seed=args.seed, threads=args.threads)
    trace = options.trace(args)
    engine = Engine(spec, args.policy, options.kappa(args.kappa))
    result, summary, steps = run_summary(engine, trace, {"workload": args.workload, "rate": args.rate, "seed": args.seed})
    write_outputs({args.out_results: result.requests, args.out_summary: summary, args.out_steps: steps})


def cmd_vllm_serve(args) -> None:
    from schedlab.backends.vllm.engine import launch_spec
    from schedlab.backends.served.run import run_served

    registry.entry(args.policy, registry.QUEUE)  # fail early on an unknown name
    if len(args.traces) != len(args.rates):
        raise SchedlabError("--traces and --rates need one rate label per trace")
    run_served(
        launch_spec(args),
        args.model_folder,
        policy=args.policy,
        kappa=options.kappa(args.kappa) if args.kappa else {},
        traces={label: options.trace(args, t) for t, label in zip(args.traces, args.rates)},
        identity={"workload": args.workload},
        repeats=args.repeats,
        seed=args.seed,
        server_log=args.server_log,
        out_dir=args.out_dir,
        attempts=args.replay_attempts,
    )


def _served_outputs(args) -> list:
    """What `schedlab vllm-serve` writes: every replay's tables and the server's step logs."""
    from schedlab.backends.served.run import served_outputs

    return served_outputs(args.out_dir, args.rates, seed=args.seed, repeats=args.repeats, server_log=args.server_log)


def cmd_whisper_files(args) -> None:
    from schedlab.data.whisper_files import write_model_folder

    write_model_folder(args.model, args.out)


def add_commands(sub) -> None:
    v = sub.add_parser("vllm-run", help="replay a trace through a real vLLM engine (dummy weights)")
    options.run_args(v)
    v.add_argument("--model", default="tiny-llama", help="architecture folder under schedlab/assets/models")
    vllm_engine_args(v, device=True)
    v.set_defaults(func=cmd_vllm_run)
    tr = sub.add_parser("transformers-run", help="replay a trace through transformers' continuous-batching engine "
                                                 "(random weights) running a queue policy")
    options.run_args(tr)
    tr.add_argument("--model", default="tiny-llama", help="architecture folder under schedlab/assets/models")
    tr.add_argument("--out-steps", type=OutputPath, required=True, help="the engine's steps (parquet, profile columns)")
    g = tr.add_argument_group("transformers engine")
    g.add_argument("--device", default="cpu", help="torch device, e.g. cpu or cuda:0")
    g.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default="float32")
    g.add_argument("--order", choices=("fifo", "prefill-first"), default="fifo",
                   help="transformers' scheduler class the policy's waiting queue sits in")
    g.add_argument("--block-size", type=options.positive_int, default=16, help="tokens of a KV page")
    g.add_argument("--kv-capacity-blocks", type=positive_number(int, 2**24), default=1024)
    g.add_argument("--max-num-batched-tokens", type=options.positive_int, default=256)
    g.add_argument("--max-num-seqs", type=options.positive_int, default=32, help="requests per step")
    g.add_argument("--threads", type=options.positive_int, help="torch threads on the CPU")
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
    vs.add_argument("--replay-attempts", type=positive_number(int, 100), default=3,
                    help="a replay that does not measure the engine (interference, a lagging front end, a late "
                         "client) is run again, this many times in all at most, the last on a fresh server")
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
