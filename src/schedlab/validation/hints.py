"""What a client may send a vLLM server running schedlab's scheduler, checked once.

Per request, ``vllm_xargs`` (vLLM's ``SamplingParams.extra_args``) may carry:

- ``audio_duration_s``, ``speech_duration_s``: numbers in [0, 1e5] seconds;
- ``language``: a string (at most 64 characters);
- ``priority``: a finite number >= 0 (lower first), accepted only when the deployment allows
  client priorities (``--additional-config '{"schedlab": {"allow_client_priority": true}}'``);
- ``slo_class``: the request's service class (a string, at most 64 characters), and its
  targets ``tbt_target_s`` and ``ttft_target_s``: finite numbers in (0, 1e4] seconds, read by
  paper C's SLO-aware schedulers (:mod:`schedlab.backends.vllm.plan`). A bad SLO hint leaves
  the request in class ``all`` with no target.

Other keys are left to whoever reads them. :func:`checked_hint` raises a one-line
:class:`SchedlabError` on the first bad value; the scheduler then sizes that request by its
``max_tokens``, as for a request without hints.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from schedlab.contracts import MAX_AUDIO_S
from schedlab.errors import SchedlabError
from schedlab.validation.documents import Kappa, Strict, parse

#: Longest audio duration a hint may state (about 28 hours; a trace's, too).
MAX_DURATION_S = MAX_AUDIO_S

Duration = Annotated[float, Field(ge=0, le=MAX_DURATION_S, allow_inf_nan=False)]


class SizeHint(BaseModel):
    """The job-size keys of a request's ``vllm_xargs`` (other keys are ignored)."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)
    audio_duration_s: Duration | None = None
    speech_duration_s: Duration | None = None
    language: Annotated[str, Field(max_length=64)] = "en"
    priority: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = None


#: Longest SLO target a hint may state.
MAX_TARGET_S = 1e4

Target = Annotated[float, Field(gt=0, le=MAX_TARGET_S, allow_inf_nan=False)]


class SloHint(BaseModel):
    """The SLO keys of a request's ``vllm_xargs`` (other keys are ignored)."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)
    slo_class: Annotated[str, Field(min_length=1, max_length=64)] = "all"
    tbt_target_s: Target | None = None
    ttft_target_s: Target | None = None


#: The hints that are numbers. vLLM's request models read a JSON ``true`` or ``false`` sent as one
#: of them as 1 or 0 before the scheduler sees it (``vllm_xargs`` takes str, int or float);
#: :class:`schedlab.backends.vllm.hints.CoercedHints` logs each.
NUMERIC_HINTS = ("audio_duration_s", "speech_duration_s", "priority", "tbt_target_s", "ttft_target_s")


def coerced_hints(xargs) -> list[str]:
    """The numeric hints of ``xargs`` (a client's ``vllm_xargs``, as sent) that are booleans."""
    if not isinstance(xargs, dict):
        return []
    return [key for key in NUMERIC_HINTS if isinstance(xargs.get(key), bool)]


def checked_slo_hint(xargs) -> SloHint:
    """The SLO hint in ``xargs`` (None: no hints), typed and in range."""
    return parse(SloHint, xargs or {}, "vllm_xargs")


def checked_hint(xargs, *, allow_priority: bool) -> dict:
    """The size hint in ``xargs`` (None: no hints) as :func:`schedlab.estimate.size_estimate`
    reads it: known keys only, typed and in range."""
    if xargs is None:
        return {}
    hint = parse(SizeHint, xargs, "vllm_xargs").model_dump(exclude_none=True)
    if "priority" in hint and not allow_priority:
        raise SchedlabError("vllm_xargs: key 'priority': client priorities are not enabled on this server "
                            "(additional-config schedlab.allow_client_priority)")
    return hint


class ServerOptions(Strict):
    """The ``schedlab`` section of vLLM's ``--additional-config``: the policy, kappa per
    language, whether clients may send a ``priority`` hint, and where to log every engine step
    (:mod:`schedlab.backends.steps.log`; no log without it)."""

    policy: str = "fcfs"
    kappa: dict[str, Kappa] = {}
    allow_client_priority: bool = False
    step_log: Annotated[str, Field(min_length=1)] | None = None


def server_options(additional_config: dict | None) -> ServerOptions:
    return parse(ServerOptions, (additional_config or {}).get("schedlab", {}), "additional-config 'schedlab'")


class PlanOptions(Strict):
    """The ``schedlab`` section of ``--additional-config`` for step-plan schedulers
    (:mod:`schedlab.backends.vllm.plan`): the name of a paper C scheduler and where to log
    every engine step (no log without it)."""

    scheduler: str
    step_log: Annotated[str, Field(min_length=1)] | None = None


def plan_options(additional_config: dict | None) -> PlanOptions:
    return parse(PlanOptions, (additional_config or {}).get("schedlab", {}), "additional-config 'schedlab'")
