"""Earliest deadline first, as a schedlab queue policy in a package of its own.

Each request's deadline is its arrival plus a time budget for its expected output: the job-size
estimate (paper A's tokens from audio duration, or the requested output length) times
``seconds_per_token``. The waiting request with the earliest deadline is admitted first; under
memory pressure the running request with the latest deadline is preempted. Short requests get
near deadlines, as under SJF, but a long request's deadline does not move, so it is served once
the short ones that arrived after it would have to wait past it: it cannot starve.
"""

from __future__ import annotations

import heapq

from schedlab.policies import Job, Policy
from schedlab.registry import ASR, LLM, QUEUE, register


@register("edf", kind=QUEUE, modalities=(ASR, LLM),
          summary="earliest deadline first: arrival plus 50 ms per expected output token")
class EDF(Policy):
    name = "edf"

    def __init__(self, seconds_per_token: float = 0.05) -> None:
        self.seconds_per_token = seconds_per_token
        self._heap: list[tuple[float, float, int, Job]] = []

    def deadline(self, job: Job) -> float:
        return job.arrival_s + self.seconds_per_token * job.size

    def push(self, job: Job) -> None:
        heapq.heappush(self._heap, (self.deadline(job), job.arrival_s, job.request_id, job))

    def peek(self, now: float) -> Job:
        return self._heap[0][3]

    def pop(self, now: float) -> Job:
        return heapq.heappop(self._heap)[3]

    def remove(self, job: Job) -> None:
        self._heap = [e for e in self._heap if e[3] is not job]
        heapq.heapify(self._heap)

    def __iter__(self):
        return (e[3] for e in self._heap)

    def __len__(self) -> int:
        return len(self._heap)

    def victim_key(self, job: Job, now: float) -> tuple:
        return (self.deadline(job), job.arrival_s, job.request_id)
