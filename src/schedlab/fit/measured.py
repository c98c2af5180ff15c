"""Step costs of a catalogue GPU from the passes measured on the shipped GPUs.

The profiles shipped under ``assets/profiles/<gpu>/`` time a model's encoder passes, prefills
and decode steps on real GPUs (:mod:`schedlab.fit.shipped`). Per model and pass kind
(``encoder``, ``prefill``, ``decode``), a pass of ``flops`` FLOPs and ``bytes`` bytes (the
roofline's count of its work, :func:`schedlab.latency.roofline.work`) takes, on a GPU of peak
FLOP/s ``F`` and bandwidth ``B``::

    time = (floor + flops / (F * compute) + bytes / (B * bandwidth)) * ratio(batch, length)

``compute`` and ``bandwidth`` are the fractions of the peaks the pass kind achieves on its
marginal work; ``floor`` is the time a pass of that kind takes whatever its work (kernel
latencies and synchronisation), which does not scale with the peaks. The three are fitted by
least squares on relative errors over the kind's passes on every shipped GPU at once, each pass
with its own GPU's peaks, so the GPUs' different bandwidths tell the floor from the bytes'
time. Each fraction is at most 1 (no kernel runs above the peak), or its work costs nothing: it
is hidden under the rest over the measured passes (a prefill's weight reads under its FLOPs). ``ratio`` is what that line
leaves at each measured shape (measured over fitted time, the geometric mean over the GPUs
that measured it), linear in log batch and log length between measured shapes and the nearest
measured shape's outside them. A catalogue GPU then gets each pass's cost from its own peaks.

Rules where nothing was measured:

- **A model not measured** takes the measured model of its family (encoder-decoder or
  decoder-only) nearest in decoder parameters: its fractions and ratios, and its floors scaled by
  the ratio of layers (decoder layers; the encoder's by encoder layers).
- **A pass kind not measured** for a model (Whisper's 4-token prefills) takes the floor and
  bandwidth fraction of its decode steps and the compute fraction of its compute-bound kind
  (prefill, else encoder), with no shape ratio.
- **A mixed step** (prefill tokens beside decodes: one decoder pass) is priced two ways: its
  prefill part's cost plus what its decodes add beyond a decode step's floor and weight read,
  and its decode part's cost plus what its prefill adds beyond a prefill's floor and weight
  read; it costs their mean weighted by the two parts' shares of its tokens, so a step of
  one kind with a few tokens of the other costs about what that kind's measured passes cost.
  An encoder pass is a pass of its own, added.
- **Tensor parallelism** (``<n>x<name>``: the catalogue gives ``n`` times one device's peaks,
  :func:`schedlab.latency.catalogue.hardware`): each device's share of the work at one device's
  peak, at the fractions measured on one GPU; the floor is paid once (the devices run each pass
  in step). No communication term: an all-reduce's cost is left to the serving factors a
  calibration fits.

:func:`transfer_errors` checks the transfer where it can be checked: each shipped GPU's
passes priced from the other's alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pandas as pd
from scipy.interpolate import LinearNDInterpolator, NearestNDInterpolator
from scipy.optimize import lsq_linear

from schedlab.contracts import PREFILL_PAIRS, PROFILE_COLUMNS, STEP_FEATURES
from schedlab.errors import SchedlabError
from schedlab.fit.chunk_times import AT_PEAK
from schedlab.fit.efficiency import achieved
from schedlab.fit.shipped import read_shipped
from schedlab.latency import roofline
from schedlab.latency.catalogue import (
    FP16_BYTES,
    Hardware,
    ModelArch,
    hardware,
    model_arch,
    shipped_hardware,
    shipped_models,
)
from schedlab.latency.predictor_profile import BATCHES, LENGTHS, predictor_table

#: The pass kinds a shipped table measures.
KINDS = ("encoder", "prefill", "decode")
#: Pass kinds bound by arithmetic, whose compute fraction a kind not measured borrows, in order.
COMPUTE_KINDS = ("prefill", "encoder")


def measured_passes(gpus=None) -> pd.DataFrame:
    """Every shipped pass of every model on ``gpus`` (default: every shipped GPU), as rows of
    :func:`schedlab.fit.efficiency.achieved` (the achieved fractions of the GPU's peak
    FLOP/s and bandwidth, ``compute_eff`` and ``bw_eff``, per pass kind and batch shape)."""
    return _passes(tuple(shipped_hardware() if gpus is None else gpus)).copy()


@lru_cache(maxsize=None)
def _passes(gpus: tuple[str, ...]) -> pd.DataFrame:
    tables = [achieved(read_shipped(g, m), hardware(g), model_arch(m)) for g in gpus for m in shipped_models(g)]
    return pd.concat(tables, ignore_index=True)


def _shape(batch, length) -> np.ndarray:
    """Shapes as interpolation coordinates: log batch and log length (a length of 0, an
    encoder pass's, stays 0)."""
    return np.column_stack([np.log(np.maximum(batch, 1.0)), np.log(np.maximum(length, 1.0))])


@dataclass(frozen=True, eq=False)
class PassCost:
    """One model's cost of one pass kind, fitted on measured passes (module docstring):
    ``floor_s`` seconds, and the factors on the roofline's compute and memory times at the
    peak (``compute_factor`` = 1 / the achieved fraction of peak FLOP/s; 0: hidden under the
    rest), with the shape ratios' coordinates and logarithms."""

    floor_s: float
    compute_factor: float
    memory_factor: float
    shapes: np.ndarray
    log_ratio: np.ndarray
    gpus: tuple[str, ...]
    passes: int

    @property
    def compute(self) -> float:
        """The achieved fraction of peak FLOP/s on marginal FLOPs (inf: hidden)."""
        return 1 / self.compute_factor if self.compute_factor else np.inf

    @property
    def bandwidth(self) -> float:
        """The achieved fraction of peak bandwidth on marginal bytes (inf: hidden)."""
        return 1 / self.memory_factor if self.memory_factor else np.inf

    def line(self, hw: Hardware, flops, nbytes, floor_scale: float = 1.0) -> np.ndarray:
        """Seconds of passes of ``flops`` and ``nbytes`` on ``hw`` before the shape ratio."""
        return (self.floor_s * floor_scale + self.compute_factor * np.asarray(flops, float) / hw.peak_flops
                + self.memory_factor * np.asarray(nbytes, float) / hw.mem_bw)

    def ratio(self, batch, length) -> np.ndarray:
        """The shape ratio at each (batch, length): interpolated between measured shapes, the
        nearest measured one's outside them; 1 without measured shapes."""
        batch, length = np.broadcast_arrays(np.asarray(batch, float), np.asarray(length, float))
        if not len(self.log_ratio):
            return np.ones(batch.shape)
        return np.exp(_interpolate(self.shapes, self.log_ratio, _shape(batch.ravel(), length.ravel()))).reshape(batch.shape)


def _interpolate(points: np.ndarray, values: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Linear interpolation of ``values`` at ``at``, the nearest point's value outside the
    points' hull; in one dimension when the points vary along one axis only."""
    varying = [k for k in range(points.shape[1]) if np.ptp(points[:, k]) > 0]
    if len(varying) < 2:
        if not varying:
            return np.full(len(at), values.mean())
        k = varying[0]
        order = np.argsort(points[:, k])
        return np.interp(at[:, k], points[order, k], values[order])
    out = LinearNDInterpolator(points, values)(at)
    outside = np.isnan(out)
    if outside.any():
        out[outside] = NearestNDInterpolator(points, values)(at[outside])
    return out


def _relative_line(parts: np.ndarray, time: np.ndarray) -> np.ndarray:
    """Coefficients ``(floor, compute, memory)`` of ``parts`` (columns: the floor's unit, the
    compute time and the memory time at the peak) closest to ``time`` in relative error: the
    floor at least 0, each factor either at least :data:`AT_PEAK` (no kernel runs above the
    peak) or 0 (that work hidden under the rest), whichever of the four fits best."""
    A = parts / time[:, None]
    best = None
    for hidden in ((), (1,), (2,), (1, 2)):
        low = np.array([0.0, AT_PEAK, AT_PEAK])
        high = np.full(3, np.inf)
        low[list(hidden)], high[list(hidden)] = 0.0, 1e-12  # lsq_linear needs low < high
        fit = lsq_linear(A, np.ones(len(time)), bounds=(low, high))
        if best is None or fit.cost < best.cost:
            best = fit
    x = best.x.copy()
    x[x < AT_PEAK * 1e-6] = 0.0
    x[0] = best.x[0]
    return x


def fit_pass_cost(rows: pd.DataFrame) -> PassCost:
    """The :class:`PassCost` of ``rows`` (rows of :func:`measured_passes` of one model and
    pass kind, on one GPU or several): floor and factors by :func:`_relative_line` (each pass
    weighs the same), then the shape ratios."""
    if len(rows) < 3:
        raise SchedlabError(f"{len(rows)} measured passes: too few to fit a floor and two fractions")
    peaks = pd.DataFrame([hardware(h) for h in rows["hardware"]], index=rows.index)
    time = rows["time_s"].to_numpy(float)
    scale = float(np.median(time))  # the floor's column in the units of a typical pass
    parts = np.column_stack([np.full(len(rows), scale), rows["flops"] / peaks["peak_flops"], rows["bytes"] / peaks["mem_bw"]])
    x = _relative_line(parts, time)
    per_shape = pd.DataFrame({"batch": rows["batch"], "length": rows["length"], "r": np.log(time / (parts @ x))}).groupby(
        ["batch", "length"])["r"].mean()
    shapes = _shape(per_shape.index.get_level_values("batch").to_numpy(float),
                    per_shape.index.get_level_values("length").to_numpy(float))
    return PassCost(float(x[0] * scale), float(x[1]), float(x[2]), shapes, per_shape.to_numpy(),
                    tuple(sorted(rows["hardware"].unique())), len(rows))


def _family(arch: ModelArch) -> str:
    return "encoder-decoder" if arch.encoder_params else "decoder-only"


def measured_model(model: str, gpus=None) -> str:
    """The measured model whose passes price ``model``: itself when measured on ``gpus``
    (default: every shipped GPU), else the measured model of its family nearest in decoder
    parameters (by their ratio)."""
    gpus = shipped_hardware() if gpus is None else list(gpus)
    measured = sorted({m for g in gpus for m in shipped_models(g)})
    if model in measured:
        return model
    arch = model_arch(model)
    same = [m for m in measured if _family(model_arch(m)) == _family(arch)]
    if not same:
        raise SchedlabError(f"no {_family(arch)} model is measured on {', '.join(gpus)} to price {model!r}")
    return min(same, key=lambda m: abs(np.log(model_arch(m).decoder_params / arch.decoder_params)))


@dataclass(frozen=True, eq=False)
class MeasuredCosts:
    """The pass costs that price ``model``: the :class:`PassCost` of each kind measured for
    ``measured`` (the model itself or the nearest measured one), floors scaled per kind."""

    model: str
    measured: str
    costs: dict
    floor_scale: dict

    def kind(self, name: str) -> tuple[PassCost, float]:
        """The cost of pass kind ``name`` and its floor's scale; a kind not measured borrows
        (module docstring)."""
        if name in self.costs:
            return self.costs[name], self.floor_scale[name]
        if "decode" not in self.costs:
            raise SchedlabError(f"{self.measured}: no decode steps measured to price its {name} passes")
        decode = self.costs["decode"]
        compute = next((self.costs[k] for k in COMPUTE_KINDS if k in self.costs), decode)
        borrowed = PassCost(decode.floor_s, compute.compute_factor, decode.memory_factor, np.empty((0, 2)), np.empty(0),
                            decode.gpus, 0)
        return borrowed, self.floor_scale["decode"]

    def pass_time(self, name: str, hw: Hardware, flops, nbytes, batch, length) -> np.ndarray:
        """Seconds of passes of kind ``name`` on ``hw``, shape ratio included."""
        cost, scale = self.kind(name)
        return cost.line(hw, flops, nbytes, scale) * cost.ratio(batch, length)

    def _where(self, present: np.ndarray, name: str, hw: Hardware, flops, nbytes, batch, length) -> np.ndarray:
        """:meth:`pass_time` where a step holds a pass of kind ``name`` (``present``), 0 elsewhere;
        a kind no step holds is not priced (a decoder-only model has no encoder to price)."""
        if not present.any():
            return np.zeros(present.shape)
        return np.where(present, self.pass_time(name, hw, flops, nbytes, batch, length), 0.0)

    def marginal(self, name: str, hw: Hardware, flops, nbytes) -> np.ndarray:
        """What work of ``flops`` and ``nbytes`` adds to a pass of kind ``name`` beyond its
        floor (no shape ratio): the part a mixed step's other part rides on."""
        cost, _ = self.kind(name)
        return cost.line(hw, flops, nbytes, 0.0)

    def step_time(self, hw: Hardware, arch: ModelArch, n_encoder, n_prefill_tokens, n_decode, ctx_tokens, *,
                  n_prefill_seqs=0, prefill_pairs=None):
        """Seconds of one step on ``hw`` (counts as :func:`schedlab.latency.roofline.step_time`;
        scalars or numpy arrays, broadcast): its encoder pass plus its decoder pass, a mixed
        decoder pass by the rule of the module docstring."""
        n_enc, n_pre, n_dec, ctx = np.broadcast_arrays(*(np.asarray(v, float) for v in
                                                         (n_encoder, n_prefill_tokens, n_decode, ctx_tokens)))
        seqs = np.broadcast_to(np.maximum(np.asarray(n_prefill_seqs, float), 1.0), n_pre.shape)
        pairs = n_pre**2 / (2 * seqs) if prefill_pairs is None else np.broadcast_to(np.asarray(prefill_pairs, float), n_pre.shape)
        enc = roofline.work(arch, n_enc, 0, 0, 0)
        pre = roofline.work(arch, 0, n_pre, 0, 0, n_prefill_seqs=seqs, prefill_pairs=pairs)
        dec = roofline.work(arch, 0, 0, n_dec, ctx)
        weights = arch.decoder_params * FP16_BYTES
        t_enc = self._where(n_enc > 0, "encoder", hw, enc["enc_flops"], enc["enc_bytes"], n_enc, 0)
        t_pre = self._where(n_pre > 0, "prefill", hw, pre["dec_flops"], pre["dec_bytes"], seqs, n_pre / seqs)
        t_dec = self._where(n_dec > 0, "decode", hw, dec["dec_flops"], dec["dec_bytes"], n_dec, ctx / np.maximum(n_dec, 1))
        mixed = (n_pre > 0) & (n_dec > 0)
        if mixed.any():
            ride_dec = self.marginal("decode", hw, dec["dec_flops"], dec["dec_bytes"] - weights)
            ride_pre = self.marginal("prefill", hw, pre["dec_flops"], pre["dec_bytes"] - weights)
            share = n_pre / np.maximum(n_pre + n_dec, 1.0)
            t_pre = np.where(mixed, share * (t_pre + ride_dec) + (1 - share) * (t_dec + ride_pre), t_pre)
            t_dec = np.where(mixed, 0.0, t_dec)
        total = t_enc + t_pre + t_dec
        return float(total) if total.ndim == 0 else total


def _layers(arch: ModelArch, kind: str) -> int:
    return arch.encoder_layers if kind == "encoder" else arch.decoder_layers


@lru_cache(maxsize=None)
def _costs(measured: str, gpus: tuple[str, ...]) -> dict:
    passes = _passes(gpus)
    rows = passes[passes["model"] == measured]
    return {k: fit_pass_cost(g) for k, g in rows.groupby("phase") if k in KINDS}


def measured_costs(model: str, gpus=None) -> MeasuredCosts:
    """The :class:`MeasuredCosts` of ``model`` from the passes shipped for ``gpus`` (default:
    every shipped GPU)."""
    gpus = tuple(shipped_hardware() if gpus is None else gpus)
    measured = measured_model(model, gpus)
    costs = _costs(measured, gpus)
    arch, ref = model_arch(model), model_arch(measured)
    scale = {k: (_layers(arch, k) / _layers(ref, k) if _layers(ref, k) else 1.0) for k in KINDS}
    return MeasuredCosts(model, measured, costs, scale)


def step_time(hw: Hardware, arch: ModelArch, n_encoder, n_prefill_tokens, n_decode, ctx_tokens, *,
              n_prefill_seqs=0, prefill_pairs=None, gpus=None):
    """Seconds of one step of ``arch`` on ``hw`` from the passes measured on ``gpus`` (default:
    every shipped GPU); arguments as :func:`schedlab.latency.roofline.step_time`."""
    return measured_costs(arch.name, gpus).step_time(hw, arch, n_encoder, n_prefill_tokens, n_decode, ctx_tokens,
                                                     n_prefill_seqs=n_prefill_seqs, prefill_pairs=prefill_pairs)


def profile(hw: Hardware, arch: ModelArch, grid: pd.DataFrame | None = None) -> pd.DataFrame:
    """A profile table (source ``measured``) over ``grid`` (default
    :func:`schedlab.latency.roofline.default_grid`), priced by :func:`step_time`; a grid with a
    ``prefill_pairs`` column keeps it, as :func:`schedlab.latency.roofline.profile` does."""
    grid = roofline.default_grid() if grid is None else grid
    pairs = grid["prefill_pairs"].to_numpy(float) if "prefill_pairs" in grid else None
    seqs = grid["n_prefill_seqs"].to_numpy(float) if "n_prefill_seqs" in grid else np.zeros(len(grid))
    if pairs is not None and "n_prefill_seqs" not in grid:
        seqs = np.where(grid["n_prefill_tokens"] > 0, 1.0, 0.0)  # a chunk of one prompt over its context
    times = step_time(hw, arch, *(grid[f].to_numpy(float) for f in STEP_FEATURES), n_prefill_seqs=seqs,
                      prefill_pairs=pairs)
    extra = ["prefill_pairs"] if pairs is not None else []
    out = grid[[*STEP_FEATURES, *extra]].astype("int64").reset_index(drop=True)
    out.insert(0, "source", "measured")
    out.insert(1, "hardware", hw.name)
    out.insert(2, "model", arch.name)
    out["time_s"] = np.asarray(times, float)
    return out[[*PROFILE_COLUMNS, *extra]]


def phase_times(hw: Hardware, arch: ModelArch, batch, length) -> tuple[np.ndarray, np.ndarray]:
    """(prefill, decode step) seconds of ``batch`` sequences of ``length`` tokens each, as
    :func:`schedlab.latency.predictor_profile.roofline_phases` gives the roofline's."""
    batch, length = np.asarray(batch, float), np.asarray(length, float)
    prefill = step_time(hw, arch, 0, batch * length, 0, 0, n_prefill_seqs=batch)
    return prefill, step_time(hw, arch, 0, 0, batch, batch * length)


# -- the transfer between the shipped GPUs ---------------------------------------------------

#: The rules :func:`transfer_errors` compares: this module's, and each measured pass's achieved
#: fraction of the roofline carried as it is to the other GPU at the same shape.
RULES = ("floor and fractions", "fraction of the roofline")


def predictor_profile(hw: Hardware, arch: ModelArch, batches=BATCHES, lengths=LENGTHS) -> pd.DataFrame:
    """Paper D's latency predictor profile (:mod:`schedlab.latency.predictor_profile`): times
    for every grid point and phase from the passes measured on the shipped GPUs, on ``hw``."""
    b, n = (np.asarray(v, dtype=float).ravel() for v in np.meshgrid(batches, lengths, indexing="ij"))
    pre, dec = phase_times(hw, arch, b, n)
    rows = [row for k in range(len(b)) for row in (("prefill", int(b[k]), int(n[k]), float(pre[k])),
                                                   ("decode", int(b[k]), int(n[k]), float(dec[k])))]
    return predictor_table(rows, "measured", hw.name, arch.name)


def transfer_errors(gpus=None) -> pd.DataFrame:
    """Each shipped GPU's measured passes priced from another's alone (every ordered pair of
    ``gpus``, default every shipped GPU), under both :data:`RULES`: one row per (rule, source,
    target, model, pass kind, batch, length) with the ``measured_s`` and ``predicted_s`` times and
    ``error`` (predicted over measured, minus 1). ``floor and fractions`` is :func:`step_time`
    with costs fitted on the source GPU alone; ``fraction of the roofline`` (the pass's measured
    time times the ratio of the two GPUs' roofline times) can price only shapes both measured."""
    gpus = list(shipped_hardware() if gpus is None else gpus)
    passes = measured_passes(gpus)
    key = ["model", "phase", "batch", "length"]
    out = []
    for source in gpus:
        src = passes[passes["hardware"] == source].set_index(key)
        for target in (g for g in gpus if g != source):
            rows = passes[passes["hardware"] == target]
            for model, g in rows.groupby("model"):
                prefill = (g["phase"] == "prefill").to_numpy()
                predicted = measured_costs(model, (source,)).step_time(
                    hardware(target), model_arch(model), *(g[f].to_numpy(float) for f in STEP_FEATURES),
                    n_prefill_seqs=np.where(prefill, g["batch"], 0), prefill_pairs=g[PREFILL_PAIRS].to_numpy(float))
                out.append(g[key + ["time_s"]].assign(predicted_s=predicted, rule=RULES[0], source=source, target=target))
            both = rows.merge(src[["time_s", "roofline_s"]].reset_index(), on=key, suffixes=("", "_source"))
            out.append(both[key + ["time_s"]].assign(
                predicted_s=both["time_s_source"] * both["roofline_s"] / both["roofline_s_source"], rule=RULES[1],
                source=source, target=target))
    table = pd.concat(out, ignore_index=True).rename(columns={"time_s": "measured_s"})
    table["error"] = table["predicted_s"] / table["measured_s"] - 1
    return table[["rule", "source", "target", *key, "measured_s", "predicted_s", "error"]]


def transfer_summary(errors: pd.DataFrame) -> pd.DataFrame:
    """Per rule and pass kind, over every transfer of :func:`transfer_errors`: the passes
    priced, the median, 90th percentile and largest absolute error, and the median error
    (its sign: priced too fast below 0)."""
    def one(g: pd.DataFrame) -> pd.Series:
        err = g["error"].abs()
        return pd.Series({"passes": len(g), "median |error|": err.median(), "p90 |error|": err.quantile(0.9),
                          "max |error|": err.max(), "median error": g["error"].median()})

    return errors.groupby(["rule", "phase"]).apply(one, include_groups=False).reset_index()
