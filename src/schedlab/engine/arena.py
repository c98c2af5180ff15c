"""The arena a run plays in: one calibrated engine, built once from config.

An :class:`Arena` holds the step-time model, the engine limits (batch, token and encoder
budgets, KV block size and capacity) and the job-size estimator. Every paper's studies, the
tournament and the CLI build their engine here.

**Job sizes** (what size-aware policies order by) have one convention: a request's size is its
expected output length in tokens, ``n_hat = max(1, floor(duration * kappa[language]))`` for a
request with audio (paper A; ``duration`` is the clip's raw length or its speech-active time),
its ``priority`` when the trace sets one (paper D's batch index; lower first), and otherwise
its ``max_tokens``, the forced output length (papers B and C, and paper A without a fitted
kappa). See :func:`schedlab.estimate.job_sizes`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from schedlab.engine.steptime import StepTimeModel
from schedlab.errors import SchedlabError
from schedlab.estimate import DURATION_SOURCES, job_sizes
from schedlab.latency.catalogue import hardware, kv_capacity_blocks, model_arch


#: The largest value of a count limit (sequences, tokens per step, block size), as vLLM's int32.
MAX_LIMIT = 2**31 - 1
#: The largest KV capacity in blocks.
MAX_KV_BLOCKS = 2**40


@dataclass(frozen=True)
class EngineConfig:
    """Engine limits, the one type every backend takes them in: sequences and tokens per step,
    the KV block size and capacity. ``encoder_frames`` > 0 marks an encoder–decoder model
    (Whisper: 1500): each admission runs the encoder and holds that many cross-attention KV
    slots. Each limit is checked as it is made; :meth:`check_model` adds the rules vLLM's own
    configuration enforces for a model.
    ``prefix_caching`` turns on vLLM's automatic prefix cache for traces that say which
    prompts share tokens (:mod:`schedlab.engine.prefix`; a trace without sharing data runs
    without a cache either way)."""

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    block_size: int = 16
    kv_capacity_blocks: int = MAX_KV_BLOCKS
    encoder_frames: int = 0
    max_encoder_per_step: int | None = None
    prefix_caching: bool = False

    def __post_init__(self) -> None:
        bounds = {"max_num_seqs": MAX_LIMIT, "max_num_batched_tokens": MAX_LIMIT, "block_size": MAX_LIMIT,
                  "kv_capacity_blocks": MAX_KV_BLOCKS}
        for name, top in bounds.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not float(value).is_integer() or not 1 <= value <= top:
                raise SchedlabError(f"engine limits: {name} must be a whole number in 1..{top}, got {value}")
        if self.encoder_frames < 0:
            raise SchedlabError(f"engine limits: encoder_frames must be >= 0, got {self.encoder_frames}")

    def check_model(self, model: str, source: str = "engine limits") -> "EngineConfig":
        """These limits for ``model`` by the rules vLLM's own configuration enforces, in its
        words (so ``sim`` refuses what ``vllm-sim`` and a real engine refuse): a step's tokens
        hold at least ``max_num_seqs`` sequences; an encoder-decoder model (Whisper), which vLLM
        runs without chunked prefill, gets at least its context and one whole encoder input per
        step. Returns ``self``."""
        arch = model_arch(model)
        tokens, context = self.max_num_batched_tokens, arch.max_target_positions
        # vllm.config.scheduler.SchedulerConfig.verify_max_model_len
        if arch.encoder_frames > 0 and tokens < context:
            raise SchedlabError(
                f"{source}: max_num_batched_tokens ({tokens}) is smaller than max_model_len ({context}). This "
                "effectively limits the maximum sequence length to max_num_batched_tokens and makes vLLM reject longer "
                "sequences. Please increase max_num_batched_tokens or decrease max_model_len.")
        if tokens < self.max_num_seqs:
            raise SchedlabError(f"{source}: max_num_batched_tokens ({tokens}) must be greater than or equal to "
                                f"max_num_seqs ({self.max_num_seqs}).")
        # vllm.v1.core.encoder_cache_manager.compute_mm_encoder_budget
        if arch.encoder_frames > tokens:
            raise SchedlabError(
                f"{source}: Chunked MM input disabled but max_tokens_per_mm_item ({arch.encoder_frames}) is larger than "
                f"max_num_batched_tokens ({tokens}). Please increase max_num_batched_tokens.")
        return self

    @property
    def encoder_per_step(self) -> int:
        """Encoder inputs one step may run (vLLM's encoder compute budget)."""
        if self.max_encoder_per_step is not None:
            return self.max_encoder_per_step
        if self.encoder_frames == 0:
            return 1 << 30
        return max(1, self.max_num_batched_tokens // self.encoder_frames)

    @property
    def encoder_blocks(self) -> int:
        """KV blocks of a request's cross-attention (0 for decoder-only models)."""
        return -(-self.encoder_frames // self.block_size)


def engine_config(
    hardware_name: str,
    model_name: str,
    *,
    max_num_seqs: int = 256,
    max_num_batched_tokens: int = 8192,
    block_size: int = 16,
    gpu_memory_utilization: float = 0.95,
    kv_blocks: int | None = None,
    prefix_caching: bool = False,
) -> EngineConfig:
    """Limits of a (hardware, model) pair: KV capacity from the hardware's memory (the share
    ``gpu_memory_utilization``, in (0, 1]) and the model's weights and KV size, unless
    ``kv_blocks`` gives a measured engine's capacity (then ``hardware_name`` is only a label);
    checked as :class:`EngineConfig` checks them, for ``model_name``. ``prefix_caching`` as on :class:`EngineConfig`."""
    arch = model_arch(model_name)
    if not 0 < gpu_memory_utilization <= 1:  # NaN fails too
        raise SchedlabError(f"engine limits: gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
    # The limits first (a nonsensical block size must not reach the capacity's arithmetic).
    EngineConfig(max_num_seqs, max_num_batched_tokens, block_size, kv_blocks or 1).check_model(model_name)
    if kv_blocks is None:
        kv_blocks = kv_capacity_blocks(hardware(hardware_name), arch, gpu_memory_utilization, block_size)
    return EngineConfig(
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        block_size=block_size,
        kv_capacity_blocks=kv_blocks,
        encoder_frames=arch.encoder_frames,
        prefix_caching=bool(prefix_caching),
    )


#: Engine limits an engine spec may set (:func:`schedlab.validation.read_arena`).
SPEC_LIMITS = ("max_num_seqs", "max_num_batched_tokens", "block_size", "gpu_memory_utilization")


@dataclass(frozen=True)
class Arena:
    """A calibrated engine: step-time model, limits and job-size estimator (``kappa`` per
    language and the ``duration`` source, see the module docstring); ``max_tokens`` is the
    model's context when requests longer than it must be rejected (``None``: unchecked)."""

    step_time: StepTimeModel
    limits: EngineConfig
    kappa: dict[str, float] = field(default_factory=dict)
    duration: str = "raw"
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.duration not in DURATION_SOURCES:
            raise SchedlabError(f"unknown duration source {self.duration!r}; choose raw or vad")

    @classmethod
    def build(cls, step_time: StepTimeModel, hardware_name: str, model_name: str, *, kappa=None,
              duration: str = "raw", **limits) -> "Arena":
        """The arena of ``model_name`` on ``hardware_name`` (limits as :func:`engine_config`)."""
        return cls(step_time, engine_config(hardware_name, model_name, **limits), dict(kappa or {}), duration)

    def with_limits(self, **changes) -> "Arena":
        return replace(self, limits=replace(self.limits, **changes))

    def job_sizes(self, trace: pd.DataFrame) -> np.ndarray:
        return job_sizes(trace, self.kappa, self.duration)
