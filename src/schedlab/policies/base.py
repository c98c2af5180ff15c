"""The policy interface: a waiting queue that also names the preemption victim.

A policy orders jobs (:class:`Job`). Every backend wraps its own requests in them (schedlab's
engine with the request's trace position as ``ref``, vLLM's scheduler with its ``Request``),
so one policy serves the simulator and vLLM alike. ``peek`` and ``pop`` agree when called at
the same ``now``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence


@dataclass(slots=True, eq=False)
class Job:
    """A waiting request as a policy sees it (compared by identity): its id, arrival, the
    job-size estimate (paper A's n_hat in tokens, a priority, or the output length), its prompt
    length, ``ref``, the backend's own handle on the request, and, on an engine with a prefix
    cache, ``uncached``: asked now, the tokens its admission would compute (its known tokens
    less the prefix the cache holds, as the engine would look it up); ``None`` without one."""

    request_id: int
    arrival_s: float
    size: float
    prompt_tokens: int
    ref: Any = None
    uncached: Callable[[], int] | None = None

    def work(self) -> int:
        """The tokens its admission would compute now: :attr:`uncached` asked, or the prompt
        without a prefix cache."""
        return self.prompt_tokens if self.uncached is None else self.uncached()


class Policy(ABC):
    """A waiting queue ordered by the policy, plus its preemption-victim rule."""

    name: str = ""
    #: Whether the policy asks :meth:`Job.work` (a backend with a prefix cache then gives each
    #: job its lookup, :attr:`Job.uncached`).
    reads_cache: bool = False

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
    def remove(self, job: Job) -> None:
        """Drop a waiting job (an aborted request)."""

    @abstractmethod
    def __iter__(self) -> Iterator[Job]:
        """The waiting jobs, in no particular order."""

    @abstractmethod
    def __len__(self) -> int: ...

    def victim_key(self, job: Job, now: float) -> tuple | None:
        """Eviction rank of a running job: the largest is preempted first. ``None`` (the
        default) means the engine's own rule, the newest admitted."""
        return None

    @property
    def ranks_victims(self) -> bool:
        """Whether the policy overrides the engine's victim rule with :meth:`victim_key`."""
        return type(self).victim_key is not Policy.victim_key

    def victim(self, running: Sequence[Job], now: float) -> Job:
        """The running job to preempt under memory pressure."""
        if not self.ranks_victims:
            return running[-1]
        return max(running, key=lambda j: self.victim_key(j, now))
