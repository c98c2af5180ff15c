"""An unordered waiting set whose jobs' arrival, size and id sit in numpy arrays, and the base
of policies that pick by an arg-min over the whole set (HRRN, the adaptive policy)."""

from __future__ import annotations

from abc import abstractmethod

import numpy as np

from schedlab.policies.base import Job, Policy


class WaitingArrays:
    """Jobs in slots ``0..n-1``; removal moves the last slot into the gap (O(1))."""

    def __init__(self, capacity: int = 1024) -> None:
        self._arrival = np.empty(capacity)
        self._size = np.empty(capacity)
        self._rid = np.empty(capacity, dtype=np.int64)
        self.jobs: list[Job] = []

    @property
    def arrival(self) -> np.ndarray:
        return self._arrival[:len(self.jobs)]

    @property
    def size(self) -> np.ndarray:
        return self._size[:len(self.jobs)]

    def push(self, job: Job) -> None:
        n = len(self.jobs)
        if n == len(self._arrival):
            for name in ("_arrival", "_size", "_rid"):
                old = getattr(self, name)
                grown = np.empty(2 * n, dtype=old.dtype)
                grown[:n] = old
                setattr(self, name, grown)
        self._arrival[n] = job.arrival_s
        self._size[n] = job.size
        self._rid[n] = job.request_id
        self.jobs.append(job)

    def best(self, key: np.ndarray) -> int:
        """Slot of the smallest ``key`` (one value per slot); ties go to the earliest
        arrival, then the lowest id."""
        ties = np.flatnonzero(key == key.min())
        if len(ties) == 1:
            return int(ties[0])
        return int(ties[np.lexsort((self._rid[ties], self._arrival[ties]))[0]])

    def take(self, i: int) -> Job:
        """Remove and return the job at slot ``i``."""
        last = len(self.jobs) - 1
        job = self.jobs[i]
        self._arrival[i] = self._arrival[last]
        self._size[i] = self._size[last]
        self._rid[i] = self._rid[last]
        self.jobs[i] = self.jobs[last]
        self.jobs.pop()
        return job

    def discard(self, job: Job) -> None:
        self.take(next(i for i, j in enumerate(self.jobs) if j is job))

    def __iter__(self):
        return iter(list(self.jobs))

    def __len__(self) -> int:
        return len(self.jobs)


class ArgminPolicy(Policy):
    """A policy that admits the job of :meth:`_best`, an arg-min over its whole waiting set."""

    def __init__(self, capacity: int = 1024) -> None:
        self._waiting = WaitingArrays(capacity)

    @abstractmethod
    def _best(self, now: float) -> int:
        """Slot of the next job at ``now``."""

    def push(self, job: Job) -> None:
        self._waiting.push(job)

    def peek(self, now: float) -> Job:
        return self._waiting.jobs[self._best(now)]

    def pop(self, now: float) -> Job:
        return self._waiting.take(self._best(now))

    def remove(self, job: Job) -> None:
        self._waiting.discard(job)

    def __iter__(self):
        return iter(self._waiting)

    def __len__(self) -> int:
        return len(self._waiting)
