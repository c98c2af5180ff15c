"""Step-time coefficients from a profile table by OLS (statsmodels)."""

from __future__ import annotations

import warnings
from dataclasses import replace

import numpy as np
import pandas as pd
import statsmodels.api as sm
from scipy.stats import kendalltau

from schedlab.backends.served.quality import replay_flaws
from schedlab.contracts import PREFILL_PAIRS, PROFILE_COLUMNS, STEP_FEATURES
from schedlab.errors import SchedlabError
from schedlab.engine.steptime import OPTIONAL_TERMS, StepTimeModel
from schedlab.latency.roofline import beyond_knee, padded_tokens


def _regressors(profile: pd.DataFrame, tile: int, knee: int) -> pd.DataFrame:
    """The profile's step features, its prefill pairs when present, with ``tile`` > 0 the
    tile-padded token count (``tile_tokens``) and with ``knee`` > 0 the tokens beyond the knee
    (``knee_tokens``)."""
    X = profile[[*STEP_FEATURES, *([PREFILL_PAIRS] if PREFILL_PAIRS in profile else [])]].astype(float)
    tokens = X["n_prefill_tokens"] + X["n_decode"]
    if tile:
        X["tile_tokens"] = padded_tokens(tokens, tile)
    if knee:
        X["knee_tokens"] = beyond_knee(tokens, knee)
    return X


def _ols(profile: pd.DataFrame, tile: int, knee: int):
    """OLS of ``time_s`` on the regressors that vary; a term fitted below 0 is dropped and the
    rest refitted, until every term is a cost. Returns the fit and the dropped terms' first
    fitted values."""
    X = _regressors(profile, tile, knee)
    used = [f for f in X.columns if X[f].nunique() > 1]
    if len(profile) <= len(used) + 1:
        raise SchedlabError(f"profile has {len(profile)} rows: too few to fit {len(used) + 1} coefficients")
    y = profile["time_s"].astype(float)
    dropped: dict[str, float] = {}
    while True:
        with warnings.catch_warnings():  # a flat or degenerate profile: its R² is not a number, said in meta
            warnings.simplefilter("ignore", RuntimeWarning)
            res = sm.OLS(y, sm.add_constant(X[used], has_constant="add")).fit()
            res.rsquared  # noqa: B018 (computed here, where its warning is silenced)
        negative = {f: float(v) for f, v in res.params.items() if v < 0 and f != "const"}
        if not negative:
            return res, dropped
        dropped.update(negative)
        used = [f for f in used if f not in negative]


def fit_steptime(profile: pd.DataFrame, tile: int = 0, knee: int = 0) -> StepTimeModel:
    """``time_s ~ 1 + n_encoder + n_prefill_tokens + n_decode + ctx_tokens``, plus
    ``prefill_pairs`` when the profile has that column, with ``tile`` > 0 the staircase
    ``tile_tokens`` = tokens padded to whole tiles, and with ``knee`` > 0 ``knee_tokens`` =
    tokens beyond the knee (see :class:`StepTimeModel`; :func:`best_knee` chooses one).

    Features that never vary in the profile (e.g. no prefill rows) get coefficient 0. A term
    fitted below 0 (noise about a cost of ~0, or a slope the knee takes over) is left out and
    the others refitted, since a step-time model's terms are costs
    (:class:`schedlab.validation.documents.StepTimeTerms`); ``meta["clipped"]`` keeps the
    fitted values. A negative intercept is set to 0. The model's ``meta`` keeps R², the
    residual standard deviation, 95% CIs and the profile's identity.
    """
    missing = [c for c in PROFILE_COLUMNS if c not in profile.columns]
    if missing:
        raise SchedlabError(f"profile table lacks columns {', '.join(missing)}")
    if tile < 0 or knee < 0:
        raise SchedlabError(f"tile and knee must be >= 0, got tile {tile} and knee {knee}")
    res, clipped = _ols(profile, tile, knee)
    ci = res.conf_int()
    terms = {"intercept": float(res.params["const"]), **{f: float(res.params.get(f, 0.0)) for f in STEP_FEATURES},
             **{f: float(res.params[f]) for f in OPTIONAL_TERMS if f in res.params}}
    if terms["intercept"] < 0:
        clipped["intercept"] = terms["intercept"]
    first = profile.iloc[0]
    return StepTimeModel(
        **{k: max(v, 0.0) for k, v in terms.items()},
        tile=tile,
        knee=knee,
        meta={
            **({"clipped": clipped} if clipped else {}),
            "source": str(first["source"]),
            "hardware": str(first["hardware"]),
            "model": str(first["model"]),
            "r2": float(res.rsquared),
            "resid_sd_s": float(np.sqrt(res.scale)),
            "n_rows": int(len(profile)),
            "ci95": {k: [float(ci.loc[k, 0]), float(ci.loc[k, 1])] for k in res.params.index},
        },
    )


