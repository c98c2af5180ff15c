"""Options that several command groups share, and what they are read into: the simulated
engine's limits (fit calibrate, simulate, cluster), a run's trace, policy and outputs
(simulate, vllm-run, transformers-run), a fit's tile width, the kappa file and the trace."""

from __future__ import annotations

import argparse

from schedlab import validation
from schedlab.cli_types import InputPath, OutputPath, number, positive_number, rate_type, seed

# The engine and the model catalogue (numba, YAML) are imported inside the functions that read
# them: every command, `--help` too, imports this module (start-up time).

positive = positive_number(float)
positive_int = positive_number(int)


def engine_args(p: argparse.ArgumentParser) -> None:
    """The simulated engine's limits, as the option group "engine"."""
    g = p.add_argument_group("engine")
    g.add_argument("--hardware", required=True, help="catalogue name, e.g. A100-40GB, or a label with --kv-capacity-blocks")
    g.add_argument("--model", required=True, help="model architecture, e.g. whisper-large-v3")
    g.add_argument("--max-num-seqs", type=positive_int, default=256)
    g.add_argument("--max-num-batched-tokens", type=positive_int, default=8192)
    g.add_argument("--block-size", type=positive_int, default=16)
    g.add_argument("--gpu-memory-utilization", type=positive, default=0.95)
    g.add_argument("--kv-capacity-blocks", type=positive_number(int, 2**40),
                   help="KV blocks of a measured engine, instead of deriving them from --hardware")
    g.add_argument("--prefix-caching", action=argparse.BooleanOptionalAction, default=False,
                   help="vLLM's prefix cache, for traces with sharing data (hash_ids, token_ids or prefix_id)")


def tile_arg(p: argparse.ArgumentParser) -> None:
    """The width of the GEMM tiles a step-time fit steps with (0: none)."""
    p.add_argument("--tile", type=number(int, minimum=0, strict=False, maximum=2**20), default=0,
                   help="GEMM tile width: fit the tile staircase (0: none)")


def run_args(p: argparse.ArgumentParser, *, sweep: bool = False) -> None:
    """A run's trace, policy, identity and outputs (vllm-run, transformers-run); with ``sweep``
    (simulate), one value per run for the trace, rate and outputs."""
    many = {"nargs": "+"} if sweep else {}
    p.add_argument("--trace", type=InputPath, required=True, **many)
    p.add_argument("--scheduler", "--policy", dest="policy", required=True,
                   help="a registered scheduler (`schedlab schedulers`): a queue policy, or with simulate a batch builder too")
    p.add_argument("--kappa", type=InputPath, help="kappa JSON; without it every job's size is its max_tokens (output length)")
    p.add_argument("--workload", default="custom", help="name recorded in the summary")
    p.add_argument("--rate", type=rate_type(inf=True), default=None if sweep else float("nan"),
                   help="recorded in the summary (inf: a burst)", **many)
    p.add_argument("--seed", type=seed, default=0, help="recorded in the summary")
    p.add_argument("--out-results", type=OutputPath, required=True, **many)
    p.add_argument("--out-summary", type=OutputPath, required=True, **many)


def engine(args):
    """The engine limits of :func:`engine_args`' options."""
    from schedlab.engine import engine_config

    return engine_config(
        args.hardware,
        args.model,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        block_size=args.block_size,
        gpu_memory_utilization=args.gpu_memory_utilization,
        kv_blocks=args.kv_capacity_blocks,
        prefix_caching=args.prefix_caching,
    )


def kappa(path: str | None) -> dict[str, float]:
    """A kappa file's fitted languages; none without a file (sizes are then max_tokens)."""
    return validation.read_kappa(path) if path else {}


def trace(args, path: str | None = None):
    """The run's trace (``path``, default ``--trace``), checked, every request within
    ``--model``'s context."""
    from schedlab.latency.catalogue import model_arch

    return validation.read_trace(path or args.trace, context=model_arch(args.model).max_target_positions)
