"""Earliest deadline first, as a schedlab queue policy in a package of its own.

Each request's deadline is its arrival plus a time budget for its expected output: the job-size
estimate (paper A's tokens from audio duration, or the requested output length) times
``seconds_per_token``. The waiting request with the earliest deadline is admitted first; under
memory pressure the running request with the latest deadline is preempted. Short requests get
near deadlines, as under SJF, but a long request's deadline does not move, so it is served once
the short ones that arrived after it would have to wait past it: it cannot starve.
"""

from __future__ import annotations

from schedlab.policies import Job, KeyedPolicy
from schedlab.registry import ASR, LLM, QUEUE, register


@register("edf", kind=QUEUE, modalities=(ASR, LLM),
          summary="earliest deadline first: arrival plus 50 ms per expected output token")
class EDF(KeyedPolicy):
    name = "edf"

    def __init__(self, seconds_per_token: float = 0.05) -> None:
        super().__init__()
        self.seconds_per_token = seconds_per_token

    def key(self, job: Job, now: float | None) -> float:
        return job.arrival_s + self.seconds_per_token * job.size
