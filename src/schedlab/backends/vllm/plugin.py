"""schedlab's vLLM plug-in (entry point ``vllm.general_plugins``): a ``vllm serve`` with one of
schedlab's scheduler classes checks its ``--additional-config`` as it starts, and answers a
prompt token id outside its model's vocabulary with a 400, also without a tokenizer.

The scheduler class is built only after the engine has loaded its model (about 20 s on CPU), so
a bad ``schedlab`` section used to end the server there, behind three vLLM tracebacks. vLLM
loads general plug-ins in every process as it parses its arguments; :func:`register` wraps
``EngineArgs.create_engine_config``, which the server calls next, to check the section first
(:func:`check_options`: the options' keys and types, the policy or step-plan scheduler's name).
A bad section ends ``vllm serve`` in one line (``schedlab: error: ...``, exit status 2) within
seconds; inside another program (an in-process engine) it raises
:class:`~schedlab.errors.SchedlabError`.
"""

from __future__ import annotations

import os
import sys

from schedlab.errors import SchedlabError

#: The scheduler classes whose options are a policy's, and a step-plan scheduler's.
POLICY_CLASSES = ("schedlab.backends.vllm.scheduler.SchedlabScheduler",
                  "schedlab.backends.vllm.scheduler.SchedlabAsyncScheduler")
PLAN_CLASSES = ("schedlab.backends.vllm.plan.SchedlabPlanScheduler",
                "schedlab.backends.vllm.plan.SchedlabPlanAsyncScheduler")


def _class_name(scheduler_cls) -> str:
    """A scheduler class, given as a ``module.Class`` path or as the class, as its path."""
    if isinstance(scheduler_cls, type):
        return f"{scheduler_cls.__module__}.{scheduler_cls.__qualname__}"
    return scheduler_cls if isinstance(scheduler_cls, str) else getattr(scheduler_cls, "__qualname__", "")


def schedlabs(vllm_config) -> bool:
    """Whether an engine's configuration runs one of schedlab's scheduler classes."""
    scheduler = getattr(vllm_config, "scheduler_config", None)
    return _class_name(getattr(scheduler, "scheduler_cls", None)) in POLICY_CLASSES + PLAN_CLASSES


def check_options(scheduler_cls, additional_config) -> None:
    """The ``schedlab`` section of ``additional_config`` as the scheduler class named
    ``scheduler_cls`` (a ``module.Class`` path) reads it; raises a one-line
    :class:`SchedlabError`. Other scheduler classes are not checked."""
    name = _class_name(scheduler_cls)
    from schedlab import registry
    from schedlab.validation.hints import plan_options, server_options

    if name in POLICY_CLASSES:
        registry.entry(server_options(additional_config).policy, registry.QUEUE)
    elif name in PLAN_CLASSES:
        registry.entry(plan_options(additional_config).scheduler, registry.BATCH)


def _serving() -> bool:
    """Whether this process is the ``vllm serve`` command (not a program using vLLM)."""
    return os.path.basename(sys.argv[0]) == "vllm" and "serve" in sys.argv[1:2]


def register() -> None:
    """Check schedlab's options before vLLM builds an engine's configuration (once per process;
    :func:`schedlab.compat.vllm.check_before_engine_config`), and have a server with one of
    schedlab's scheduler classes refuse, with a 400, a prompt token id its model has no embedding
    for, with or without a tokenizer (:func:`schedlab.compat.vllm.vocabulary_checked_without_a_tokenizer`:
    vLLM checks only with one, and the id otherwise ends the engine core)."""
    from schedlab.compat.vllm import check_before_engine_config, vocabulary_checked_without_a_tokenizer

    vocabulary_checked_without_a_tokenizer(schedlabs)

    def check(scheduler_cls, additional_config) -> None:
        try:
            check_options(scheduler_cls, additional_config)
        except SchedlabError as e:
            if not _serving():
                raise
            print("schedlab: error: " + " ".join(str(e).split()), file=sys.stderr, flush=True)
            raise SystemExit(2) from None

    check_before_engine_config(check)
