"""``schedlab slosa ...``: paper D's length pools, predictor profiles and fits, and studies."""

from __future__ import annotations

from schedlab import registry
from schedlab.cli_types import InputPath, OutputPath, number, positive_number, registered, seed
from schedlab.errors import SchedlabError
from schedlab.io import read_parquet, write_outputs, write_parquet

STUDIES = ("compare", "schedule", "lengths", "coefficients", "instances")
POOL_COLUMNS = ("prompt_tokens", "output_tokens")
#: The most requests one mapping decision takes (the paper's take up to 40): the search's time
#: grows with them, and a decision over a million requests is one no scheduler waits hours for.
MAX_DECISION = 10**4
#: The largest batch the studies other than compare map requests into.
STUDY_BATCH = 4


def cmd_pools(args) -> None:
    from schedlab.data.conversations import chat_lengths, code_lengths

    write_outputs({args.chat: chat_lengths(), args.code: code_lengths()})


def cmd_profile(args) -> None:
    from schedlab.fit.latency_predictor import REFERENCE, calibrate_roofline
    from schedlab.latency import predictor_profile
    from schedlab.latency.catalogue import hardware, model_arch

    if args.calibrate and args.source != "roofline":
        raise SchedlabError(f"--calibrate fits the roofline's efficiencies: the {args.source} source has none")
    if args.source == "roofline":
        hw, arch = hardware(args.hardware), model_arch(args.model)
        eff = calibrate_roofline(REFERENCE, hw, arch) if args.calibrate else {}
        table = predictor_profile.roofline_profile(hw, arch, **eff)
    elif args.source == "measured":
        from schedlab.fit import measured

        table = measured.predictor_profile(hardware(args.hardware), model_arch(args.model))
    elif args.source == "torch":
        table = predictor_profile.torch_profile(args.model, repeats=args.repeats, device=args.device)
    elif args.source == "vllm":
        from schedlab.backends.vllm import profile as vllm_profile

        table = vllm_profile.predictor_profile(args.model, args.device, args.kv_cache_gib, repeats=args.repeats)
    else:  # another registered source: its table's prefill-only and decode-only steps
        from schedlab.fit.sources import source_table

        table = predictor_profile.from_step_profile(source_table(
            args.source, hardware=args.hardware, model=args.model, device=args.device, repeats=args.repeats))
    write_parquet(table, args.out)


def cmd_fit(args) -> None:
    from schedlab.fit.latency_predictor import REFERENCE, fit_predictor
    from schedlab.latency.predictor_profile import PREDICTOR_PROFILE_COLUMNS

    if (args.profile is None) == (not args.reference):
        raise SchedlabError("give either --profile or --reference")
    predictor = REFERENCE if args.reference else fit_predictor(
        read_parquet(args.profile, PREDICTOR_PROFILE_COLUMNS, numeric=("batch", "length", "time_s"), rows=True))
    predictor.save(args.out)


def cmd_study(args) -> None:
    from schedlab.validation import read_pool
    from schedlab.fit.latency_predictor import LatencyPredictor
    from schedlab.latency.catalogue import hardware, model_arch
    from schedlab.slosa import studies
    from schedlab.slosa.dispatch import paper_engine
    from schedlab.slosa.instances import InstanceMemory
    from schedlab.slosa.search import AnnealConfig, warm_up

    predictor = LatencyPredictor.load(args.predictor)
    workload = studies.Workload(read_pool(args.chat, POOL_COLUMNS), read_pool(args.code, POOL_COLUMNS))
    for pool in (workload.chat, workload.code):
        predictor.check_positive(pool["prompt_tokens"], pool["output_tokens"], max(*args.max_batches, STUDY_BATCH),
                                 args.predictor)
    hw, arch = hardware(args.hardware), model_arch(args.model)
    arena = paper_engine(hw, arch)
    warm_up()
    if args.study == "compare":
        table = studies.compare(workload, predictor, args.ns, args.max_batches, args.seeds,
                                exhaustive_max_n=args.exhaustive_max_n, anneal_config=AnnealConfig(), engine=arena)
    elif args.study == "schedule":
        table = studies.anneal_schedule(workload, predictor, (50, 100, 200, 500, 1000), (10, 25, 50, 100, 200), args.seeds)
    elif args.study == "lengths":
        table = studies.length_error(workload, predictor, (0.025, 0.05, 0.10), args.seeds)
    elif args.study == "coefficients":
        table = studies.coefficient_error(workload, predictor, (0.025, 0.05, 0.10, 0.20, 0.30), args.seeds)
    else:
        capacity = arena.limits.kv_capacity_blocks * arena.limits.block_size * arch.kv_bytes_per_token
        memory = InstanceMemory(free_bytes=capacity, bytes_per_token=arch.kv_bytes_per_token)
        table = studies.multi_instance(workload, predictor, (1, 2, 3, 4), args.seeds, memory)
    write_parquet(table.assign(predictor=predictor.meta.get("source", "")), args.out)


