"""``schedlab data`` (the LibriSpeech utterance pool), ``schedlab workload`` (traces of a
registered workload kind) and ``schedlab workloads`` (the kinds and pools registered)."""

from __future__ import annotations

from schedlab import registry
from schedlab.cli import options
from schedlab.cli.tables import print_table
from schedlab.cli_types import InputPath, OutputPath, count, duration, named_path, parameter, positive_number, rate_type, seed
from schedlab.contracts import TOO_LONG
from schedlab.errors import SchedlabError
from schedlab.io import write_outputs, write_parquet

# The datasets, the tokenizer, the workload kinds and the model catalogue (pandas, pydantic,
# YAML) are imported inside the commands that use them: every command, `--help` too, imports
# this module (start-up time).


def cmd_data(args) -> None:
    from schedlab.data.librispeech import load_test_clean
    from schedlab.data.whisper_tokens import count_text_tokens

    utts = load_test_clean()
    utts["text_tokens"] = count_text_tokens(utts["transcript"])
    utts["output_tokens"] = utts["text_tokens"] + 1  # the generated <|endoftext|>
    write_parquet(utts, args.out)


def cmd_workload(args) -> None:
    """One trace per ``--rate`` of a registered workload kind; each rate's trace is what a run of
    that rate alone gives."""
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


def cmd_workloads(args) -> None:
    """Every registered workload kind, one line each, then every pool."""

    def parameters(entry):
        return ", ".join(f"{name}={default!r}" for name, (_, default) in entry.parameters().items()) or "-"

    print_table(("kind", "requests", "paper", "pools", "timed by", "parameters", "from", "what it makes"),
                [(e.name, e.modality, e.paper or "-", ",".join(e.pools), "its own" if e.arrivals == registry.OWN else "rate",
                  parameters(e), f"{e.distribution} ({e.module})", e.summary) for e in registry.workload_entries()])
    print()
    print_table(("pool", "columns", "from", "what it holds"),
                [(e.name, ",".join(e.columns), f"{e.distribution} ({e.module})", e.summary)
                 for e in registry.pool_entries()])


def add_commands(sub) -> None:
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
    w.add_argument("--burstiness", type=options.positive, help="gamma shape of the arrivals; 1 (default) = Poisson")
    w.add_argument("--clips-per-duration", type=count, help="the uniform kind's clips per duration (its parameter)")
    w.add_argument("--out", type=OutputPath, nargs="+", required=True, help="one parquet per rate")
    w.set_defaults(func=cmd_workload)
    ws = sub.add_parser("workloads", help="list the registered workload kinds and the pools they draw from")
    ws.set_defaults(func=cmd_workloads)
