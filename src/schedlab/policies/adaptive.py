"""Switching among FCFS, SJF and HRRN from the queue's own depth and tail wait (paper A's
future work).

One waiting set (numpy arrays, as in HRRN) is ordered by whichever policy is active: its key
is the active policy's, computed over every waiting job at once, with the fixed policy's
exact tie-breaks, so a run that never leaves one policy is identical to that policy's run. At the first ``peek``/``pop`` at a new ``now``
the rule reads two signals — the depth (waiting jobs) and the ``tail_q`` quantile of the
waiting jobs' current waits — and moves between three regimes:

- *shallow* (FCFS) once depth <= ``shallow_depth``: order barely matters, arrival is fairest;
- *deep* (SJF) once depth >= ``deep_depth`` while the tail wait is at most ``tail_low_s``;
- *tail* (``tail_policy``) once deep and the tail wait reaches ``tail_high_s``.

Between the thresholds the regime stays (hysteresis), and no change comes within
``min_dwell_s`` of the previous one. The tail regime serves the starving jobs: with FCFS (the
default) the oldest first, which bounds the tail near FCFS's; HRRN (paper A's suggestion) ages
too slowly to do so when size is in tokens and wait in seconds — a 30 s clip must wait ~15x
longer than a 2 s clip to outrank it — so that variant's tail stays HRRN's.
The victim rule is the active policy's: SJF's largest size, HRRN's lowest ratio, and under
FCFS the engine's default, the newest admitted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from schedlab.errors import SchedlabError
from schedlab.policies.base import Job
from schedlab.policies.hrrn import response_ratio
from schedlab.policies.keyed import KeyedPolicy
from schedlab.registry import ASR, LLM, QUEUE, register

FCFS, SJF, HRRN = "fcfs", "sjf", "hrrn"
SHALLOW, DEEP, TAIL = "shallow", "deep", "tail"


@dataclass(frozen=True)
class SwitchRule:
    """Thresholds of the switching rule (defaults tuned on paper A's drifting workload)."""

    shallow_depth: int = 4
    deep_depth: int = 16
    tail_q: float = 0.9
    tail_low_s: float = 5.0
    tail_high_s: float = 10.0
    min_dwell_s: float = 1.0
    tail_policy: str = FCFS

    def __post_init__(self) -> None:
        if not 0 <= self.shallow_depth < self.deep_depth:
            raise SchedlabError(f"need 0 <= shallow_depth < deep_depth, got {self.shallow_depth} and {self.deep_depth}")
        if not 0 < self.tail_q <= 1:
            raise SchedlabError(f"tail_q must be in (0, 1], got {self.tail_q}")
        if not 0 <= self.tail_low_s < self.tail_high_s:
            raise SchedlabError(f"need 0 <= tail_low_s < tail_high_s, got {self.tail_low_s} and {self.tail_high_s}")
        if not self.min_dwell_s >= 0:
            raise SchedlabError(f"min_dwell_s must be non-negative, got {self.min_dwell_s}")
        if self.tail_policy not in (FCFS, HRRN):
            raise SchedlabError(f"tail_policy must be fcfs or hrrn, got {self.tail_policy!r}")

    def policy(self, regime: str) -> str:
        """The order a regime uses."""
        return {SHALLOW: FCFS, DEEP: SJF, TAIL: self.tail_policy}[regime]


class Switch(NamedTuple):
    """One regime change: when, the policies before and after, and the signals behind it."""

    time_s: float
    from_policy: str
    to_policy: str
    regime: str
    depth: int
    tail_s: float


@register("adaptive", kind=QUEUE, modalities=(ASR, LLM), paper="A+", summary="FCFS, SJF or HRRN, switched by the queue's depth and tail wait (FCFS serves the tail)")
class Adaptive(KeyedPolicy):
    """FCFS / SJF / HRRN over one waiting set, switched by :class:`SwitchRule`; starts shallow."""

    name = "adaptive"
    default_rule = SwitchRule()
    dynamic = vectorised = True

    def __init__(self, rule: SwitchRule | None = None) -> None:
        self.rule = rule or self.default_rule
        self.regime = SHALLOW
        self.switches: list[Switch] = []
        self._decided_at: float | None = None
        self._last_switch = -np.inf
        super().__init__()
        self._admitted: dict[int, int] = {}  # request id -> admission number (FCFS victims)
        self._pops = 0

    @property
    def active(self) -> str:
        """The policy now ordering the queue."""
        return self.rule.policy(self.regime)

    # -- the rule -----------------------------------------------------------------------
    def tail_wait(self, now: float) -> float:
        """The ``tail_q`` quantile of the waiting jobs' current waits (0 when none wait)."""
        w = self._waiting
        return float(np.quantile(now - w.arrival_s, self.rule.tail_q)) if len(w) else 0.0

    def _next_regime(self, depth: int, tail: float) -> str:
        rule, cur = self.rule, self.regime
        if depth <= rule.shallow_depth or (cur == SHALLOW and depth < rule.deep_depth):
            return SHALLOW
        if tail >= rule.tail_high_s:
            return TAIL
        if tail <= rule.tail_low_s or cur == SHALLOW:
            return DEEP
        return cur

    def _decide(self, now: float) -> None:
        """Re-evaluate the rule once per clock reading, respecting the minimum dwell."""
        if now == self._decided_at:
            return
        self._decided_at = now
        if now - self._last_switch < self.rule.min_dwell_s:
            return
        depth, tail = len(self._waiting), self.tail_wait(now)
        regime = self._next_regime(depth, tail)
        if regime != self.regime:
            before = self.active
            self.regime, self._last_switch = regime, now
            self.switches.append(Switch(now, before, self.active, regime, depth, tail))

    # -- the queue ----------------------------------------------------------------------
    def push(self, job: Job) -> None:
        super().push(job)
        self._admitted.pop(job.request_id, None)  # a preempted job waits again

    def key(self, jobs, now: float):
        """The active policy's key of the waiting ``jobs`` (their columns), the rule decided
        first."""
        self._decide(now)
        if self.active == FCFS:
            return jobs.arrival_s
        if self.active == SJF:
            return jobs.size
        return -response_ratio(now - jobs.arrival_s, jobs.size)

    def pop(self, now: float) -> Job:
        job = super().pop(now)
        self._pops += 1
        self._admitted[job.request_id] = self._pops
        return job

    def victim_key(self, job: Job, now: float) -> tuple:
        """The active policy's eviction rank (the regime of the last decision, not re-taken,
        so every backend ranks victims under the same regime)."""
        if self.active == SJF:
            return (job.size, job.arrival_s, job.request_id)
        if self.active == HRRN:
            return (-response_ratio(now - job.arrival_s, job.size), job.arrival_s, job.request_id)
        return (self._admitted[job.request_id],)


@register("adaptive-hrrn", kind=QUEUE, modalities=(ASR, LLM), paper="A+", summary='adaptive switching with HRRN serving the tail')
class AdaptiveHRRN(Adaptive):
    """Paper A's suggestion as stated: HRRN, not FCFS, serves the tail regime."""

    name = "adaptive-hrrn"
    default_rule = SwitchRule(tail_policy=HRRN)
