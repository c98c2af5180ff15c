"""``schedlab sources`` (the registered step-time sources), ``schedlab profile`` (a source's
latency profile table), ``schedlab steptime`` (a catalogue GPU's profile, fitted), and the
serving stack's own CPU costs: ``schedlab front-end-cost`` (a Whisper request's way in to the
scheduler) and ``schedlab scheduler-cost`` (vLLM's scheduler's work per step)."""

from __future__ import annotations

from schedlab import registry, validation
from schedlab.cli import options
from schedlab.cli.tables import print_table
from schedlab.cli_types import InputPath, OutputPath, clip_seconds, vllm_engine_args
from schedlab.errors import SchedlabError
from schedlab.io import write_outputs, write_parquet

# The fit and the vLLM engine's launch spec (numpy, pandas, vLLM's options) are imported inside
# the commands that use them: every command, `--help` too, imports this module (start-up time).


def cmd_front_end_cost(args) -> None:
    from schedlab.fit.front_end_cost import fit_front_end, measure_audio_front_end

    mean_s = float(validation.read_pool(args.utterances, ("duration_s",))["duration_s"].mean())
    table = measure_audio_front_end(args.model, args.durations, args.repeats)
    write_outputs({args.out: table, args.out_fit: {"model": args.model, **fit_front_end(table, mean_s)}})


def cmd_scheduler_cost(args) -> None:
    from schedlab.engine import Arena
    from schedlab.fit.scheduler_cost import fit_scheduler_cost, measure_scheduler_cost

    registry.entry(args.policy)  # fail early on an unknown name
    arena = Arena(validation.read_steptime(args.steptime), options.engine(args), {})
    table = measure_scheduler_cost(options.trace(args), args.policy, arena, model=args.model)
    write_outputs({args.out: table, args.out_fit: {"policy": args.policy, "model": args.model, **fit_scheduler_cost(table)}})


def cmd_sources(args) -> None:
    """Every registered step-time source, one line each."""
    print_table(("source", "prices", "from", "what it gives"),
                [(e.name, "this machine" if e.machine else "a catalogue GPU", f"{e.distribution} ({e.module})",
                  e.summary) for e in registry.source_entries()])


def cmd_profile(args) -> None:
    source = registry.source_entry(args.source)

    def engine():  # the vLLM engine's limits, read from the options (and checked) when a source asks
        from schedlab.backends.vllm.engine import launch_spec

        return launch_spec(args)

    table = source.profile(hardware=args.hardware, model=args.model, device=args.device, repeats=args.repeats,
                           engine=engine)
    write_parquet(validation.check_profile(table, source.describe()), args.out)


def cmd_steptime(args) -> None:
    """A catalogue GPU and model's step-time model in one command: the profile of a source that
    prices a catalogue GPU, fitted as `schedlab fit steptime` fits one."""
    from schedlab.fit.steptime import fit_steptime

    source = registry.source_entry(args.source)
    if source.machine:
        raise SchedlabError(f"--source: {source.describe()} times this machine, not a catalogue GPU: "
                            f"`schedlab profile --source {source.name}`, then `schedlab fit steptime`")
    table = validation.check_profile(source.profile(hardware=args.hardware, model=args.model), source.describe())
    validation.write_steptime(fit_steptime(table, tile=args.tile), args.out)


def add_commands(sub) -> None:
    so = sub.add_parser("sources", help="list the registered step-time sources (where profile and steptime get their tables)")
    so.set_defaults(func=cmd_sources)

    pr = sub.add_parser("profile", help="a latency profile table (roofline, the passes measured on the shipped GPUs, "
                                         "timed torch passes or vLLM steps, or a GPU profile shipped with the package)")
    pr.add_argument("--source", required=True,
                    help="a registered step-time source (`schedlab sources` lists them), e.g. roofline, measured, "
                         "shipped (a catalogue GPU), torch, vllm (this machine)")
    pr.add_argument("--hardware", default="A100-40GB", help="catalogue device (roofline, measured, shipped)")
    pr.add_argument("--model", required=True)
    pr.add_argument("--repeats", type=options.positive_int, default=3, help="timed repeats per point (torch)")
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
    options.tile_arg(st)
    st.add_argument("--out", type=OutputPath, required=True, help="step-time JSON")
    st.set_defaults(func=cmd_steptime)

    fr = sub.add_parser("front-end-cost", help="the CPU time vLLM's API server spends on a Whisper request before "
                        "the scheduler sees it (audio decoding, log-mel features), measured here, and its fit")
    fr.add_argument("--model", required=True, help="a bundled Whisper architecture (its mel bins), e.g. whisper-large-v3")
    fr.add_argument("--durations", type=clip_seconds, nargs="+", default=[2.0, 5.0, 10.0, 20.0, 30.0],
                    help="clip durations to time (s, at most Whisper's 30 s window)")
    fr.add_argument("--repeats", type=options.positive_int, default=5, help="timed calls per duration")
    fr.add_argument("--utterances", type=InputPath, required=True,
                    help="the workload's clips: the station's service time is the fit at their mean duration")
    fr.add_argument("--out", type=OutputPath, required=True, help="one row per call (parquet)")
    fr.add_argument("--out-fit", type=OutputPath, required=True, help="the OLS fit and the service time (JSON)")
    fr.set_defaults(func=cmd_front_end_cost)

    sc = sub.add_parser("scheduler-cost", help="the CPU time vLLM's scheduler spends on each step (schedule() and "
                        "update_from_output()) over a trace on a virtual clock, and its fit per scheduled request")
    sc.add_argument("--trace", type=InputPath, required=True)
    sc.add_argument("--scheduler", "--policy", dest="policy", default="fcfs", help="a registered scheduler")
    sc.add_argument("--steptime", type=InputPath, required=True, help="the step-time model that advances the clock")
    options.engine_args(sc)
    sc.add_argument("--out", type=OutputPath, required=True, help="one row per step (parquet)")
    sc.add_argument("--out-fit", type=OutputPath, required=True, help="the OLS fit (JSON)")
    sc.set_defaults(func=cmd_scheduler_cost)
