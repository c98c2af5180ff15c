"""The canaries of :data:`schedlab.compat.WORKAROUNDS`: each test checks that the upstream
behaviour a workaround exists for is still there (and, where it can, that the workaround still
answers it), so that a Snakemake, vLLM or CPython release that changes it fails here first."""

from __future__ import annotations

import gc
import importlib
import importlib.metadata
import importlib.util
import inspect
import threading
import time
from pathlib import Path

import pytest

from schedlab.compat import WORKAROUNDS

ROOT = Path(__file__).resolve().parents[1]


def test_every_workaround_names_a_canary_that_exists_and_is_on_the_compatibility_page():
    tests = {name for name, value in globals().items() if name.startswith("test_") and callable(value)}
    assert "<!-- generated: workarounds -->" in (ROOT / "docs" / "compatibility.md").read_text()
    for w in WORKAROUNDS:
        path, _, name = w.canary.partition("::")
        assert (ROOT / path.split(" ")[0]).exists(), w.name
        if path == "tests/test_compat.py":
            assert name in tests, w.name
        module, _, attr = w.shim.rpartition(".")
        if module.startswith("schedlab."):
            assert hasattr(importlib.import_module(module), attr), w.shim


# -- Snakemake --------------------------------------------------------------------------------
def test_snakemake_still_starts_a_timer_per_reevaluation():
    """Snakemake's scheduler starts one more wake-up timer each time it reevaluates, however
    many are pending (snakemake issue 3744): the reason for ``one_pending_wakeup``. Snakemake's
    own method is checked even where this process has patched it (the patch keeps it)."""
    from snakemake.scheduling.job_scheduler import JobScheduler

    original = inspect.unwrap(JobScheduler._schedule_reevalutation)
    scheduler = JobScheduler.__new__(JobScheduler)
    scheduler._open_jobs = threading.Semaphore(0)
    before = threading.active_count()
    for _ in range(3):
        original(scheduler, 0.3)
    assert threading.active_count() - before == 3
    time.sleep(0.6)
    assert all(scheduler._open_jobs.acquire(blocking=False) for _ in range(3))


def test_snakemake_still_refuses_a_held_lock_with_advice_to_unlock():
    """Snakemake's lock raises a LockException, whose advice is ``--unlock``, when its ``locked``
    says another run holds the files: the reason for ``one_line_when_held``. Snakemake's own
    method is checked even where this process has patched it (the patch keeps it)."""
    from snakemake.exceptions import LockException
    from snakemake.persistence import PersistenceBase

    original = inspect.unwrap(PersistenceBase.lock)
    assert "LockException" in inspect.getsource(original) and "locked" in inspect.getsource(original)
    assert isinstance(PersistenceBase.__dict__["locked"], property)
    assert "--unlock" in str(LockException())


