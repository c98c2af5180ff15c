"""Paper D's latency predictor: prefill and per-token decode time as bilinear functions of
batch size ``b`` and length ``l``, fitted by OLS with the ``b*l`` interaction term.

``t_p(b, l) = a*b*l + beta*b + g*l + d`` for a batch of ``b`` prompts of ``l`` tokens, and
``tau_d(b, la)`` (same form) for one decode step at accumulated length ``la``. Decoding ``o``
tokens takes ``t_d = sum_{k=1..o} tau_d(b, l + k)``, summed in closed form. Times in seconds.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

import numpy as np
import pandas as pd
import statsmodels.formula.api as smf

from schedlab.errors import SchedlabError
from schedlab.fit.roots import bracketed_root
from schedlab.io import write_json
from schedlab.latency.catalogue import Hardware, ModelArch
from schedlab.latency.predictor_profile import PHASES, PREDICTOR_PROFILE_COLUMNS, roofline_phases

TERMS = ("a", "beta", "g", "d")
#: statsmodels parameter names of the terms, for ``time ~ batch * length``.
_PARAMS = {"a": "batch:length", "beta": "batch", "g": "length", "d": "Intercept"}


@dataclass(frozen=True)
class PhaseModel:
    """``a*b*l + beta*b + g*l + d`` seconds."""

    a: float
    beta: float
    g: float
    d: float

    def __call__(self, b, l):
        return self.a * b * l + self.beta * b + self.g * l + self.d


@dataclass(frozen=True)
class LatencyPredictor:
    prefill: PhaseModel
    decode: PhaseModel
    meta: dict = field(default_factory=dict, compare=False)

    def ttft(self, b, l):
        return self.prefill(b, l)

    def decode_time(self, b, l, o):
        """``sum_{k=1..o} tau_d(b, l + k)`` in closed form; vectorises."""
        m = self.decode
        return o * m(b, l) + (m.a * b + m.g) * o * (o + 1) / 2.0

    def e2e(self, b, l, o):
        return self.ttft(b, l) + self.decode_time(b, l, o)

    def scaled(self, factors: dict[str, float]) -> "LatencyPredictor":
        """Coefficients multiplied by ``factors`` keyed ``prefill.a`` .. ``decode.d`` (others 1)."""
        phases = {
            p: PhaseModel(**{t: getattr(getattr(self, p), t) * factors.get(f"{p}.{t}", 1.0) for t in TERMS})
            for p in PHASES
        }
        return replace(self, **phases)

    def coefficients_ms(self) -> pd.DataFrame:
        """One row per (phase, term), in milliseconds, with the fit's 95% CI when fitted."""
        ci = self.meta.get("ci95_ms", {})
        rows = []
        for p in PHASES:
            for t in TERMS:
                lo, hi = ci.get(f"{p}.{t}", (np.nan, np.nan))
                rows.append((p, t, getattr(getattr(self, p), t) * 1e3, lo, hi))
        return pd.DataFrame(rows, columns=["phase", "term", "ms", "ci_low_ms", "ci_high_ms"])

    def save(self, path) -> None:
        write_json({"prefill": asdict(self.prefill), "decode": asdict(self.decode), "meta": self.meta}, path)

    @classmethod
    def load(cls, path) -> "LatencyPredictor":
        """A predictor file, checked (:func:`schedlab.validation.read_predictor`)."""
        from schedlab.validation import read_predictor

        data = read_predictor(path)
        return cls(PhaseModel(**data["prefill"]), PhaseModel(**data["decode"]), data["meta"])

    def check_positive(self, prompts, outputs, max_batch: int, source) -> None:
        """Refuse, in one line naming ``source``, a predictor whose end-to-end latency is not a
        positive number for some request of ``prompts`` and ``outputs`` tokens in a batch of 1
        to ``max_batch`` (linear in the batch size: its ends decide)."""
        l, o = np.asarray(prompts, float), np.asarray(outputs, float)
        for b in (1, max_batch):
            e2e = self.e2e(b, l, o)
            bad = ~(e2e > 0) | ~np.isfinite(e2e)
            if bad.any():
                i = int(np.argmax(bad))
                raise SchedlabError(f"{source}: predicts {e2e[i]:.3g} s end to end for a request of {l[i]:.0f} prompt "
                                    f"and {o[i]:.0f} output tokens in a batch of {b}: a latency must be positive")


def _ms(a, beta, g, d) -> PhaseModel:
    return PhaseModel(a * 1e-3, beta * 1e-3, g * 1e-3, d * 1e-3)


#: The paper's published fit (Qwen2.5-7B on 2x V100 32 GB, milliseconds): the ``reference`` source.
REFERENCE = LatencyPredictor(
    prefill=_ms(0.1, 5.7, 0.01, 43.67),
    decode=_ms(0.0002, 0.275, 0.00088, 15.85),
    meta={"source": "reference", "hardware": "2xV100-32GB", "model": "qwen2.5-7b"},
)


