"""An unordered waiting set whose jobs' arrival, size, id and prompt length sit in numpy arrays:
the store of policies whose order changes while jobs wait (HRRN, the adaptive policy), which
pick by an arg-min over the whole set."""

from __future__ import annotations

import numpy as np

from schedlab.policies.base import Job


class WaitingArrays:
    """Jobs in slots ``0..n-1``; removal moves the last slot into the gap (O(1)). The columns
    are named as :class:`Job`'s fields, so a key written with arithmetic on a job's fields
    computes every waiting job's key at once when given this set."""

    def __init__(self, capacity: int = 1024) -> None:
        self._arrival = np.empty(capacity)
        self._size = np.empty(capacity)
        self._rid = np.empty(capacity, dtype=np.int64)
        self._prompt = np.empty(capacity, dtype=np.int64)
        self.jobs: list[Job] = []

    @property
    def arrival_s(self) -> np.ndarray:
        return self._arrival[:len(self.jobs)]

    @property
    def size(self) -> np.ndarray:
        return self._size[:len(self.jobs)]

    @property
    def request_id(self) -> np.ndarray:
        return self._rid[:len(self.jobs)]

    @property
    def prompt_tokens(self) -> np.ndarray:
        return self._prompt[:len(self.jobs)]

    def push(self, job: Job) -> None:
        n = len(self.jobs)
        if n == len(self._arrival):
            for name in ("_arrival", "_size", "_rid", "_prompt"):
                old = getattr(self, name)
                grown = np.empty(2 * n, dtype=old.dtype)
                grown[:n] = old
                setattr(self, name, grown)
        self._arrival[n] = job.arrival_s
        self._size[n] = job.size
        self._rid[n] = job.request_id
        self._prompt[n] = job.prompt_tokens
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
        self._prompt[i] = self._prompt[last]
        self.jobs[i] = self.jobs[last]
        self.jobs.pop()
        return job

    def slot(self, job: Job) -> int:
        """The slot of ``job`` (by identity)."""
        return next(i for i, j in enumerate(self.jobs) if j is job)

    def __iter__(self):
        return iter(list(self.jobs))

    def __len__(self) -> int:
        return len(self.jobs)
