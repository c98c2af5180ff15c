"""Shortest job first by estimated size (paper A: n_hat from audio duration)."""

from __future__ import annotations

from schedlab.policies.base import Job
from schedlab.policies.keyed import KeyedPolicy
from schedlab.registry import ASR, LLM, QUEUE, register


@register("sjf", kind=QUEUE, modalities=(ASR, LLM), paper="A", summary='shortest job first by the estimated output length (audio duration x kappa, else max tokens)')
class SJF(KeyedPolicy):
    """The smallest job-size estimate first. Victim: the running job with the largest size
    (ties: the newest)."""

    name = "sjf"

    def key(self, job: Job, now: float | None) -> float:
        return job.size


@register("sjf-prompt", kind=QUEUE, paper="B", summary='shortest job first by prompt length')
class SJFPrompt(KeyedPolicy):
    """Greedy SJF by prompt length (paper B's baseline); it starves long prompts under load."""

    name = "sjf-prompt"

    def key(self, job: Job, now: float | None) -> float:
        return job.prompt_tokens
