"""Who plays on which workloads: every registered scheduler (:mod:`schedlab.registry`) named in
the tournament's config, on the workloads of the modalities it registered for.

Every entrant plays on the one engine (:mod:`schedlab.engine`): waiting-queue policies inside
vLLM v1's continuous batching, batch builders as its siblings, with the same step-time model, KV
capacity and preemption. ASR workloads (an encoder-decoder model with 4-token prompts) admit
only the schedulers registered for them (paper A's, which order by audio duration); the others
order by prompt length, need an LLM latency predictor, or compose prefill chunks that a Whisper
request does not have.
"""

from __future__ import annotations

from schedlab import registry


def lineup(names, modality: str) -> list[registry.Entry]:
    """The named schedulers that have a meaning on a ``modality`` workload, in the given order."""
    return [e for e in map(registry.entry, names) if modality in e.modalities]
