"""A straight line fitted by OLS, as the measured serving-stack costs are reported."""

from __future__ import annotations

import numpy as np


def line_fit(x, y, intercept: str, slope: str) -> dict:
    """OLS of ``y`` on ``x`` with an intercept: the two coefficients under the names
    ``intercept`` and ``slope``, their 95 % intervals (``ci95``) and R² (``r2``)."""
    import statsmodels.api as sm

    ols = sm.OLS(np.asarray(y, float), sm.add_constant(np.asarray(x, float))).fit()
    (a, b), ci = ols.params, ols.conf_int(0.05)
    return {intercept: float(a), slope: float(b),
            "ci95": {intercept: [float(ci[0][0]), float(ci[0][1])], slope: [float(ci[1][0]), float(ci[1][1])]},
            "r2": float(ols.rsquared)}
