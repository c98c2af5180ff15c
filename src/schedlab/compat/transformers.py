"""transformers' continuous batching across its releases: the GPU machines this project is lent
hold transformers 5.17, the package pins 5.19. 5.17 calls a KV page ``block_size`` and has no
``auto_switch_to_flash``; its paged cache takes the model's tensor-parallel plan and counts
free blocks in a block manager, where 5.19's counts sectors; its batch processor gives each step
a cache-read budget of ``num_pages`` tokens, 5.19's ``max_tokens_read``."""

from __future__ import annotations

import dataclasses
import inspect

from schedlab.errors import SchedlabError

#: 5.19's names of the fields 5.17 calls otherwise (5.17 pages KV in ``block_size`` tokens).
RENAMED = {"page_size": "block_size"}
#: 5.19's fields a release may lack, left out where it does (5.17 never switches attention).
OPTIONAL = frozenset({"auto_switch_to_flash"})


def batching_config(**fields):
    """transformers' ``ContinuousBatchingConfig`` of ``fields`` (5.19's names): on a release
    that calls a field otherwise (:data:`RENAMED`) under its name there, and without the
    :data:`OPTIONAL` fields it does not have. Any other field it lacks is refused: left out, it
    would leave the engine at that release's default."""
    import transformers
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    known = {f.name for f in dataclasses.fields(ContinuousBatchingConfig)}
    kept = {}
    for name, value in fields.items():
        there = name if name in known else RENAMED.get(name, name)
        if there in known:
            kept[there] = value
        elif name not in OPTIONAL:
            raise SchedlabError(f"transformers {transformers.__version__}'s ContinuousBatchingConfig has no field "
                                f"{name!r}")
    return ContinuousBatchingConfig(**kept)


def paged_cache(config, batching, helper, dtype):
    """transformers' ``PagedAttentionCache`` of the model ``config`` on the CPU (5.17 also takes
    the model's tensor-parallel plan: none here)."""
    from transformers.generation.continuous_batching.cache import PagedAttentionCache

    tp_plan = {"tp_plan": {}} if "tp_plan" in inspect.signature(PagedAttentionCache).parameters else {}
    return PagedAttentionCache(config, batching, "cpu", helper, dtype=dtype, **tp_plan)


def blocks_per_sector(cache) -> set[int]:
    """How many blocks each of the cache's sectors holds, per allocator (5.17 has no sectors: a
    block is its unit)."""
    allocators = getattr(cache, "cache_allocators", None)
    return {a.blocks_per_sector for a in allocators.values()} if allocators is not None else {1}


def free_blocks(cache) -> int:
    """The cache's free blocks: on 5.19 its free sectors, and the blocks freed back to their
    allocator since the scheduler last returned whole sectors (one block a sector); on 5.17 its
    block manager's count."""
    if hasattr(cache, "pool"):
        pool = cache.pool
        return pool.num_free_sectors + sum(pool.count_free_blocks(a.index) for a in cache.cache_allocators.values())
    return cache.get_num_free_blocks()


def read_budget(cache) -> int:
    """The cache-read budget, in tokens, that the batch processor gives each step's scheduling."""
    return cache.max_tokens_read if hasattr(cache, "max_tokens_read") else cache.num_pages
