"""Every place where schedlab works around, patches or reaches into Snakemake, vLLM, transformers or CPython
internals, in one package: each shim is a function that the code needing it calls explicitly
(none is applied by importing a module), listed in :data:`WORKAROUNDS` with what it does, the
versions it was written for, the upstream issue where one exists and the test that fails when
the upstream behaviour it works around changes (``tests/test_compat.py`` holds those canaries;
``docs/compatibility.md`` lists them)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Workaround:
    name: str
    shim: str          # where it lives: module.function
    used_by: str       # who applies it
    what: str
    written_for: str   # the releases it was written against
    upstream: str      # the upstream issue, or the private API it depends on
    canary: str        # the test that fails when the upstream behaviour changes


WORKAROUNDS = (
    Workaround("one pending wake-up", "schedlab.compat.snakemake.one_pending_wakeup", "workflow/rules/scheduler.smk",
               "Snakemake's job scheduler keeps at most one pending rate-limiter wake-up timer, instead of one "
               "more for each job that ends while others wait (they chain and wake it many times a second)",
               "Snakemake 9.27.1", "snakemake issue 3744; private JobScheduler._schedule_reevalutation",
               "tests/test_compat.py::test_snakemake_still_starts_a_timer_per_reevaluation"),
    Workaround("a held lock refused in one line", "schedlab.compat.snakemake.one_line_when_held",
               "schedlab.compat.snakemake.release_stale_lock (the Snakefile)",
               "Snakemake's refusal to lock a folder while another run works on the same files is one line naming "
               "that run, instead of a LockException advising --unlock, wrong while that run lives",
               "Snakemake 9.27.1", "private PersistenceBase.lock and PersistenceBase.locked",
               "tests/test_compat.py::test_snakemake_still_refuses_a_held_lock_with_advice_to_unlock"),
    Workaround("modules hidden from the kernel scan", "schedlab.compat.vllm.modules_hidden_from_kernel_scan",
               "schedlab.backends.vllm.engine.start_engine",
               "modules whose attributes break vLLM's scan of every module's namespace for Triton kernels "
               "(llvmlite's ctypes wrapper, loaded with numba) are left out of sys.modules while an in-process "
               "engine starts", "vLLM 0.32.0, 0.33.0", "vllm/triton_utils/dispatcher.py _rebind_kernels",
               "tests/test_compat.py::test_vllm_still_scans_every_module_for_kernels"),
    Workaround("a stand-in multimodal registry", "schedlab.compat.vllm.AudioBudgetRegistry",
               "schedlab.backends.vllm.build.build_scheduler",
               "tells vLLM's scheduler, built without a model for vllm-sim, what it needs of Whisper's "
               "multimodal processor: each audio input is 1,500 encoder tokens",
               "vLLM 0.32.0, 0.33.0", "the scheduler's mm_registry argument and create_processor().info",
               "tests/test_compat.py::test_vllms_scheduler_still_takes_a_multimodal_registry"),
    Workaround("a step run as planned", "schedlab.compat.vllm.step_as_planned",
               "schedlab.backends.vllm.plan.PlanMixin",
               "vLLM's own schedule() runs a step plan: its token budget set to the plan's and the running "
               "requests left out of the plan held from decoding for the step, both restored after",
               "vLLM 0.32.0, 0.33.0", "Scheduler.max_num_scheduled_tokens and Request.next_decode_eligible_step",
               "tests/test_compat.py::test_vllm_still_holds_a_request_through_its_decode_cadence"),
    Workaround("preemption through vLLM's own routine", "schedlab.compat.vllm.preempt",
               "schedlab.backends.vllm.plan.PlanMixin, schedlab.backends.vllm.scheduler.SchedlabMixin",
               "a step plan's preemptions, and those a queue policy names at a step boundary, go through vLLM's "
               "private _preempt_request (recompute), so vLLM's state stays its own", "vLLM 0.32.0, 0.33.0", "private Scheduler._preempt_request(request, timestamp)",
               "tests/test_compat.py::test_vllms_scheduler_still_preempts_through_a_private_routine"),
    Workaround("a job kept on vLLM's request", "schedlab.compat.vllm.keep_job",
               "schedlab.backends.vllm.scheduler.SchedlabMixin",
               "each request's job (its size hint, read once) is kept as an attribute of vLLM's own Request",
               "vLLM 0.32.0, 0.33.0", "vllm.v1.request.Request takes new attributes (no __slots__)",
               "tests/test_compat.py::test_vllms_request_still_takes_an_attribute"),
    Workaround("a request's fields kept on vLLM's request", "schedlab.compat.vllm.kept",
               "schedlab.backends.vllm.scheduler.VllmState",
               "the fields a policy reads of a request (its SLO class, tenant, deadline and predicted length, read "
               "once) and the time of its first token are kept as attributes of vLLM's own Request",
               "vLLM 0.32.0, 0.33.0", "vllm.v1.request.Request takes new attributes (no __slots__)",
               "tests/test_compat.py::test_vllms_request_still_takes_an_attribute"),
    Workaround("options checked before an engine's configuration", "schedlab.compat.vllm.check_before_engine_config",
               "schedlab.backends.vllm.plugin.register",
               "schedlab's --additional-config section is checked as vLLM builds an engine's configuration, so "
               "a bad one ends vllm serve as it starts", "vLLM 0.32.0, 0.33.0",
               "EngineArgs.create_engine_config, scheduler_cls and additional_config",
               "tests/test_compat.py::test_vllm_still_builds_its_config_from_engine_args"),
    Workaround("the vocabulary checked without a tokenizer", "schedlab.compat.vllm.vocabulary_checked_without_a_tokenizer",
               "schedlab.backends.vllm.plugin.register",
               "a prompt token id outside the model's vocabulary is answered 400 also by a server with schedlab's "
               "scheduler class started without a tokenizer (--skip-tokenizer-init), where vLLM skips its check and "
               "the id ends the engine core in the embedding", "vLLM 0.32.0",
               "BaseRenderer.validate_token_ids returns early without a tokenizer",
               "tests/test_compat.py::test_vllm_still_skips_the_vocabulary_check_without_a_tokenizer"),
    Workaround("the legacy KV variable left out", "schedlab.backends.vllm.engine.cpu_engine_env",
               "schedlab.backends.vllm.engine.start_engine, schedlab.backends.served.server.server_env",
               "VLLM_CPU_KVCACHE_SPACE is removed from a CPU engine's environment: vLLM's CPU platform takes "
               "it (in GiB) over --kv-cache-memory-bytes, the size schedlab gives the engine and sim assumes",
               "vllm-cpu 0.32.0", "CpuPlatform.check_and_update_config reads the variable (a legacy setting)",
               "tests/test_compat.py::test_vllms_cpu_platform_still_lets_the_legacy_kv_variable_win"),
    Workaround("an empty vllm distribution", "envs/vllm-cpu-alias", "make install, envs/cpu.yaml",
               "vllm-cpu installs under another name, while the vllm command asks for the version of a "
               "distribution named vllm", "vllm-cpu 0.32.0", "vllm's CLI reads importlib.metadata.version('vllm')",
               "tests/test_compat.py::test_the_vllm_distribution_answers_with_the_pinned_version"),
    Workaround("transformers' batching config across releases", "schedlab.compat.transformers.batching_config",
               "schedlab.backends.transformers.engine, schedlab.backends.transformers.sim",
               "transformers' continuous-batching configuration is built with 5.19's field names, renamed where "
               "5.17 calls them otherwise (page_size is 5.17's block_size) and without auto_switch_to_flash, which "
               "5.17 lacks; any other field a release lacks is refused", "transformers 5.17.0, 5.19.0",
               "ContinuousBatchingConfig's fields",
               "tests/test_compat.py::test_transformers_continuous_batching_still_takes_what_schedlab_sets"),
    Workaround("transformers' paged cache across releases", "schedlab.compat.transformers.paged_cache",
               "schedlab.backends.transformers.sim, schedlab.backends.transformers.engine",
               "transformers-sim's stand-in paged cache is built with 5.17's tensor-parallel plan where the "
               "constructor takes one; its free blocks, blocks per sector and cache-read budget are read from "
               "5.19's sectors or 5.17's block manager (free_blocks, blocks_per_sector, read_budget)",
               "transformers 5.17.0, 5.19.0", "PagedAttentionCache's constructor, pool and num_pages/max_tokens_read",
               "tests/test_compat.py::test_transformers_continuous_batching_still_takes_what_schedlab_sets"),
    Workaround("an interrupt forgotten once handled", "schedlab.compat.cpython.forget_unhandled_interrupt",
               "schedlab.cli.exits.interrupted (Ctrl-C)",
               "CPython's record of a KeyboardInterrupt as unhandled (set when one leaves a C extension's PyRun_* "
               "call, even if Python code catches it) is cleared once schedlab has handled the interrupt, so the "
               "process exits with 130 and not by SIGINT", "CPython 3.11",
               "_Py_UnhandledKeyboardInterrupt, reset by every PyRun_* call",
               "tests/test_compat.py::test_cpython_still_ends_by_sigint_after_an_interrupt_left_a_pyrun_call"),
    Workaround("the client's heap frozen", "schedlab.compat.cpython.frozen_heap",
               "schedlab.backends.served.client", "gc.freeze during a replay, as vllm bench serve does, so a full "
               "collection of the client's heap does not hold its event loop mid-replay", "CPython 3.11",
               "gc.freeze / gc.unfreeze", "tests/test_compat.py::test_the_client_heap_is_frozen_during_a_replay"),
    Workaround("Snakemake's job records read", "schedlab.compat.snakemake.job_records",
               "workflow/scripts/results_page.py",
               "the results page's job times come from the records Snakemake keeps under .snakemake/metadata",
               "Snakemake 9.27.1", "private .snakemake/metadata layout",
               "tests/test_docs.py (the results page's script in a throwaway workflow)"),
    Workaround("a killed run's lock released", "schedlab.compat.snakemake.release_stale_lock", "Snakefile",
               "the lock files of a Snakemake that no longer runs are removed, so the plain command resumes",
               "Snakemake 9.27.1", "private .snakemake/locks layout", "tests/test_workflow.py (resume after SIGKILL)"),
)
