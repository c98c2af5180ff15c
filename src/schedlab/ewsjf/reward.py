"""The strategic reward of one trial: ``R = l1*C + l2*L - l3*S - l4*U``.

Over the requests admitted during the trial:

- ``C`` (compactness, 0..1): ``1 - sum_q share_q * min(1, cv_q)``, where ``cv_q`` is the
  coefficient of variation of the prompt lengths admitted from queue ``q``: homogeneous
  queues score near 1;
- ``L`` (load balance, 0..1): the entropy of the admissions' spread over queues divided by
  its maximum ``log(k)`` (1 with a single queue);
- ``S`` (proliferation, >= 0): queues at the trial's end plus bubble queues it created, over
  :data:`QUEUE_CAP`;
- ``U`` (user-experience latency, > 0): the mean slowdown ``1 + W / C_prefill(b)`` (``W``:
  a request's wait before admission, in units of its own prefill time, the score's ``cs``)
  over the slowdown of the means, ``1 + mean(W) / mean(C_prefill)``. The ratio is 1 without
  waiting and for an order blind to length about ``mean(1/C) * mean(C)``; it falls when short
  prompts wait less. Dividing by the trial's own mean wait cancels most of the load level,
  which varies from trial to trial whatever the parameters.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Hashable

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
        self.queues: dict[Hashable, list[float]] = {}
        self.n = 0
        self.wait = self.prefill = self.slowdown = 0.0

    def admitted(self, queue: Hashable, b: int, wait_s: float, prefill_s: float) -> None:
        s = self.queues.get(queue)
        if s is None:
            s = self.queues[queue] = [0.0, 0.0, 0.0]
        s[0] += 1
        s[1] += b
        s[2] += b * b
        self.n += 1
        self.wait += wait_s
        self.prefill += prefill_s
        self.slowdown += 1.0 + wait_s / prefill_s

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
            "U": (self.slowdown / n) / (1.0 + self.wait / self.prefill),
            "n": n,
        }


def reward(terms: dict[str, float], lambdas: Lambdas = Lambdas()) -> float:
    return (
        lambdas.compactness * terms["C"]
        + lambdas.balance * terms["L"]
        - lambdas.proliferation * terms["S"]
        - lambdas.latency * terms["U"]
    )
