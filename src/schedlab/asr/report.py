"""Paper A's tables: its Table 1 as reported, its qualitative claims checked on our runs, and
every number it reports beside ours."""

from __future__ import annotations

from importlib.resources import files

import numpy as np
import pandas as pd

from schedlab.report import METRIC_WORDS, pct_change_vs


def reported_asr_table1() -> pd.DataFrame:
    """Paper A's Table 1 (LibriSpeech test-clean, A100 40 GB, ms)."""
    return pd.read_csv(files("schedlab") / "assets" / "reported" / "asr_table1.csv")


def asr_findings(table: pd.DataFrame) -> pd.DataFrame:
    """Paper A's qualitative claims, checked at the highest rate of one experiment."""
    top = table.index.get_level_values("rate").max()
    at = table.xs(top, level="rate")
    thr = table["throughput_rps"].unstack("policy")
    f, s, h = (at.loc[p] for p in ("fcfs", "sjf", "hrrn"))
    checks = [
        ("SJF lowers P50 E2EL by >= 40% vs FCFS", (s.p50_e2el_ms / f.p50_e2el_ms - 1) * 100, s.p50_e2el_ms <= 0.6 * f.p50_e2el_ms),
        ("SJF raises P90 E2EL vs FCFS", (s.p90_e2el_ms / f.p90_e2el_ms - 1) * 100, s.p90_e2el_ms > f.p90_e2el_ms),
        ("HRRN P50 E2EL between SJF and FCFS", (h.p50_e2el_ms / f.p50_e2el_ms - 1) * 100, s.p50_e2el_ms <= h.p50_e2el_ms <= f.p50_e2el_ms),
        ("HRRN P90 E2EL between FCFS and SJF", (h.p90_e2el_ms / f.p90_e2el_ms - 1) * 100, f.p90_e2el_ms <= h.p90_e2el_ms <= s.p90_e2el_ms),
        ("equal throughput across policies (max spread, %)", float((thr.max(axis=1) / thr.min(axis=1) - 1).max() * 100), bool((thr.max(axis=1) / thr.min(axis=1)).max() < 1.02)),
    ]
    return pd.DataFrame(
        [(c, float(v), bool(ok)) for c, v, ok in checks], columns=["claim", "value_pct", "holds"]
    ).assign(rate=top)


def change_group(policy: str, metric: str, rate: float) -> str:
    """The ``group`` (see :func:`paper_vs_ours`) of one change vs FCFS of :func:`asr_rows`."""
    return f"change {policy} {metric} {rate:g}"


def seed_changes(runs: pd.DataFrame, metrics=("p50_e2el_ms", "p90_e2el_ms")) -> pd.DataFrame:
    """Each policy's change vs FCFS (%) per trace seed and rate, from the calibration record's
    ``seed_spread`` rows (``bound`` names the seed), then its min, median and max over seeds,
    indexed by (policy, metric, rate)."""
    runs = pd.DataFrame(runs).set_index(["rate", "policy"])
    per_seed = pd.concat({b: pct_change_vs(g.drop(columns="bound"), list(metrics)) for b, g in runs.groupby("bound")},
                         names=["bound"])
    long = per_seed.reset_index().melt(["bound", "rate", "policy"], var_name="metric")
    return long.groupby(["policy", "metric", "rate"])["value"].agg(["min", "median", "max", "count"])


def asr_rows(table: pd.DataFrame, reported: pd.DataFrame | None = None, saturation_rps: float = 18.0,
             change_rates=(20, 25)) -> list[dict]:
    """Paper A: every cell of Table 1, SJF's and HRRN's changes vs FCFS at ``change_rates``, and
    the saturation throughput; ``table`` is one experiment's runs indexed by (rate, policy)."""
    reported = reported_asr_table1() if reported is None else reported
    metrics = ["p50_ttft_ms", "p50_e2el_ms", "p90_e2el_ms"]
    rows = []
    for rec in reported.itertuples(index=False):
        key = (rec.rate, rec.policy)
        for m in metrics:
            ours = table.loc[key, m] if key in table.index else np.nan
            fitted = rec.policy == "fcfs"
            rows.append({"quantity": f"{rec.policy.upper()} {METRIC_WORDS[m]} at {rec.rate:g} req/s", "unit": "ms",
                         "paper": getattr(rec, m), "ours": ours, "role": "fitted" if fitted else "predicted",
                         "group": f"fcfs@{rec.rate:g}" if fitted else "treatment"})
    rep = reported.set_index(["rate", "policy"])
    ours_change = pct_change_vs(table, ["p50_e2el_ms", "p90_e2el_ms"])
    paper_change = pct_change_vs(rep, ["p50_e2el_ms", "p90_e2el_ms"])
    for rate in change_rates:
        for policy in ("sjf", "hrrn"):
            for m in ("p50_e2el_ms", "p90_e2el_ms"):
                key = (rate, policy)
                rows.append({"quantity": f"{policy.upper()} {METRIC_WORDS[m]} change vs FCFS at {rate:g} req/s",
                             "unit": "% vs FCFS", "paper": paper_change.loc[key, m],
                             "ours": ours_change.loc[key, m] if key in ours_change.index else np.nan,
                             "role": "predicted", "group": change_group(policy, m, rate)})
    fcfs = table.xs("fcfs", level="policy")["throughput_rps"] if len(table) else pd.Series(dtype=float)
    rows.append({"quantity": "FCFS saturation throughput (highest rate)", "unit": "req/s", "paper": saturation_rps,
                 "ours": fcfs.max() if len(fcfs) else np.nan, "role": "fitted", "group": "saturation"})
    return rows
