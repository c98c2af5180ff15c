"""kappa: output tokens per second of audio, by OLS through the origin (tokens ~ duration)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import statsmodels.api as sm


def fit_kappa(duration_s, tokens) -> dict:
    """kappa with its standard error, 95% CI and R².

    Without an intercept statsmodels reports the uncentred R² (share of the sum of squares of
    ``tokens`` explained); the centred R² about the mean is given beside it.
    """
    x = np.asarray(duration_s, float)
    y = np.asarray(tokens, float)
    res = sm.OLS(y, x).fit()
    resid = y - res.params[0] * x
    lo, hi = res.conf_int()[0]
    return {
        "kappa": float(res.params[0]),
        "se": float(res.bse[0]),
        "ci95": [float(lo), float(hi)],
        "r2_uncentered": float(res.rsquared),
        "r2_centered": float(1 - (resid @ resid) / ((y - y.mean()) @ (y - y.mean()))),
        "n": int(len(x)),
    }


def fit_languages(tables: dict[str, pd.DataFrame | str]) -> dict:
    """Fit every language whose utterance table is available; keep the reason for the others.

    ``tables`` maps a language code to a table with ``duration_s`` and ``text_tokens``, or to
    a string saying why that language could not be loaded.
    """
    out = {}
    for lang, table in tables.items():
        if isinstance(table, str):
            out[lang] = {"status": "not reproduced", "reason": table}
        else:
            out[lang] = {"status": "fitted", **fit_kappa(table["duration_s"], table["text_tokens"])}
    return out

