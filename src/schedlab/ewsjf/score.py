"""The context-aware score of a queue's head request.

``score = qf * (w_base + w_urg * cs + w_fair * log(b + 1))`` with ``qf = q_index / (b + 1)``
(``q_index``: the queue's 1-based position in length order, ``b``: the head's prompt
length) and ``cs = W / C_prefill(b)``, the head's waiting time in units of its own prefill
time from the fitted step-time model. Each weight is linear in the queue's mean prompt length
``m`` (in thousands of tokens): ``w = a * m + b``, floored at :data:`W_MIN` so that every
weight stays positive. With ``w_urg > 0`` the score grows without bound in ``W``: every
request is eventually served (:func:`wait_to_outrank` gives the bound).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from schedlab.engine.steptime import StepTimeModel

#: Floor of every weight (keeps the score strictly increasing in the waiting time).
W_MIN = 1e-3


@dataclass(frozen=True)
class PrefillModel:
    """``C_prefill(b) = intercept_s + per_token_s * b``: a b-token prompt's prefill step."""

    intercept_s: float
    per_token_s: float

    def __call__(self, b: float) -> float:
        return self.intercept_s + self.per_token_s * b

    @classmethod
    def from_steptime(cls, model: StepTimeModel) -> "PrefillModel":
        """The step-time model's intercept and prefill-token coefficient."""
        return cls(model.intercept, model.n_prefill_tokens)


#: LLaMA-2-13B on 4x A100-80GB at the roofline (the registry policy's default; studies pass
#: the calibrated model).
DEFAULT_PREFILL = PrefillModel(intercept_s=2e-3, per_token_s=2e-5)


@dataclass(frozen=True)
class Weights:
    """Slopes ``a_*`` (per 1,000 tokens of queue mean) and intercepts ``b_*`` of the weights."""

    a_base: float = 0.0
    b_base: float = 1.0
    a_urg: float = 0.0
    b_urg: float = 1.0
    a_fair: float = 0.0
    b_fair: float = 0.1

    def at(self, mean_len: float) -> tuple[float, float, float]:
        """``(w_base, w_urg, w_fair)`` of a queue whose mean prompt length is ``mean_len``."""
        m = mean_len / 1000.0
        return (
            max(self.a_base * m + self.b_base, W_MIN),
            max(self.a_urg * m + self.b_urg, W_MIN),
            max(self.a_fair * m + self.b_fair, W_MIN),
        )


def score(q_index: int, b: int, wait_s: float, w: tuple[float, float, float], prefill: PrefillModel) -> float:
    """The head's score (see the module docstring)."""
    w_base, w_urg, w_fair = w
    return q_index / (b + 1) * (w_base + w_urg * wait_s / prefill(b) + w_fair * math.log(b + 1))


def wait_to_outrank(
    target: float, q_index: int, b: int, w: tuple[float, float, float], prefill: PrefillModel
) -> float:
    """The waiting time after which a head of length ``b`` in queue ``q_index`` scores above
    ``target`` (0 if it already does): the score inverted in ``W``."""
    w_base, w_urg, w_fair = w
    need = target * (b + 1) / q_index - w_base - w_fair * math.log(b + 1)
    return max(0.0, need * prefill(b) / w_urg)
