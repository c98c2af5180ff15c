"""The request fields a client may send a vLLM server running schedlab's scheduler for its
policy to read (:class:`schedlab.policies.base.Job`), checked once per request.

Per request, ``vllm_xargs`` may carry, beside the hints of :mod:`schedlab.validation.hints`:

- ``tenant``: the tenant or client it is served for (a string, at most 64 characters);
- ``e2e_target_s``: the end-to-end target its deadline counts from (a finite number in
  (0, 1e7] seconds after its arrival);
- ``predicted_output_tokens``: a predictor's estimate of its output length (a finite number in
  [0, 1e9]).

A bad field is logged once and the request keeps none of them.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from schedlab.validation.documents import parse


class RequestFields(BaseModel):
    """The policy-readable keys of a request's ``vllm_xargs`` (other keys are ignored)."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)
    tenant: Annotated[str, Field(max_length=64)] = ""
    e2e_target_s: Annotated[float, Field(gt=0, le=1e7, allow_inf_nan=False)] | None = None
    predicted_output_tokens: Annotated[float, Field(ge=0, le=1e9, allow_inf_nan=False)] | None = None


def checked_fields(xargs) -> RequestFields:
    """The fields in ``xargs`` (None: none), typed and in range; a one-line SchedlabError on
    the first bad value."""
    return parse(RequestFields, xargs or {}, "vllm_xargs")
