"""A policy given by its key: the waiting job with the smallest ``key(job, now)`` is admitted
next, ties going to the earlier arrival, then the lower id.

A subclass writes :meth:`KeyedPolicy.key` and says how the key behaves; the base keeps the
waiting jobs and the victim rule:

- a **static** key (the default) does not change while a job waits: it is computed once, when
  the job is pushed (a preempted job is pushed again, and keyed again), with ``now=None`` (a
  push has no clock: a key that reads ``now`` is dynamic), and the jobs wait in a heap,
  O(log n) a push or a pop;
- a **dynamic** key (``dynamic = True``) changes while jobs wait, with ``now`` (HRRN's ratio, an
  aging term) or with state the policy reads (the prefix cache): every waiting job's key is
  asked at each decision, an O(n) scan. With ``vectorised = True`` as well, the key is written
  with arithmetic on the job's fields and the base calls it once per decision on the waiting
  set's columns (:class:`~schedlab.policies.waiting.WaitingArrays`: numpy arrays named
  ``arrival_s``, ``size``, ``request_id`` and ``prompt_tokens``), getting one key per job.

``peek`` and ``pop`` at the same ``now`` agree: a pop after a peek at the same ``now``, with no
push or removal between them, returns the job the peek chose without asking the keys again.

Under memory pressure the running job with the largest ``(key, arrival_s, request_id)`` is
preempted first; ``victims_by_key = False`` keeps the engine's own rule instead (the newest
admitted), as FCFS does.

A **preemptive** policy (``preemptive = True``) also takes running jobs' places for waiting jobs
of a smaller key at every step boundary (:meth:`~schedlab.policies.base.Policy.preempt`): the
waiting jobs beyond the batch's free slots, smallest key first, each against the running job of
the largest key (its key asked now), while the waiting key is strictly smaller; a running job
that has not generated a token since its admission keeps its place. Least attained service
and multi-level feedback queues are this, with a key that grows as a job is served.
"""

from __future__ import annotations

import heapq
from itertools import count
from typing import Iterator, Sequence

from schedlab.policies.base import Job, Policy
from schedlab.policies.waiting import WaitingArrays


class KeyedPolicy(Policy):
    """Admit the waiting job of the smallest :meth:`key`; see the module docstring."""

    #: Whether the key of a waiting job changes while it waits (then it is asked at every decision).
    dynamic: bool = False
    #: Whether :meth:`key` also computes every waiting job's key at once from the waiting set's
    #: columns (a dynamic key written with arithmetic on ``arrival_s``, ``size``,
    #: ``request_id`` and ``prompt_tokens`` only).
    vectorised: bool = False
    #: Whether the victim under memory pressure is the running job of the largest key (else
    #: the engine's rule: the newest admitted).
    victims_by_key: bool = True
    #: Whether waiting jobs of a smaller key take running jobs' places at step boundaries.
    preemptive: bool = False

    def __init__(self) -> None:
        if self.dynamic:
            self._waiting = WaitingArrays()
        else:
            self._heap: list[tuple] = []
            self._pushes = count()  # a unique last element: the heap never compares two jobs
        self._chosen: tuple[float, Job] | None = None  # (now, job) of the last peek

    def key(self, job: Job, now: float | None):
        """The job's rank at ``now``: smaller goes first (a number, or a tuple of numbers);
        ``now`` is None when a static key is computed at a push."""
        raise NotImplementedError(f"{type(self).__name__} must define key(job, now)")

    # -- the queue ------------------------------------------------------------------------
    def push(self, job: Job) -> None:
        self._chosen = None
        if self.dynamic:
            self._waiting.push(job)
        else:
            heapq.heappush(self._heap, (self.key(job, None), job.arrival_s, job.request_id,
                                        next(self._pushes), job))

    def _choose(self, now: float) -> Job:
        """The next job at ``now`` (a dynamic key's scan)."""
        w = self._waiting
        if self.vectorised:
            return w.jobs[w.best(self.key(w, now))]
        key = self.key
        return min(w.jobs, key=lambda j: (key(j, now), j.arrival_s, j.request_id))

    def peek(self, now: float) -> Job:
        if not self.dynamic:
            return self._heap[0][-1]
        job = self._choose(now)
        self._chosen = (now, job)
        return job

    def pop(self, now: float) -> Job:
        if not self.dynamic:
            return heapq.heappop(self._heap)[-1]
        chosen = self._chosen
        job = chosen[1] if chosen is not None and chosen[0] == now else self._choose(now)
        self._chosen = None
        return self._waiting.take(self._waiting.slot(job))

    def remove(self, job: Job) -> None:
        self._chosen = None
        if self.dynamic:
            self._waiting.take(self._waiting.slot(job))
        else:
            self._heap = [e for e in self._heap if e[-1] is not job]
            heapq.heapify(self._heap)

    def __iter__(self) -> Iterator[Job]:
        if self.dynamic:
            return iter(self._waiting)
        return (e[-1] for e in self._heap)

    def __len__(self) -> int:
        return len(self._waiting) if self.dynamic else len(self._heap)

    # -- victims --------------------------------------------------------------------------
    @property
    def ranks_victims(self) -> bool:
        return self.victims_by_key

    def victim_key(self, job: Job, now: float) -> tuple | None:
        return (self.key(job, now), job.arrival_s, job.request_id) if self.victims_by_key else None

    # -- preemption at step boundaries --------------------------------------------------
    @property
    def preempts(self) -> bool:
        return self.preemptive or type(self).preempt is not KeyedPolicy.preempt

    def preempt(self, running: Sequence[Job], now: float, free_slots: int) -> list[Job]:
        if not self.preemptive or not running or not len(self):
            return []
        waiting = self._smallest_keys(now, len(running) + free_slots)[free_slots:]
        movable = [j for j in running if j.produced_since_admission]
        movable.sort(key=lambda j: (self.key(j, now), j.arrival_s, j.request_id), reverse=True)
        victims = []
        for key, job in zip(waiting, movable):
            if not key < self.key(job, now):
                break
            victims.append(job)
        return victims

    def _smallest_keys(self, now: float, k: int) -> list:
        """The ``k`` smallest keys of the waiting jobs at ``now``, smallest first."""
        if not self.dynamic:
            return [e[0] for e in heapq.nsmallest(k, self._heap)]
        w = self._waiting
        if self.vectorised:
            return sorted(self.key(w, now).tolist())[:k]
        return heapq.nsmallest(k, (self.key(j, now) for j in w.jobs))

