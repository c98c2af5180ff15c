"""Shortest job first by estimated size (paper A: n_hat from audio duration)."""

from __future__ import annotations

import heapq
from schedlab.policies.base import Job, Policy
from schedlab.registry import ASR, LLM, QUEUE, register


@register("sjf", kind=QUEUE, modalities=(ASR, LLM), paper="A", summary='shortest job first by the estimated output length (audio duration x kappa, else max tokens)')
class SJF(Policy):
    """Min-heap on ``(size, arrival_s, request_id)``: O(log n) push and pop.

    Victim: the running job with the largest size (ties: the newest).
    """

    name = "sjf"

    def __init__(self) -> None:
        self._heap: list[tuple[float, float, int, Job]] = []

    @staticmethod
    def key(job: Job) -> float:
        """What the heap orders by: the job-size estimate."""
        return job.size

    def push(self, job: Job) -> None:
        heapq.heappush(self._heap, (self.key(job), job.arrival_s, job.request_id, job))

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
        return (self.key(job), job.arrival_s, job.request_id)


@register("sjf-prompt", kind=QUEUE, paper="B", summary='shortest job first by prompt length')
class SJFPrompt(SJF):
    """Greedy SJF by prompt length (paper B's baseline); it starves long prompts under load."""

    name = "sjf-prompt"

    @staticmethod
    def key(job: Job) -> float:
        return job.prompt_tokens
