"""The places where schedlab reaches into vLLM's internals (see :data:`schedlab.compat.WORKAROUNDS`).
vLLM is imported inside the functions: the HTTP client never loads it."""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Callable, Iterator


def _breaks_kernel_scan(value) -> bool:
    """Whether vLLM's scan (``vars(value).get("kernel")`` on anything with a ``__dict__``) fails."""
    try:
        return hasattr(value, "__dict__") and not hasattr(vars(value), "get")
    except TypeError:
        return False


@contextmanager
def modules_hidden_from_kernel_scan() -> Iterator[None]:
    """vLLM's CPU worker rebinds Triton kernels at start-up by scanning every module's
    namespace and reading ``vars(value)`` of each attribute. llvmlite's ctypes wrapper (loaded
    with numba, which paper D's search kernels use) answers any attribute name, ``__dict__``
    included, and breaks that scan; such modules are left out of ``sys.modules`` meanwhile."""
    hidden = {}
    for name, module in list(sys.modules.items()):
        namespace = getattr(module, "__dict__", None) or {}
        if any(_breaks_kernel_scan(v) for v in list(namespace.values())):
            hidden[name] = sys.modules.pop(name)
    try:
        yield
    finally:
        sys.modules.update(hidden)


class AudioBudgetRegistry:
    """Stands in for vLLM's multimodal registry where only encoder sizes matter: a scheduler
    built without a model (``vllm-sim``) asks Whisper's processor how many encoder tokens an
    audio input takes."""

    def __init__(self, encoder_tokens: int) -> None:
        self.encoder_tokens = encoder_tokens

    def create_processor(self, model_config, *args, **kwargs):
        info = SimpleNamespace(
            supported_mm_limits={"audio": 1},
            allowed_mm_limits={"audio": 1},
            ctx=SimpleNamespace(model_config=model_config),
            get_mm_max_tokens_per_item=lambda seq_len, mm_counts: {"audio": self.encoder_tokens},
        )
        return SimpleNamespace(info=info)


@contextmanager
def step_as_planned(scheduler, tokens: int, held) -> Iterator[None]:
    """vLLM's own ``schedule()`` run inside this block with its token budget set to the plan's
    ``tokens`` and the running requests in ``held`` (left out of the plan) made ineligible to
    decode this step, through vLLM's ``next_decode_eligible_step`` (its asynchronous
    scheduler's cadence field, which ``schedule()`` counts from this step); both restored after."""
    budget = scheduler.max_num_scheduled_tokens
    scheduler.max_num_scheduled_tokens = tokens
    for r in held:
        r.next_decode_eligible_step = scheduler.current_step + 2
    try:
        yield
    finally:
        for r in held:
            r.next_decode_eligible_step = 0
        scheduler.max_num_scheduled_tokens = budget


def preempt(scheduler, request) -> None:
    """Preempt ``request`` (already taken out of ``scheduler.running``) through vLLM's own
    routine: its blocks freed, its computed tokens reset, back to the waiting queue."""
    scheduler._preempt_request(request, time.monotonic())


def job_of(request):
    """The job kept on vLLM's ``request`` by :func:`keep_job`; None before."""
    return getattr(request, "schedlab_job", None)


def keep_job(request, job):
    """Keep ``job`` on vLLM's own ``request`` object (vLLM's ``Request`` has no ``__slots__``)."""
    request.schedlab_job = job
    return job


def kept(request, name: str, make: Callable[[object], object] | None = None):
    """What is kept on vLLM's own ``request`` as ``name``: ``make(request)``, made the first
    time it is asked for (without ``make``: None until then)."""
    attribute = f"schedlab_{name}"
    found = getattr(request, attribute, None)
    if found is None and make is not None:
        found = make(request)
        setattr(request, attribute, found)
    return found


def check_before_engine_config(check: Callable[[object, object], None]) -> bool:
    """Make vLLM call ``check(scheduler_cls, additional_config)`` each time it builds an
    engine's configuration from its arguments, before it does (once per process); False when
    this vLLM builds it some other way."""
    from vllm.engine.arg_utils import EngineArgs

    original = getattr(EngineArgs, "create_engine_config", None)
    if original is None:
        return False
    if getattr(original, "schedlab_checked", False):
        return True

    def create_engine_config(self, *args, **kwargs):
        check(self.scheduler_cls, self.additional_config)
        return original(self, *args, **kwargs)

    create_engine_config.schedlab_checked = True
    EngineArgs.create_engine_config = create_engine_config
    return True


def vocabulary_checked_without_a_tokenizer(applies: Callable[[object], bool]) -> bool:
    """Make vLLM's renderer refuse, as it does with a tokenizer, a prompt token id outside the
    model's vocabulary also on a server without one (``--skip-tokenizer-init``), where vLLM
    skips the check and the id reaches the embedding, ending the engine core; for the engine
    configurations ``applies`` accepts (once per process). The request is then answered 400.
    False when this vLLM has no such check."""
    try:
        from vllm.exceptions import VLLMValidationError
        from vllm.renderers.base import BaseRenderer
    except ImportError:
        return False
    original = getattr(BaseRenderer, "validate_token_ids", None)
    if original is None:
        return False
    if getattr(original, "schedlab_checked", False):
        return True

    def validate_token_ids(self, token_ids, *, parameter=None):
        if token_ids and getattr(self, "tokenizer", None) is None and applies(self.config):
            vocab = self.model_config.get_vocab_size()
            for bad in (min(token_ids), max(token_ids)):
                if not 0 <= bad < vocab:
                    raise VLLMValidationError(f"Token id {bad} is out of vocabulary (the model has {vocab} token ids)",
                                              parameter=parameter)
        return original(self, token_ids, parameter=parameter)

    validate_token_ids.schedlab_checked = True
    validate_token_ids.__wrapped__ = original  # vLLM's own (the canary's)
    BaseRenderer.validate_token_ids = validate_token_ids
    return True
