"""The linear step-time model the simulator advances its clock by.

``time = intercept + sum(coef[f] * f)`` over the features of
:data:`schedlab.contracts.STEP_FEATURES`. Coefficients come from the fit stage (OLS on a
profile table) and, for paper figures, from its calibration. ``frontend_s`` is a fixed
per-request delay outside the engine loop (HTTP, audio decoding, feature extraction) before a
request reaches the scheduler; it is 0 unless calibrated.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from schedlab.contracts import STEP_FEATURES
from schedlab.errors import SchedlabError
from schedlab.io import write_json

#: Per-admission costs bound by arithmetic (the encoder pass, a new request's prefill).
COMPUTE_TERMS = ("n_encoder", "n_prefill_tokens")
#: Per-step costs bound by memory traffic (weights, then the KV each decode reads).
MEMORY_TERMS = ("intercept", "n_decode", "ctx_tokens")


@dataclass(frozen=True)
class StepTimeModel:
    intercept: float
    n_encoder: float = 0.0
    n_prefill_tokens: float = 0.0
    n_decode: float = 0.0
    ctx_tokens: float = 0.0
    frontend_s: float = 0.0
    meta: dict = field(default_factory=dict, compare=False)

    def __call__(self, n_encoder, n_prefill_tokens, n_decode, ctx_tokens):
        """Step time in seconds; accepts scalars or numpy arrays."""
        return (
            self.intercept
            + self.n_encoder * n_encoder
            + self.n_prefill_tokens * n_prefill_tokens
            + self.n_decode * n_decode
            + self.ctx_tokens * ctx_tokens
        )

    @property
    def coefficients(self) -> dict[str, float]:
        return {"intercept": self.intercept, **{f: getattr(self, f) for f in STEP_FEATURES}}

    def scaled(
        self, compute: float = 1.0, memory: float = 1.0, frontend_s: float | None = None, **meta
    ) -> "StepTimeModel":
        """Compute-bound terms times ``compute`` and memory-bound terms times ``memory`` (inverse
        achieved efficiencies); the front-end delay is replaced when given, kept otherwise."""
        factor = {**dict.fromkeys(COMPUTE_TERMS, compute), **dict.fromkeys(MEMORY_TERMS, memory)}
        return StepTimeModel(
            **{k: v * factor[k] for k, v in self.coefficients.items()},
            frontend_s=self.frontend_s if frontend_s is None else frontend_s,
            meta={**self.meta, **meta},
        )

    def save(self, path: str | Path) -> None:
        write_json(asdict(self), path)

    @classmethod
    def load(cls, path: str | Path) -> "StepTimeModel":
        p = Path(path)
        if not p.is_file():
            raise SchedlabError(f"step-time coefficients not found: {p}")
        data = json.loads(p.read_text())
        try:
            return cls(**data)
        except TypeError as e:
            raise SchedlabError(f"{p}: not a step-time model ({e})") from None
