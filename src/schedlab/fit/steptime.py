"""Step-time coefficients from a profile table by OLS (statsmodels)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import statsmodels.api as sm

from schedlab.contracts import PROFILE_COLUMNS, STEP_FEATURES
from schedlab.errors import SchedlabError
from schedlab.sim.steptime import StepTimeModel


def fit_steptime(profile: pd.DataFrame) -> StepTimeModel:
    """``time_s ~ 1 + n_encoder + n_prefill_tokens + n_decode + ctx_tokens``.

    Features that never vary in the profile (e.g. no prefill rows) get coefficient 0. The
    model's ``meta`` keeps R², the residual standard deviation, 95% CIs and the profile's
    identity.
    """
    missing = [c for c in PROFILE_COLUMNS if c not in profile.columns]
    if missing:
        raise SchedlabError(f"profile table lacks columns {', '.join(missing)}")
    used = [f for f in STEP_FEATURES if profile[f].nunique() > 1]
    if len(profile) <= len(used) + 1:
        raise SchedlabError(f"profile has {len(profile)} rows: too few to fit {len(used) + 1} coefficients")
    X = sm.add_constant(profile[used].astype(float), has_constant="add")
    res = sm.OLS(profile["time_s"].astype(float), X).fit()
    ci = res.conf_int()
    coef = {f: float(res.params.get(f, 0.0)) for f in STEP_FEATURES}
    first = profile.iloc[0]
    return StepTimeModel(
        intercept=float(res.params["const"]),
        **coef,
        meta={
            "source": str(first["source"]),
            "hardware": str(first["hardware"]),
            "model": str(first["model"]),
            "r2": float(res.rsquared),
            "resid_sd_s": float(np.sqrt(res.scale)),
            "n_rows": int(len(profile)),
            "ci95": {k: [float(ci.loc[k, 0]), float(ci.loc[k, 1])] for k in res.params.index},
        },
    )


def predict(model: StepTimeModel, profile: pd.DataFrame) -> np.ndarray:
    return np.asarray(model(*(profile[f].to_numpy(float) for f in STEP_FEATURES)), dtype=float)
