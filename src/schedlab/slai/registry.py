"""Scheduler names -> batch builders, with the paper's parameters."""

from __future__ import annotations

from schedlab.slai.algorithm2 import Algorithm2
from schedlab.slai.prefill_priority import PrefillPriority
from schedlab.slai.rad import RAD
from schedlab.slai.request_level import RequestLevel
from schedlab.slai.sarathi import Sarathi
from schedlab.slai.slai import SLAI
from schedlab.errors import SchedlabError

PAYING = "paying"

SCHEDULERS = {
    "request-level": lambda: RequestLevel(),
    "prefill-priority": lambda: PrefillPriority(),
    "sarathi-fcfs": lambda: Sarathi(order="fcfs"),
    "sarathi-spf": lambda: Sarathi(order="spf"),
    "rad": lambda: RAD(),
    "rad-long-cycles": lambda: RAD(n=4096),
    "algorithm2": lambda: Algorithm2(),
    "slai-fcfs-fixed10": lambda: SLAI(order="fcfs", offset=10.0),
    "slai-spf-fixed10": lambda: SLAI(order="spf", offset=10.0),
    "slai-spf-fixed5": lambda: SLAI(order="spf", offset=5.0),
    "slai-spf-dynamic": lambda: SLAI(order="spf", offset=None),
    "slai-spf-priority-dynamic": lambda: SLAI(order="spf", offset=None, paying_first=PAYING),
}


def make_builder(name: str):
    try:
        return SCHEDULERS[name]()
    except KeyError:
        raise SchedlabError(f"unknown scheduler {name!r}; known: {', '.join(SCHEDULERS)}") from None