# -- CPython ----------------------------------------------------------------------------------
def test_cpython_still_ends_by_sigint_after_an_interrupt_left_a_pyrun_call(tmp_path):
    """A KeyboardInterrupt that leaves a PyRun_* call, caught afterwards, still ends a module run
    with ``python -m`` by SIGINT as it exits, whatever its exit status: the reason for
    ``forget_unhandled_interrupt``, which clears that."""
    import os
    import signal
    import subprocess
    import sys

    (tmp_path / "interrupted_once.py").write_text(
        "import ctypes, sys\n"
        "ctypes.pythonapi.PyRun_SimpleString(b'raise KeyboardInterrupt')  # over: PyRun_SimpleString returns -1\n"
        "if len(sys.argv) > 1:\n"
        "    from schedlab.compat.cpython import forget_unhandled_interrupt\n"
        "    forget_unhandled_interrupt()\n"
        "sys.exit(3)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    plain = subprocess.run([sys.executable, "-m", "interrupted_once"], capture_output=True, timeout=60, env=env)
    assert plain.returncode == -signal.SIGINT
    forgotten = subprocess.run([sys.executable, "-m", "interrupted_once", "forget"], capture_output=True, timeout=60,
                               env=env)
    assert forgotten.returncode == 3


# -- vLLM -------------------------------------------------------------------------------------
needs_vllm = pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")


@needs_vllm
def test_vllm_still_scans_every_module_for_kernels():
    """vLLM's kernel rebinding reads ``vars(value).get`` of every module attribute, which
    llvmlite's library wrapper (loaded with numba) breaks; with those modules hidden it runs."""
    import llvmlite.binding.ffi  # noqa: F401
    from vllm.triton_utils.dispatcher import _rebind_kernels

    from schedlab.compat.vllm import modules_hidden_from_kernel_scan

    override = [(object(), object())]  # matches nothing: the scan runs, nothing is rebound
    with pytest.raises(AttributeError):
        _rebind_kernels(override)
    with modules_hidden_from_kernel_scan():
        _rebind_kernels(override)


def _scheduler(**limits):
    from schedlab.backends.vllm.build import build_scheduler
    from schedlab.engine import EngineConfig

    engine = EngineConfig(**{"max_num_seqs": 4, "max_num_batched_tokens": 256, "block_size": 16,
                             "kv_capacity_blocks": 64, **limits})
    return build_scheduler("tiny-llama", engine, policy="fcfs", kappa={"en": 1.0})


def _step(sched):
    from vllm.v1.outputs import ModelRunnerOutput

    out = sched.schedule()
    ids = list(out.num_scheduled_tokens)
    sampled = [[] if sched.requests[r].is_prefill_chunk else [100] for r in ids]
    sched.update_from_output(out, ModelRunnerOutput(req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
                                                    sampled_token_ids=sampled))
    return out


@needs_vllm
def test_vllms_scheduler_still_takes_a_multimodal_registry():
    """vLLM's scheduler asks its multimodal registry (an argument) for the encoder tokens of one
    audio input, Whisper's 1,500, and refuses a step budget smaller than that."""
    from vllm.v1.core.sched.scheduler import Scheduler

    from schedlab.backends.vllm.build import build_scheduler
    from schedlab.engine import EngineConfig

    assert "mm_registry" in inspect.signature(Scheduler.__init__).parameters
    engine = EngineConfig(max_num_seqs=4, max_num_batched_tokens=2048, block_size=16, kv_capacity_blocks=512)
    assert build_scheduler("whisper-tiny", engine, policy="fcfs", kappa={"en": 1.0}).max_num_encoder_input_tokens == 2048
    small = EngineConfig(max_num_seqs=4, max_num_batched_tokens=1024, block_size=16, kv_capacity_blocks=512)
    with pytest.raises(ValueError, match=r"max_tokens_per_mm_item \(1500\)"):
        build_scheduler("whisper-tiny", small, policy="fcfs", kappa={"en": 1.0})


@needs_vllm
def test_vllms_scheduler_still_preempts_through_a_private_routine():
    """``_preempt_request`` frees a running request's blocks, resets its computed tokens and
    puts it back in the waiting queue."""
    from schedlab.backends.vllm.build import make_request
    from schedlab.compat.vllm import preempt

    sched = _scheduler()
    sched.clock = lambda: 1.0
    sched.add_request(make_request("a", 40, 5, 0.0, extra_args={"audio_duration_s": 3.0, "language": "en"}))
    _step(sched)
    request = sched.requests["a"]
    used = sched.kv_cache_manager.block_pool.get_num_free_blocks()
    assert request.num_computed_tokens > 0
    sched.running.remove(request)
    preempt(sched, request)
    assert request.status.name == "PREEMPTED" and request.num_computed_tokens == 0
    assert request in sched.waiting
    assert sched.kv_cache_manager.block_pool.get_num_free_blocks() > used


@needs_vllm
def test_vllm_still_holds_a_request_through_its_decode_cadence():
    """A running request whose ``next_decode_eligible_step`` lies ahead is not scheduled, and the
    scheduler's token budget is an attribute it reads each step: ``step_as_planned`` uses both."""
    from schedlab.backends.vllm.build import make_request
    from schedlab.compat.vllm import step_as_planned

    sched = _scheduler()
    sched.clock = lambda: 1.0
    for rid in "ab":
        sched.add_request(make_request(rid, 8, 20, 0.0, extra_args={"audio_duration_s": 3.0, "language": "en"}))
    _step(sched)  # both prefilled
    held = [sched.requests["a"]]
    budget = sched.max_num_scheduled_tokens
    with step_as_planned(sched, 1, held):
        out = sched.schedule()
    assert dict(out.num_scheduled_tokens) == {"b": 1}
    assert sched.max_num_scheduled_tokens == budget and held[0].next_decode_eligible_step == 0


@needs_vllm
def test_vllms_request_still_takes_an_attribute():
    """vLLM's ``Request`` keeps an attribute set on it (no ``__slots__``)."""
    from schedlab.backends.vllm.build import make_request
    from schedlab.compat.vllm import job_of, keep_job

    request = make_request("a", 8, 1, 0.0)
    assert job_of(request) is None
    job = object()
    assert keep_job(request, job) is job and job_of(request) is job


@needs_vllm
def test_vllm_still_builds_its_config_from_engine_args():
    """vLLM builds an engine's configuration with ``EngineArgs.create_engine_config``, and the
    arguments carry the scheduler class and the additional config that schedlab checks."""
    from vllm.engine.arg_utils import EngineArgs

    assert callable(getattr(EngineArgs, "create_engine_config", None))
    args = EngineArgs(model="m", scheduler_cls="x.Y", additional_config={"schedlab": {}})
    assert args.scheduler_cls == "x.Y" and args.additional_config == {"schedlab": {}}


@needs_vllm
def test_vllms_cpu_platform_still_lets_the_legacy_kv_variable_win():
    """vLLM's CPU platform sizes the KV cache from ``VLLM_CPU_KVCACHE_SPACE`` when it is set,
    over ``--kv-cache-memory-bytes``: the reason ``cpu_engine_env`` drops the variable."""
    from vllm.platforms.cpu import CpuPlatform

    from schedlab.backends.vllm.engine import cpu_engine_env

    source = inspect.getsource(CpuPlatform.check_and_update_config)
    assert "VLLM_CPU_KVCACHE_SPACE" in source and "kv_cache_memory_bytes" in source
    assert "VLLM_CPU_KVCACHE_SPACE" not in cpu_engine_env({"VLLM_CPU_KVCACHE_SPACE": "4"})


@needs_vllm
def test_the_vllm_distribution_answers_with_the_pinned_version():
    """The ``vllm`` command asks for the version of a distribution named ``vllm``; installed as
    ``vllm-cpu``, the empty ``vllm`` distribution answers it with the package's own version."""
    import vllm

    from packaging.version import Version

    assert Version(importlib.metadata.version("vllm")).base_version == Version(vllm.__version__).base_version


# -- CPython ----------------------------------------------------------------------------------
def test_the_client_heap_is_frozen_during_a_replay():
    """``gc.freeze`` moves what is alive into the permanent generation, out of collections'
    reach, until ``gc.unfreeze``."""
    from schedlab.compat.cpython import frozen_heap

    assert gc.get_freeze_count() == 0
    with frozen_heap():
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0


@needs_vllm
def test_vllm_still_skips_the_vocabulary_check_without_a_tokenizer():
    """vLLM's renderer checks prompt token ids against the vocabulary only when it has a
    tokenizer: the reason for ``vocabulary_checked_without_a_tokenizer``. With the shim, a
    renderer of schedlab's scheduler class without a tokenizer refuses an id past its vocabulary."""
    from types import SimpleNamespace

    from vllm.exceptions import VLLMValidationError
    from vllm.renderers.base import BaseRenderer

    from schedlab.backends.vllm.plugin import schedlabs
    from schedlab.compat.vllm import vocabulary_checked_without_a_tokenizer

    original = inspect.unwrap(BaseRenderer.validate_token_ids)
    renderer = SimpleNamespace(tokenizer=None, model_config=SimpleNamespace(get_vocab_size=lambda: 32000),
                               config=SimpleNamespace(scheduler_config=SimpleNamespace(
                                   scheduler_cls="schedlab.backends.vllm.plan.SchedlabPlanScheduler")))
    original(renderer, [10**9, 5])  # vLLM: no tokenizer, no check
    assert vocabulary_checked_without_a_tokenizer(schedlabs)
    for ids in ([10**9, 5], [-1, 5], [32000]):
        with pytest.raises(VLLMValidationError, match="out of vocabulary"):
            BaseRenderer.validate_token_ids(renderer, ids)
    BaseRenderer.validate_token_ids(renderer, [0, 31999])
    renderer.config.scheduler_config.scheduler_cls = "vllm.v1.core.sched.scheduler.Scheduler"
    BaseRenderer.validate_token_ids(renderer, [10**9])  # another scheduler class: vLLM's own behaviour


# -- transformers ---------------------------------------------------------------------------
def test_transformers_continuous_batching_still_takes_what_schedlab_sets():
    """On the installed release: the real engine's batching config holds every field schedlab
    sets, under that release's names; the stand-in cache of transformers-sim holds the blocks,
    pages and token budget asked for, and the shims read its free blocks and its cache-read
    budget; a field no release has is refused, not dropped."""
    pytest.importorskip("transformers")
    from schedlab.backends.transformers.engine import TransformersSpec, engine_batching
    from schedlab.backends.transformers.sim import stand_in_cache
    from schedlab.compat.transformers import batching_config, free_blocks, read_budget
    from schedlab.errors import SchedlabError

    spec = TransformersSpec(block_size=16, kv_capacity_blocks=64, max_num_batched_tokens=128, max_num_seqs=8)
    made = batching_config(scheduler_type="schedlab", **engine_batching(spec))
    assert (made.page_size if hasattr(made, "page_size") else made.block_size) == 16
    assert (made.num_blocks, made.max_batch_tokens, made.max_requests_per_batch) == (64, 128, 8)
    assert made.scheduler_type == "schedlab" and made.allow_block_sharing is False and made.use_async_batching is False
    cache, _, _ = stand_in_cache(spec.limits)
    assert cache.num_blocks == free_blocks(cache) == 64 and cache.max_batch_tokens == 128
    assert read_budget(cache) == 64 * 16
    with pytest.raises(SchedlabError, match="has no field 'pages'"):
        batching_config(pages=16)
