"""The strategic reward of one trial: ``R = l1*C + l2*L - l3*S - l4*U``.

Over the requests admitted during the trial:

- ``C`` (compactness, 0..1): ``1 - sum_q share_q * min(1, cv_q)``, where ``cv_q`` is the
  coefficient of variation of the prompt lengths admitted from queue ``q``: homogeneous
  queues score near 1;
- ``L`` (load balance, 0..1): the entropy of the admissions' spread over queues divided by
  its maximum ``log(k)`` (1 with a single queue);
- ``S`` (proliferation, >= 0): queues at the trial's end plus bubble queues it created, over
  :data:`QUEUE_CAP`;
- ``U`` (user-experience latency, >= 0): the mean of ``log(1 + W / C_prefill(b))``, each
  request's wait before admission in units of its own prefill time (the score's ``cs``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: Queue count that makes the proliferation term 1.
QUEUE_CAP = 64


@dataclass(frozen=True)
class Lambdas:
    compactness: float = 0.5
    balance: float = 0.25
    proliferation: float = 0.25
    latency: float = 1.0


class TrialStats:
    """Per-queue sums of the prompt lengths admitted in one trial, and the latency term."""

    def __init__(self) -> None:
        self.queues: dict[int, list[float]] = {}
        self.n = 0
        self.latency = 0.0

    def admitted(self, queue_key: int, b: int, norm_wait: float) -> None:
        s = self.queues.get(queue_key)
        if s is None:
            s = self.queues[queue_key] = [0.0, 0.0, 0.0]
        s[0] += 1
        s[1] += b
        s[2] += b * b
        self.n += 1
        self.latency += math.log1p(norm_wait)

    def terms(self, n_queues: int, bubbles: int) -> dict[str, float]:
        """``C``, ``L``, ``S``, ``U`` and the admission count (needs at least one admission)."""
        n = self.n
        compact, entropy = 1.0, 0.0
        for count, total, squares in self.queues.values():
            share = count / n
            mean = total / count
            sd = math.sqrt(max(squares / count - mean * mean, 0.0))
            compact -= share * min(1.0, sd / mean if mean > 0 else 0.0)
            entropy -= share * math.log(share)
        k = len(self.queues)
        return {
            "C": compact,
            "L": entropy / math.log(k) if k > 1 else 1.0,
            "S": (n_queues + bubbles) / QUEUE_CAP,
            "U": self.latency / n,
            "n": n,
        }


def reward(terms: dict[str, float], lambdas: Lambdas = Lambdas()) -> float:
    return (
        lambdas.compactness * terms["C"]
        + lambdas.balance * terms["L"]
        - lambdas.proliferation * terms["S"]
        - lambdas.latency * terms["U"]
    )