#: The least share of the residual standard deviation a knee must remove to be kept: with
#: thousands of steps a knee of no practical use (whisper-tiny's, 0.2%) still passes BIC.
KNEE_MIN_GAIN = 0.02


def best_knee(profile: pd.DataFrame, tile: int = 0, most: int = 64) -> int:
    """The knee (:func:`fit_steptime`) with the least residual over every batch size up to
    ``most`` tokens that leaves steps on both sides of it, if it cuts the residual standard
    deviation of the fit without one by :data:`KNEE_MIN_GAIN` or more; else 0 (no knee)."""
    tokens = profile["n_prefill_tokens"] + profile["n_decode"]
    with warnings.catch_warnings():  # a knee collinear with other terms is a candidate like any
        warnings.simplefilter("ignore")
        scale = {k: _ols(profile, tile, k)[0].scale for k in [0, *range(int(tokens.min()) + 1, min(int(tokens.max()), most))]}
    knee = min(scale, key=scale.get)
    return knee if np.sqrt(scale[knee] / scale[0]) <= 1 - KNEE_MIN_GAIN else 0


def predict(model: StepTimeModel, profile: pd.DataFrame) -> np.ndarray:
    pairs = profile[PREFILL_PAIRS].to_numpy(float) if PREFILL_PAIRS in profile else 0
    return np.asarray(model(*(profile[f].to_numpy(float) for f in STEP_FEATURES), pairs), dtype=float)


def read_engine_steps(paths, seed: int | None = None) -> pd.DataFrame:
    """Step tables of served runs (``*.steps.parquet`` files, or folders of them: one engine
    job's runs), each checked as a profile, with their run's ``rate``; with ``seed``, only the
    steps of the server started with it."""
    from pathlib import Path

    from schedlab.validation import read_profile

    files = [q for p in map(Path, paths) for q in (sorted(p.glob("*.steps.parquet")) if p.is_dir() else [p])]
    if not files:
        raise SchedlabError(f"no step tables (*.steps.parquet) in {', '.join(map(str, paths))}")
    tables = []
    for f in files:
        t = read_profile(f)
        if "rate" not in t:
            raise SchedlabError(f"{f}: a step table needs its run's 'rate' column")
        tables.append(t)
    steps = pd.concat(tables, ignore_index=True)
    if seed is not None:
        steps = steps[steps["seed"] == seed] if "seed" in steps else steps.iloc[:0]
        if steps.empty:
            raise SchedlabError(f"no steps of seed {seed} in {', '.join(map(str, paths))}")
    return steps


def fit_held_out(steps: pd.DataFrame, rate: float | None) -> StepTimeModel:
    """The profile fit's model (:func:`fit_steptime`, the same terms: no prefill pairs; the knee
    of :func:`best_knee`) on the served steps of every rate except ``rate`` (None: every rate);
    ``meta`` says which rates it saw, which it held out and whose servers' steps (policy, seed)
    they were. Where the step tables carry each replay's median way in to the engine core and
    way out from the scheduler (``to_core_s``, ``way_out_s``: from the client's and the
    scheduler's times of each request; the way in without the wait for the step in progress,
    :func:`schedlab.backends.served.front_end.way_to_core`, which the simulator makes a request wait
    itself), the model's ``frontend_s`` and ``output_s`` come from those replays
    (:func:`front_end_at`): the served system's front end, which the steps do not hold."""
    rates = sorted(float(r) for r in steps["rate"].unique())
    if rate is not None and float(rate) not in rates:
        raise SchedlabError(f"no steps at rate {rate:g} (the steps' rates: {', '.join(f'{r:g}' for r in rates)})")
    kept = steps if rate is None else steps[steps["rate"].astype(float) != float(rate)]
    if kept.empty:
        raise SchedlabError(f"holding out rate {rate:g} leaves no steps: the fit needs steps of another rate")
    profile = kept[list(PROFILE_COLUMNS)]
    model = fit_steptime(profile, knee=best_knee(profile))
    seen = sorted(float(r) for r in kept["rate"].unique())
    held = {"held_out_rate": None if rate is None else float(rate), "rates": seen, "n_steps_by_rate":
            {f"{r:g}": int((kept["rate"].astype(float) == r).sum()) for r in seen}}
    if {"policy", "seed"} <= set(kept):
        held["servers"] = sorted([str(p), int(s)] for p, s in kept[["policy", "seed"]].drop_duplicates().itertuples(index=False))
    delays = {"frontend_s": model.frontend_s, "output_s": model.output_s}
    every = kept.groupby([c for c in ("policy", "rate", "seed", "repeat") if c in kept]).first()  # one row a replay
    for field, column in (("frontend_s", "to_core_s"), ("output_s", "way_out_s")):
        if column in every and every[column].notna().any():
            replays = every[every[column].notna()]
            flawed = replay_flaws(replays) != ""
            use = replays[~flawed] if (~flawed).any() else replays
            delays[field], how = front_end_at(use.reset_index(), rate, column)
            held[f"{field}_from"] = (f"{how} over {len(use)} replays of their median request's {column}"
                                     f" ({int(flawed.sum())} left out as not measuring the engine)")
    return replace(model, **delays, meta={**model.meta, **held})


