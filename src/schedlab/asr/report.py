"""Paper A's tables: its Table 1 as reported, its qualitative claims checked on our runs, and
every number it reports beside ours."""

from __future__ import annotations

from importlib.resources import files

import numpy as np
import pandas as pd

from schedlab.counting import SAME, seed_band, unchanged_on_every_seed
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
    """The ``group`` (see :func:`schedlab.counting.paper_vs_ours`) of one change vs FCFS of
    :func:`asr_rows`."""
    return f"change {policy} {metric} {rate:g}"


def by_seed(runs: pd.DataFrame) -> pd.DataFrame:
    """Runs (one row per (rate, policy, seed), as a sweep's summary table or the calibration
    record's ``seed_runs``, whose ``bound`` names the seed) indexed by (rate, policy, seed)."""
    runs = pd.DataFrame(runs)
    if "seed" not in runs:
        runs = runs.assign(seed=runs["bound"].str.removeprefix("seed ").astype(int))
    return runs.set_index(["rate", "policy", "seed"]).sort_index()


def seed_changes(runs: pd.DataFrame, metrics=("p50_e2el_ms", "p90_e2el_ms")) -> pd.DataFrame:
    """Each policy's change vs FCFS (%) on each seed (against FCFS on the same seed), indexed by
    (rate, policy, seed); ``runs`` as :func:`by_seed` takes them."""
    runs = by_seed(runs)
    fcfs = runs.xs("fcfs", level="policy")[list(metrics)]
    treated = runs.drop(index="fcfs", level="policy")[list(metrics)]
    base = fcfs.reindex(treated.index.droplevel("policy"))
    return (treated / base.to_numpy() - 1) * 100


#: Why a treatment's row equals the fitted FCFS cell.
NO_QUEUE = "equal to the fitted FCFS cell on every seed: no queue forms at this rate, so the order cannot act"


def asr_rows(runs: pd.DataFrame, reported: pd.DataFrame | None = None, saturation_rps: float = 18.0,
             change_rates=(20, 25)) -> list[dict]:
    """Paper A: every cell of Table 1, SJF's and HRRN's changes vs FCFS at ``change_rates``, and
    the saturation throughput, each as the median and band over trace seeds of ``runs`` (one
    experiment's runs, one row per (rate, policy, seed): see :func:`by_seed`). FCFS's cells and
    the saturation point are fitted; a treatment's cell is derived where it equals FCFS's on
    every seed, predicted elsewhere."""
    reported = reported_asr_table1() if reported is None else reported
    runs = by_seed(runs)
    metrics = ["p50_ttft_ms", "p50_e2el_ms", "p90_e2el_ms"]
    at = lambda rate, policy, m: runs.loc[(rate, policy), m] if (rate, policy) in runs.index.droplevel("seed") else pd.Series(dtype=float)
    rows = []
    for rec in reported.itertuples(index=False):
        for m in metrics:
            ours = at(rec.rate, rec.policy, m)
            if rec.policy == "fcfs":
                role, reason = "fitted", None
            elif unchanged_on_every_seed(ours, at(rec.rate, "fcfs", m)):
                role, reason = "derived", NO_QUEUE
            else:
                role, reason = "predicted", None
            rows.append({"quantity": f"{rec.policy.upper()} {METRIC_WORDS[m]} at {rec.rate:g} req/s", "unit": "ms",
                         "paper": getattr(rec, m), **seed_band(ours), "role": role, "reason": reason,
                         "group": f"fcfs@{rec.rate:g}" if rec.policy == "fcfs" else "treatment"})
    paper_change = pct_change_vs(reported.set_index(["rate", "policy"]), ["p50_e2el_ms", "p90_e2el_ms"])
    ours_change = seed_changes(runs.reset_index())
    for rate in change_rates:
        for policy in ("sjf", "hrrn"):
            for m in ("p50_e2el_ms", "p90_e2el_ms"):
                key = (rate, policy)
                ours = ours_change.loc[key, m] if key in ours_change.index.droplevel("seed") else pd.Series(dtype=float)
                still = bool(len(ours)) and bool((ours.abs() <= SAME * 100).all())
                rows.append({"quantity": f"{policy.upper()} {METRIC_WORDS[m]} change vs FCFS at {rate:g} req/s",
                             "unit": "% vs FCFS", "paper": paper_change.loc[key, m], **seed_band(ours),
                             "role": "derived" if still else "predicted", "reason": NO_QUEUE if still else None,
                             "group": change_group(policy, m, rate)})
    top = runs.index.get_level_values("rate").max() if len(runs) else np.nan
    fcfs = at(top, "fcfs", "throughput_rps") if len(runs) else pd.Series(dtype=float)
    rows.append({"quantity": "FCFS saturation throughput (highest rate)", "unit": "req/s", "paper": saturation_rps,
                 **seed_band(fcfs), "role": "fitted", "group": "saturation"})
    return rows
