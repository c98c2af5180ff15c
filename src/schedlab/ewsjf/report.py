"""Paper B's tables: its Table 3 as reported, and every number of it beside ours."""

from __future__ import annotations

from importlib.resources import files

import numpy as np
import pandas as pd

from schedlab.report import METRIC_WORDS


def reported_ewsjf_table3() -> pd.DataFrame:
    """Paper B's Table 3 (mixed workload, 30k requests, LLaMA-2-13B on 4x A100-80GB); the
    Refine-and-Prune row is named ``ewsjf``."""
    return pd.read_csv(files("schedlab") / "assets" / "reported" / "ewsjf_table3.csv")


def ewsjf_rows(queues: pd.DataFrame) -> list[dict]:
    """Paper B: every cell of Table 3 (completion time, req/s, tok/s per method); FCFS's
    throughput is the calibration target, the rest are predictions."""
    ours = queues.set_index("method")
    rows = []
    for rec in reported_ewsjf_table3().itertuples(index=False):
        for m, unit in (("completion_s", "s"), ("throughput_rps", "req/s"), ("throughput_tok_s", "tok/s")):
            fitted = rec.method == "fcfs" and m == "throughput_rps"
            rows.append({"quantity": f"{rec.method} {METRIC_WORDS[m]} ({rec.queues} queues)", "unit": unit,
                         "paper": getattr(rec, m), "ours": ours[m].get(rec.method, np.nan),
                         "role": "fitted" if fitted else "predicted", "group": rec.method})
    return rows
