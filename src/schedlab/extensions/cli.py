"""``schedlab extension ...``: paper A's future-work studies on its calibrated engine."""

from __future__ import annotations

from pathlib import Path

from schedlab.cli_types import InputPath, OutputFolder, OutputPath, engine_object, json_object
from schedlab.io import write_outputs

UTTERANCE_COLUMNS = ("duration_s", "output_tokens", "text_tokens")
#: The tables of the switching study, each ``<out-dir>/<name>.parquet``.
SWITCHING_TABLES = ("summary", "by_phase", "timeline", "switches", "regimes", "phases")


def _setup(args):
    """The utterances and the engine, after the engine spec and the study's ``--spec`` are checked."""
    from schedlab.validation import check_arena_spec, parse, read_arena, read_pool
    from schedlab.validation.documents import EXTENSION_SPECS

    check_arena_spec(args.engine, "--engine")
    parse(EXTENSION_SPECS[args.extension_command], args.spec, "--spec")
    return read_pool(args.utterances, UTTERANCE_COLUMNS), read_arena(args.engine, "asr", "--engine")


def cmd_kappa(args) -> None:
    from schedlab.extensions.language_kappa import estimate_quality, kappa_study
    from schedlab.workload.multilingual import fleurs_tables

    utterances, arena = _setup(args)
    spec = args.spec
    shares = spec.get("shares", {"en": 0.5, "hi": 0.5})
    tables = fleurs_tables([lang for lang in shares if lang != "en"])
    keys = {"ratios": spec.get("ratios", (1.0, 1.5, 2.0, 3.0)), "shares": shares, "tables": tables,
            "seed": int(spec.get("seed", 0))}
    runs = kappa_study(utterances, arena, rates=spec.get("rates", (8, 16, 20, 25)),
                       duration_s=float(spec.get("duration_s", 300.0)), **keys)
    quality = estimate_quality(utterances, **keys)
    write_outputs({args.out_runs: runs, args.out_quality: quality})


def cmd_vad(args) -> None:
    from schedlab.extensions.vad import vad_accuracy, vad_study
    from schedlab.workload.padded import vad_clips

    utterances, arena = _setup(args)
    spec = args.spec
    pads = {"seed": int(spec.get("seed", 0)), "pad_fraction": float(spec.get("pad_fraction", 0.5)),
            "max_pad_s": float(spec.get("max_pad_s", 10.0))}
    runs = vad_study(utterances, arena, rates=spec.get("rates", (8, 14, 18, 22)),
                     duration_s=float(spec.get("duration_s", 300.0)), **pads)
    write_outputs({args.out_runs: runs, args.out_accuracy: vad_accuracy(vad_clips(utterances, **pads))})


def cmd_switching(args) -> None:
    from schedlab.extensions.switching import switching_study
    from schedlab.workload.drift import DEFAULT_PHASES

    utterances, arena = _setup(args)
    study = switching_study(utterances, arena,
                            phases=args.spec.get("phases", DEFAULT_PHASES), seed=int(args.spec.get("seed", 0)))
    out = Path(args.out_dir)
    write_outputs({out / f"{name}.parquet": getattr(study, name) for name in SWITCHING_TABLES})


def add_commands(sub) -> None:
    e = sub.add_parser("extension", help="paper A's future work: VAD sizes, per-language kappa, policy switching")
    esub = e.add_subparsers(dest="extension_command", required=True)

    def common(p):
        p.add_argument("--utterances", type=InputPath, required=True, help="LibriSpeech table (schedlab data)")
        p.add_argument("--engine", type=engine_object, required=True,
                       help="engine spec as JSON: steptime, hardware, model, engine limits, kappa (files)")
        p.add_argument("--spec", type=json_object, default={}, help="the study's parameters as JSON (config.yaml extensions.*)")

    k = esub.add_parser("kappa", help="per-language vs one global kappa on a multilingual mix")
    common(k)
    k.add_argument("--out-runs", type=OutputPath, required=True)
    k.add_argument("--out-quality", type=OutputPath, required=True)
    k.set_defaults(func=cmd_kappa)

    v = esub.add_parser("vad", help="raw duration vs speech-active time (WebRTC VAD) as job size, on padded clips")
    common(v)
    v.add_argument("--out-runs", type=OutputPath, required=True)
    v.add_argument("--out-accuracy", type=OutputPath, required=True)
    v.set_defaults(func=cmd_vad)

    s = esub.add_parser("switching", help="adaptive FCFS/SJF/HRRN switching vs fixed policies on a drifting workload")
    common(s)
    s.add_argument("--out-dir", type=OutputFolder, required=True)
    s.set_defaults(func=cmd_switching,
                   planned_outputs=lambda a: [Path(a.out_dir) / f"{name}.parquet" for name in SWITCHING_TABLES])
