"""Paper D's tables: every number it reports beside ours."""

from __future__ import annotations

import numpy as np
import pandas as pd


def slosa_rows(coefficients_ms: pd.DataFrame, sa_share_of_optimum_pct: float, sa_ms_at_10: float) -> list[dict]:
    """Paper D: the published predictor coefficients (ms) against ours (``coefficients_ms``:
    phase, term, ms), SA's G as a share of the exhaustive optimum (paper: within ~1 %) and SA's
    time per decision at N = 10 (paper: 0.48 ms)."""
    from schedlab.fit.latency_predictor import REFERENCE

    ours = coefficients_ms.set_index(["phase", "term"])["ms"]
    rows = [{"quantity": f"{r.phase} coefficient {r.term}", "unit": "ms", "paper": r.ms,
             "ours": ours.get((r.phase, r.term), np.nan), "role": "predicted", "group": "coefficient"}
            for r in REFERENCE.coefficients_ms().itertuples(index=False)]
    rows.append({"quantity": "SA's G as a share of the exhaustive optimum", "unit": "%", "paper": 99.0,
                 "ours": sa_share_of_optimum_pct, "role": "predicted", "group": "sa"})
    rows.append({"quantity": "SA time per decision at N = 10", "unit": "ms", "paper": 0.48, "ours": sa_ms_at_10,
                 "role": "predicted", "group": "sa_time"})
    return rows