def add_commands(sub) -> None:
    s = sub.add_parser("slosa", help="paper D: SLO-aware priority mapping by simulated annealing")
    ssub = s.add_subparsers(dest="slosa_command", required=True)

    p = ssub.add_parser("pools", help="chat and code request lengths (ShareGPT; Python-Code-23k or its stand-in)")
    p.add_argument("--chat", type=OutputPath, required=True, help="parquet out: prompt_tokens, output_tokens, source")
    p.add_argument("--code", type=OutputPath, required=True, help="parquet out, same columns")
    p.set_defaults(func=cmd_pools)

    pr = ssub.add_parser("profile", help="prefill/decode times over a (batch, length) grid")
    pr.add_argument("--source", choices=registered(registry.source_names), required=True, metavar="SOURCE",
                    help="measured: the hardware's peaks at the fractions measured on the shipped GPUs; another "
                         "registered source (`schedlab sources`): its table's prefill-only and decode-only steps")
    pr.add_argument("--hardware", default="2xV100-32GB",
                    help="roofline, measured: catalogue name, <n>x<name> for tensor parallel")
    pr.add_argument("--model", default="qwen2.5-7b")
    pr.add_argument("--calibrate", action="store_true",
                    help="roofline: efficiencies that match the paper's single-request times")
    pr.add_argument("--repeats", type=positive_number(int, 10**4), default=3, help="torch, vllm: timed repeats per point")
    pr.add_argument("--device", default="cpu", help="torch, vllm: cpu or cuda:0")
    pr.add_argument("--kv-cache-gib", type=positive_number(int, 2**20), default=1, help="vllm: KV cache size")
    pr.add_argument("--out", type=OutputPath, required=True)
    pr.set_defaults(func=cmd_profile)

    f = ssub.add_parser("fit", help="OLS of the prefill and decode models (b*l interaction), or the paper's values")
    f.add_argument("--profile", type=InputPath, help="predictor profile parquet")
    f.add_argument("--reference", action="store_true", help="the paper's published coefficients instead")
    f.add_argument("--out", type=OutputPath, required=True, help="predictor JSON")
    f.set_defaults(func=cmd_fit)

    st = ssub.add_parser("study", help="one of paper D's experiments, as a parquet table")
    st.add_argument("study", choices=STUDIES)
    st.add_argument("--predictor", type=InputPath, required=True)
    st.add_argument("--chat", type=InputPath, required=True)
    st.add_argument("--code", type=InputPath, required=True)
    st.add_argument("--hardware", default="2xV100-32GB")
    st.add_argument("--model", default="qwen2.5-7b")
    st.add_argument("--seeds", type=seed, nargs="+", default=[0, 1, 2, 3, 4])
    st.add_argument("--ns", type=positive_number(int, MAX_DECISION), nargs="+", default=[4, 6, 8, 10, 20, 40],
                    help=f"compare: requests per decision (at most {MAX_DECISION:,}: a search a decision can wait for)")
    st.add_argument("--max-batches", type=positive_number(int, MAX_DECISION), nargs="+", default=[1, 2, 4],
                    help="compare: maximum batch sizes")
    st.add_argument("--exhaustive-max-n", type=number(int, minimum=0, strict=False, maximum=10), default=8,
                    help="compare: largest N searched exhaustively (at most 10)")
    st.add_argument("--out", type=OutputPath, required=True)
    st.set_defaults(func=cmd_study)
