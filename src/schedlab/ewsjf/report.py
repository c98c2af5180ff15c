"""Paper B's tables: its Table 3 as reported, and every number of it beside ours."""

from __future__ import annotations

from importlib.resources import files

import pandas as pd

from schedlab.counting import seed_band
from schedlab.report import METRIC_WORDS


def reported_ewsjf_table3() -> pd.DataFrame:
    """Paper B's Table 3 (mixed workload, 30k requests, LLaMA-2-13B on 4x A100-80GB); the
    Refine-and-Prune row is named ``ewsjf``."""
    return pd.read_csv(files("schedlab") / "assets" / "reported" / "ewsjf_table3.csv")


#: Why FCFS's completion time and output tokens/s are derived: arithmetic on the fitted req/s.
ARITHMETIC = {"completion_s": "the trace's requests over the fitted req/s",
              "throughput_tok_s": "the fitted req/s times the trace's mean output tokens"}


def ewsjf_rows(queues: pd.DataFrame) -> list[dict]:
    """Paper B: every cell of Table 3 (completion time, req/s, tok/s per method), each the
    median and band over the trace seeds of ``queues`` (one row per (method, seed)). FCFS's
    req/s is the calibration target; its completion time and tok/s follow from it by arithmetic
    on the trace (derived); the other methods' numbers are predictions."""
    rows = []
    for rec in reported_ewsjf_table3().itertuples(index=False):
        mine = queues[queues["method"] == rec.method]
        for m, unit in (("completion_s", "s"), ("throughput_rps", "req/s"), ("throughput_tok_s", "tok/s")):
            fcfs = rec.method == "fcfs"
            role = ("fitted" if m == "throughput_rps" else "derived") if fcfs else "predicted"
            rows.append({"quantity": f"{rec.method} {METRIC_WORDS[m]} ({rec.queues} queues)", "unit": unit,
                         "paper": getattr(rec, m), **seed_band(mine[m]), "role": role,
                         "reason": f"{ARITHMETIC[m]} (arithmetic)" if role == "derived" else None, "group": rec.method})
    return rows
