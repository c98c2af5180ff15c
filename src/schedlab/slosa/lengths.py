"""Output-length estimates for the mapper: a running Gaussian per task type (optionally clipped
to a user-given typical range), or the true length perturbed by a relative error."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from schedlab.errors import SchedlabError


@dataclass
class _Moments:
    n: int = 0
    mean: float = 0.0
    m2: float = 0.0

    def add(self, x: float) -> None:  # Welford
        self.n += 1
        d = x - self.mean
        self.mean += d / self.n
        self.m2 += d * (x - self.mean)

    @property
    def sd(self) -> float:
        return math.sqrt(self.m2 / (self.n - 1)) if self.n > 1 else 0.0


@dataclass
class RunningGaussian:
    """Per task type: observed output lengths' running mean and sd; an estimate is a draw from
    that Gaussian, clipped to ``ranges[task]`` when the user gave one, and to at least 1."""

    ranges: dict[str, tuple[float, float]] = field(default_factory=dict)
    _moments: dict[str, _Moments] = field(default_factory=dict)

    def observe(self, task: str, length: float) -> None:
        self._moments.setdefault(task, _Moments()).add(float(length))

    def observe_many(self, tasks, lengths) -> None:
        for task, length in zip(tasks, lengths):
            self.observe(task, length)

    def estimate(self, tasks, rng: np.random.Generator) -> np.ndarray:
        out = np.empty(len(tasks))
        for k, task in enumerate(tasks):
            mom = self._moments.get(task)
            lo, hi = self.ranges.get(task, (1.0, math.inf))
            if mom is None or mom.n == 0:
                if task not in self.ranges:
                    raise SchedlabError(f"no observed output lengths and no typical range for task {task!r}")
                out[k] = rng.uniform(lo, hi)
                continue
            out[k] = np.clip(rng.normal(mom.mean, mom.sd), lo, hi)
        return np.maximum(np.round(out), 1.0)


def perturbed(true_lengths, rel_error: float, rng: np.random.Generator) -> np.ndarray:
    """The true lengths, each off by a uniform relative error in ``[-rel_error, rel_error]``."""
    if rel_error < 0:
        raise SchedlabError(f"relative error must be >= 0, got {rel_error}")
    true = np.asarray(true_lengths, dtype=float)
    return np.maximum(np.round(true * (1.0 + rng.uniform(-rel_error, rel_error, true.size))), 1.0)
