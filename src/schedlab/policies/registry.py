"""Policy names as used in config files and on the command line."""

from __future__ import annotations

from schedlab.errors import SchedlabError
from schedlab.policies.adaptive import Adaptive, AdaptiveHRRN
from schedlab.policies.base import Policy
from schedlab.policies.fcfs import FCFS
from schedlab.policies.hrrn import HRRN
from schedlab.policies.sjf import SJF, SJFPrompt
from schedlab.ewsjf.policy import EWSJF

POLICIES: dict[str, type[Policy]] = {p.name: p for p in (FCFS, SJF, HRRN, Adaptive, AdaptiveHRRN)}
POLICIES.update({p.name: p for p in (SJFPrompt, EWSJF)})


def make_policy(name: str) -> Policy:
    try:
        return POLICIES[name]()
    except KeyError:
        raise SchedlabError(
            f"unknown policy {name!r}; choose from {', '.join(sorted(POLICIES))}"
        ) from None