#: The p-value under which the replays' front-end times count as a trend in the offered rate.
TREND_P = 0.05


def front_end_at(replays: pd.DataFrame, rate: float | None, column: str = "to_core_s") -> tuple[float, str]:
    """The front end's time per request at ``rate``, from ``replays`` (one row each: ``rate``,
    and a time per request in ``column``), and how it was found. The front end shares the machine
    with the engine, so its time may grow with the offered load (Whisper's API server decodes
    audio and extracts features on the engine's cores) or stay within its noise (a small
    decoder's way in to the engine core). Where the replays show a trend (``column`` against
    the rate: Kendall's tau over the replays,
    p < :data:`TREND_P`, a rank test that one slow replay does not sway), a least-squares line
    through each rate's median (which one slow replay does not tilt), at ``rate`` (never below
    0); otherwise (no trend, one rate, or no rate to predict at) their median: a line through
    noise extrapolates the noise."""
    median = float(replays[column].median())
    if rate is None or replays["rate"].nunique() < 2:
        return median, "median"
    data = replays.astype({"rate": float, column: float})
    p = float(kendalltau(data["rate"], data[column]).pvalue)
    if not p < TREND_P:
        return median, f"median (no trend in the offered rate, p = {p:.2g})"
    medians = data.groupby("rate")[column].median()
    slope, intercept = np.polyfit(medians.index, medians.to_numpy(), 1)
    return (max(0.0, float(intercept + slope * float(rate))),
            f"a line in the offered rate through each rate's median (trend p = {p:.2g}), at {float(rate):g} req/s")


def grid_steptime(grid: pd.DataFrame, max_tokens: int = 8192) -> StepTimeModel:
    """The engine's step-time model fitted to a predictor profile (``grid``: prefill and decode
    rows over (batch, length), :mod:`schedlab.latency.predictor_profile`): prefill rows as
    prompt tokens, decode rows as decodes over a context; only compositions one step can hold
    (at most ``max_tokens`` prompt tokens, lengths < 2k)."""
    grid = grid[(grid["length"] <= 2000) & ((grid["phase"] == "decode") | (grid["batch"] * grid["length"] <= max_tokens))]
    prefill = grid["phase"] == "prefill"
    tokens = grid["batch"] * grid["length"]
    table = grid[["source", "hardware", "model", "time_s"]].assign(
        n_encoder=0,
        n_prefill_tokens=np.where(prefill, tokens, 0),
        n_decode=np.where(prefill, 0, grid["batch"]),
        ctx_tokens=np.where(prefill, 0, tokens),
    )
    return fit_steptime(table)


def roofline_grid_steptime(hw, arch, max_tokens: int = 8192, **eff) -> StepTimeModel:
    """:func:`grid_steptime` of the latency predictor's (calibrated) roofline grid
    (:func:`schedlab.latency.predictor_profile.roofline_profile`; ``eff``: efficiencies)."""
    from schedlab.latency.predictor_profile import roofline_profile

    return grid_steptime(roofline_profile(hw, arch, **eff), max_tokens)


def measured_grid_steptime(hw, arch, max_tokens: int = 8192) -> StepTimeModel:
    """:func:`grid_steptime` of the same grid priced by the passes measured on the shipped
    GPUs (:func:`schedlab.fit.measured.predictor_profile`)."""
    from schedlab.fit.measured import predictor_profile

    return grid_steptime(predictor_profile(hw, arch), max_tokens)
