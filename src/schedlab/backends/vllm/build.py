"""vLLM's real v1 scheduler built without a model or a device, for the ``vllm-sim`` backend.

The model configuration is the architecture's ``config.json`` alone (no tokenizer, no
weights). The KV cache is a block pool of the engine's capacity with tiny pages (the scheduler
only counts blocks); Whisper adds vLLM's cross-attention group, which shares the pool. With
``prefix_caching`` the pool is vLLM's prefix cache (``enable_prefix_caching``), and requests
carry their token ids and vLLM's own block hasher (:func:`block_hasher`), as its engine core
gives them. Whisper's
multimodal processor needs tokenizer files, so a minimal registry tells the scheduler what it
needs from it: each audio input is 1500 encoder tokens.
"""

from __future__ import annotations

import os
from dataclasses import replace

os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")

import torch  # noqa: E402
from vllm.config import CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig  # noqa: E402
from vllm.multimodal.inputs import MultiModalFeatureSpec, PlaceholderRange  # noqa: E402
from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.utils.hashing import get_hash_fn_by_name  # noqa: E402
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash  # noqa: E402
from vllm.v1.kv_cache_interface import (  # noqa: E402
    CrossAttentionSpec,
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    KVCacheTensor,
)
from vllm.v1.request import Request  # noqa: E402
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402

from schedlab.backends import placeholder_prompt  # noqa: E402
from schedlab.backends.vllm.scheduler import SchedlabScheduler  # noqa: E402
from schedlab.compat.vllm import AudioBudgetRegistry  # noqa: E402
from schedlab.latency.catalogue import model_arch, model_dir  # noqa: E402
from schedlab.engine.arena import EngineConfig  # noqa: E402
from schedlab.limits import check_allocation  # noqa: E402


#: Memory vLLM's block pool takes per KV block (its ``KVCacheBlock`` and the free list's links),
#: rounded up from 140 bytes measured with a million blocks.
VLLM_BYTES_PER_BLOCK = 160


def build_scheduler(
    model: str,
    engine: EngineConfig,
    *,
    policy: str = "fcfs",
    kappa: dict[str, float] | None = None,
    builder: str | None = None,
    prefix_caching: bool = False,
):
    """A scheduler with ``engine``'s limits and KV capacity, running schedlab's ``policy`` as
    its waiting queue or, given ``builder`` (a paper C scheduler), that builder's step plans
    (:mod:`schedlab.backends.vllm.plan`; the token budget is then the builder's own); with
    ``prefix_caching``, vLLM's prefix cache (requests then need :func:`block_hasher`). vLLM
    keeps one Python object per KV block: their memory is checked before any is made."""
    check_allocation(engine.kv_capacity_blocks * VLLM_BYTES_PER_BLOCK,
                     f"vLLM's scheduler with {engine.kv_capacity_blocks:,} KV blocks (--kv-capacity-blocks)")
    if builder is not None:
        from schedlab.backends.vllm.plan import SchedlabPlanScheduler

        scheduler_cls, options = SchedlabPlanScheduler, {"scheduler": builder}
        engine = replace(engine, max_num_batched_tokens=1 << 20)
    else:
        scheduler_cls, options = SchedlabScheduler, {"policy": policy, "kappa": kappa or {}}
    arch = model_arch(model)
    folder = str(model_dir(model))
    encdec = arch.encoder_frames > 0
    mc = ModelConfig(
        model=folder,
        tokenizer=folder,
        skip_tokenizer_init=True,
        dtype="float32",
        max_model_len=arch.max_target_positions,
        seed=0,
    )
    sc = SchedulerConfig(
        max_num_seqs=engine.max_num_seqs,
        max_num_batched_tokens=engine.max_num_batched_tokens,
        max_model_len=arch.max_target_positions,
        is_encoder_decoder=encdec,
        enable_chunked_prefill=True,
        policy="fcfs",
        async_scheduling=False,
    )
    vc = VllmConfig(
        model_config=mc,
        cache_config=CacheConfig(block_size=engine.block_size, enable_prefix_caching=prefix_caching),
        scheduler_config=sc,
        device_config=DeviceConfig(device="cpu"),
        additional_config={"schedlab": options},
    )
    blocks = engine.kv_capacity_blocks + 1  # block 0 is vLLM's null block
    vc.cache_config.num_gpu_blocks = blocks
    spec = dict(block_size=engine.block_size, num_kv_heads=1, head_size=1, dtype=torch.float32)
    groups = [KVCacheGroupSpec(["self_attn"], FullAttentionSpec(**spec))]
    if encdec:
        groups.append(KVCacheGroupSpec(["cross_attn"], CrossAttentionSpec(**spec)))
    page = groups[0].kv_cache_spec.page_size_bytes
    kv = KVCacheConfig(
        num_blocks=blocks,
        kv_cache_tensors=[
            KVCacheTensor(
                size=page * blocks,
                layers=[n for g in groups for n in g.layer_names],
                layer_stride=page * blocks,
                block_stride=page,
            )
        ],
        kv_cache_groups=groups,
    )
    extra = {"mm_registry": AudioBudgetRegistry(arch.encoder_frames)} if encdec else {}
    return scheduler_cls(
        vllm_config=vc,
        kv_cache_config=kv,
        structured_output_manager=StructuredOutputManager(vc),
        block_size=engine.block_size,
        log_stats=False,
        **extra,
    )


def block_hasher(scheduler):
    """vLLM's block hasher for ``scheduler``'s prefix cache (its engine core makes the same one)."""
    cache = scheduler.cache_config
    hash_fn = get_hash_fn_by_name(cache.prefix_caching_hash_algo)
    init_none_hash(hash_fn)
    return get_request_block_hasher(cache.block_size, hash_fn)


def make_request(
    request_id: str,
    prompt_tokens: int,
    output_tokens: int,
    arrival_s: float,
    *,
    encoder_frames: int = 0,
    extra_args: dict | None = None,
    token_ids: list[int] | None = None,
    hasher=None,
) -> Request:
    """A request of the given lengths (token ids are placeholders unless ``token_ids`` are
    given; the output is forced); ``hasher`` as :func:`block_hasher` gives it."""
    mm = None
    if encoder_frames:
        mm = [
            MultiModalFeatureSpec(
                data=None,
                modality="audio",
                identifier=f"audio-{request_id}",
                mm_position=PlaceholderRange(offset=0, length=encoder_frames),
            )
        ]
    params = SamplingParams(max_tokens=output_tokens, ignore_eos=True, extra_args=extra_args or {})
    return Request(
        request_id=request_id,
        prompt_token_ids=placeholder_prompt(prompt_tokens) if token_ids is None else list(token_ids),
        sampling_params=params,
        pooling_params=None,
        arrival_time=arrival_s,
        mm_features=mm,
        block_hasher=hasher,
    )
