"""transformers' continuous-batching configuration across its releases: the GPU machines this
project is lent hold transformers 5.17, the package pins 5.19."""

from __future__ import annotations

import dataclasses

#: 5.19's names of the fields 5.17 calls otherwise (5.17 pages KV in ``block_size`` tokens).
RENAMED = {"page_size": "block_size"}


def batching_config(**fields):
    """transformers' ``ContinuousBatchingConfig`` of ``fields`` (5.19's names): on a release
    that calls a field otherwise (:data:`RENAMED`) under its name there, and without the fields
    it does not have (5.17 has no ``auto_switch_to_flash``: it never switches attention)."""
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    known = {f.name for f in dataclasses.fields(ContinuousBatchingConfig)}
    kept = {}
    for name, value in fields.items():
        name = name if name in known else RENAMED.get(name, name)
        if name in known:
            kept[name] = value
    return ContinuousBatchingConfig(**kept)
