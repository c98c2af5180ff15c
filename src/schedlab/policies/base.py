"""The policy interface: a waiting queue that also names the preemption victim.

A policy orders *jobs*: any object with ``request_id`` (int), ``arrival_s`` (float) and
``size`` (the job-size estimate, e.g. paper A's n_hat in tokens). Backends wrap their own
request objects to this shape, so one policy serves the simulator and vLLM alike. ``peek``
and ``pop`` agree when called at the same ``now``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Protocol, Sequence


class Job(Protocol):
    request_id: int
    arrival_s: float
    size: float


class Policy(ABC):
    """A waiting queue ordered by the policy, plus its preemption-victim rule."""

    name: str = ""

    @abstractmethod
    def push(self, job: Job) -> None:
        """Add a waiting job."""

    @abstractmethod
    def peek(self, now: float) -> Job:
        """The job ``pop(now)`` would return, left in place."""

    @abstractmethod
    def pop(self, now: float) -> Job:
        """Remove and return the next job to admit."""

    @abstractmethod
    def __len__(self) -> int: ...

    def victim(self, running: Sequence[Job], now: float) -> Job:
        """The running job to preempt under memory pressure (default: the newest admitted)."""
        return running[-1]
