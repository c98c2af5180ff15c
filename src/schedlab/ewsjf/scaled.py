"""Paper B's engine scaled to a smaller one, so that the limits that bind keep their ratios:
prompt lengths times the ratio of the two KV caches (in tokens), so that the cache holds as many
of the workload's requests; the prefill budget times the same ratio, so that a step holds as
many prompts; the sequence cap as it is, and output lengths as they are, so that a request holds
its slot for as many steps."""

from __future__ import annotations

from dataclasses import dataclass

from schedlab.engine.arena import EngineConfig
from schedlab.errors import SchedlabError


@dataclass(frozen=True)
class ScaledEngine:
    """The smaller engine's limits and the prompt scale of the workload it serves."""

    prompt_scale: float
    max_num_seqs: int
    max_num_batched_tokens: int


def scaled_engine(paper: EngineConfig, kv_tokens: int) -> ScaledEngine:
    """``paper``'s engine scaled to one whose KV cache holds ``kv_tokens`` tokens."""
    factor = kv_tokens / (paper.kv_capacity_blocks * paper.block_size)
    if not 0.0 < factor <= 1.0:
        raise SchedlabError(f"an engine of {kv_tokens:,} KV tokens is not smaller than the paper's "
                            f"({paper.kv_capacity_blocks * paper.block_size:,})")
    budget = round(paper.max_num_batched_tokens * factor)
    if budget < paper.max_num_seqs:  # vLLM's own rule: a step can hold every running sequence's token
        raise SchedlabError(f"the scaled prefill budget ({budget} tokens) is below the sequence cap "
                            f"({paper.max_num_seqs}): give the engine a larger KV cache")
    return ScaledEngine(factor, paper.max_num_seqs, budget)