def fit_predictor(profile: pd.DataFrame, max_length: int | None = 2000) -> LatencyPredictor:
    """OLS ``time ~ batch * length`` per phase on rows with ``length <= max_length`` (the
    paper finds the bilinear form valid below about 2k tokens). ``meta`` keeps R², 95% CIs
    (ms) and the profile's identity."""
    missing = [c for c in PREDICTOR_PROFILE_COLUMNS if c not in profile.columns]
    if missing:
        raise SchedlabError(f"predictor profile lacks columns {', '.join(missing)}")
    rows = profile if max_length is None else profile[profile["length"] <= max_length]
    phases, ci, r2 = {}, {}, {}
    for p in PHASES:
        data = rows[rows["phase"] == p].assign(time_ms=lambda df: df["time_s"] * 1e3)
        if data["batch"].nunique() < 2 or data["length"].nunique() < 2:
            raise SchedlabError(f"{p} rows need at least two batch sizes and two lengths to fit")
        res = smf.ols("time_ms ~ batch * length", data=data).fit()
        conf = res.conf_int()
        phases[p] = _ms(*(float(res.params[_PARAMS[t]]) for t in TERMS))
        ci.update({f"{p}.{t}": [float(conf.loc[_PARAMS[t], 0]), float(conf.loc[_PARAMS[t], 1])] for t in TERMS})
        r2[p] = float(res.rsquared)
    first = profile.iloc[0]
    meta = {
        "source": str(first["source"]),
        "hardware": str(first["hardware"]),
        "model": str(first["model"]),
        "max_length": max_length,
        "r2": r2,
        "ci95_ms": ci,
    }
    return LatencyPredictor(phases["prefill"], phases["decode"], meta)


def predict_profile(predictor: LatencyPredictor, profile: pd.DataFrame) -> np.ndarray:
    """Predicted ``time_s`` of every profile row (prefill: t_p; decode: one step tau_d)."""
    b, n = profile["batch"].to_numpy(float), profile["length"].to_numpy(float)
    return np.where(profile["phase"] == "prefill", predictor.prefill(b, n), predictor.decode(b, n))


#: The prompt length at which :func:`calibrate_roofline` matches the single-request times.
CALIBRATION_LENGTH = 1000


def calibrate_roofline(
    reference: LatencyPredictor, hw: Hardware, arch: ModelArch, length: int = CALIBRATION_LENGTH
) -> dict[str, float]:
    """Roofline efficiencies that reproduce ``reference``'s single-request prefill and decode
    step times at ``length`` tokens: ``compute_eff`` from the (compute-bound) prefill,
    ``bw_eff`` from the (memory-bound) decode step, each within the physical range (0, 1]: no
    kernel runs above the hardware's peak. Where even the peak is too slow for the paper's time
    the efficiency stays at 1 and the roofline misses that target (:func:`roofline_shortfall`
    says by how much): the model fails there, the kernels are not faster."""

    def time(phase: int, **eff) -> float:
        return float(roofline_phases(hw, arch, 1, length, **eff)[phase])

    lo = 1e-4

    def solve(phase: int, name: str, target: float, eff: dict) -> float:
        gap = lambda x: time(phase, **{**eff, name: x}) - target

        def unreachable(slow: float, fast: float) -> str:
            return (f"{arch.name} on {hw.name}: no {name} from {lo:g} to 1 gives the reference's single-request "
                    f"{PHASES[phase]} time of {target * 1e3:.3g} ms at {length} tokens (the roofline gives "
                    f"{(fast + target) * 1e3:.3g} to {(slow + target) * 1e3:.3g} ms there)")

        return 1.0 if gap(1.0) >= 0 else bracketed_root(gap, lo, 1.0, unreachable=unreachable)

    target_p, target_d = float(reference.prefill(1, length)), float(reference.decode(1, length))
    eff = {"compute_eff": 1.0, "bw_eff": 1.0}
    for _ in range(3):  # the two phases barely interact: alternate until both are met
        eff["bw_eff"] = solve(1, "bw_eff", target_d, eff)
        eff["compute_eff"] = solve(0, "compute_eff", target_p, eff)
    return eff


def roofline_shortfall(reference: LatencyPredictor, hw: Hardware, arch: ModelArch, eff: dict[str, float],
                       length: int = CALIBRATION_LENGTH) -> dict[str, float]:
    """Per phase, the roofline's single-request time at ``eff`` (from :func:`calibrate_roofline`)
    over ``reference``'s at ``length`` tokens: 1 where the calibration met the paper's time,
    above 1 where the hardware's peak is too slow for it."""
    ours = roofline_phases(hw, arch, 1, length, **eff)
    paper = (float(reference.prefill(1, length)), float(reference.decode(1, length)))
    return {phase: float(ours[k]) / paper[k] for k, phase in enumerate(PHASES)}
