"""The linear step-time model the simulator advances its clock by.

``time = intercept + sum(coef[f] * f)`` over the features of
:data:`schedlab.contracts.STEP_FEATURES`. Coefficients come from the fit stage (OLS on a
profile table) and, for paper figures, from its calibration. ``frontend_s`` is a fixed
per-request delay outside the engine loop (HTTP, audio decoding, feature extraction) before a
request reaches the scheduler, and ``output_s`` one after it, from each token the engine makes
to the client that receives it (first token and finish move by it; gaps do not; a client's
in-flight cap frees its slot when the engine finishes); both are 0 unless fitted.

``frontend_service_s`` makes the front end a queue: one API process that serves requests in
arrival order, each holding it for that many seconds (Whisper's feature extractor pads every
clip to a 30 s window, so its work per request does not depend on the clip), before the fixed
delay. A request reaches the scheduler at :meth:`StepTimeModel.visible_times`; with no service
time that is its arrival plus ``frontend_s``, as before.

Three optional terms (off by default, leaving every other model unchanged): ``prefill_pairs``
seconds per prefill attention (query, key) pair, for chunked prefills over a context; the
GEMM tile staircase: with ``tile`` > 0, ``tile_tokens`` seconds per token of the batch padded
to whole tiles, ``tile * ceil((n_prefill_tokens + n_decode) / tile)`` (the linear layers); and
the roofline's knee: with ``knee`` > 0, ``knee_tokens`` seconds per batch token beyond the
first ``knee``, ``max(0, n_prefill_tokens + n_decode - knee)``. A small model on a CPU reads
its weights in the same time for one token or a few (the step is flat), then pays per token.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from schedlab.contracts import STEP_FEATURES
from schedlab.latency.roofline import beyond_knee, padded_tokens

#: Per-admission costs bound by arithmetic (the encoder pass, a new request's prefill).
COMPUTE_TERMS = ("n_encoder", "n_prefill_tokens")
#: The optional terms (prefill attention, tile staircase, tokens past the knee), compute-bound too.
OPTIONAL_TERMS = ("prefill_pairs", "tile_tokens", "knee_tokens")
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
    output_s: float = 0.0
    prefill_pairs: float = 0.0
    tile_tokens: float = 0.0
    tile: int = 0
    knee_tokens: float = 0.0
    knee: int = 0
    frontend_service_s: float = 0.0

    def visible_times(self, arrival: np.ndarray) -> np.ndarray:
        """When each request (``arrival``, sorted) reaches the scheduler: through the front-end
        station (Lindley's recursion, first come first served), then the fixed delay."""
        arrival = np.asarray(arrival, dtype=float)
        if not self.frontend_service_s:
            return arrival + self.frontend_s
        from schedlab.engine.kernels import station_departures

        return station_departures(arrival, float(self.frontend_service_s)) + self.frontend_s

    def __call__(self, n_encoder, n_prefill_tokens, n_decode, ctx_tokens, prefill_pairs=0):
        """Step time in seconds; accepts scalars or numpy arrays."""
        t = (
            self.intercept
            + self.n_encoder * n_encoder
            + self.n_prefill_tokens * n_prefill_tokens
            + self.n_decode * n_decode
            + self.ctx_tokens * ctx_tokens
        )
        if self.prefill_pairs:
            t = t + self.prefill_pairs * prefill_pairs
        if self.tile:
            t = t + self.tile_tokens * padded_tokens(n_prefill_tokens + n_decode, self.tile)
        if self.knee:
            t = t + self.knee_tokens * beyond_knee(n_prefill_tokens + n_decode, self.knee)
        return t

    @property
    def coefficients(self) -> dict[str, float]:
        return {"intercept": self.intercept, **{f: getattr(self, f) for f in STEP_FEATURES}}

    def with_host_cost(self, fixed_s: float, per_request_s: float) -> "StepTimeModel":
        """This model with the scheduler's own work per step added (measured:
        :mod:`schedlab.fit.scheduler_cost`): ``fixed_s`` on every step and ``per_request_s`` on
        each decode, the requests a step mostly holds (its few prefills are left out)."""
        return replace(self, intercept=self.intercept + fixed_s, n_decode=self.n_decode + per_request_s)

    def scaled(
        self, compute: float = 1.0, memory: float = 1.0, frontend_s: float | None = None,
        frontend_service_s: float | None = None, **meta
    ) -> "StepTimeModel":
        """Compute-bound terms times ``compute`` and memory-bound terms times ``memory`` (inverse
        achieved efficiencies); the front end's delay and service time are replaced when given,
        kept otherwise."""
        factor = {**dict.fromkeys(COMPUTE_TERMS + OPTIONAL_TERMS, compute), **dict.fromkeys(MEMORY_TERMS, memory)}
        terms = {**self.coefficients, **{t: getattr(self, t) for t in OPTIONAL_TERMS}}
        return StepTimeModel(
            **{k: v * factor[k] for k, v in terms.items()},
            tile=self.tile,
            knee=self.knee,
            frontend_s=self.frontend_s if frontend_s is None else frontend_s,
            output_s=self.output_s,
            frontend_service_s=self.frontend_service_s if frontend_service_s is None else frontend_service_s,
            meta={**self.meta, **meta},
        )
