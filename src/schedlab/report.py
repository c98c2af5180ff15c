"""Tables, checks and figure saving shared by the notebooks (they only load and plot)."""

from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path

import pandas as pd

from schedlab.io import atomic_path

POLICY_ORDER = ["fcfs", "sjf", "hrrn"]


def read_manifest(path: str | Path) -> dict:
    """A notebook's inputs as its rule declared them (``<results>/notebooks/<name>.inputs.json``):
    the settings it was rendered with, and ``inputs`` (name -> path, or list of paths), each path
    resolved against the manifest's folder so that it reads the same from any working folder."""
    path = Path(path)
    manifest = json.loads(path.read_text())
    resolve = lambda p: [resolve(q) for q in p] if isinstance(p, list) else path.parent / p
    return {**manifest, "inputs": {k: resolve(v) for k, v in manifest["inputs"].items()}}


def save_figure(fig, figures_dir: str | Path, name: str) -> None:
    """Write ``name``.png and ``name``.pdf atomically."""
    for ext in ("png", "pdf"):
        with atomic_path(Path(figures_dir) / f"{name}.{ext}") as tmp:
            fig.savefig(tmp, format=ext, dpi=150, bbox_inches="tight")


def reported_asr_table1() -> pd.DataFrame:
    """Paper A's Table 1 (LibriSpeech test-clean, A100 40 GB, ms)."""
    return pd.read_csv(files("schedlab") / "assets" / "reported" / "asr_table1.csv")


def reported_ewsjf_table3() -> pd.DataFrame:
    """Paper B's Table 3 (mixed workload, 30k requests, LLaMA-2-13B on 4x A100-80GB); the
    Refine-and-Prune row is named ``ewsjf``."""
    return pd.read_csv(files("schedlab") / "assets" / "reported" / "ewsjf_table3.csv")


def select(summary: pd.DataFrame, workload: str, model: str) -> pd.DataFrame:
    """One experiment's rows, averaged over seeds, indexed by (rate, policy)."""
    rows = summary[(summary["workload"] == workload) & (summary["model"] == model)]
    return rows.groupby(["rate", "policy"]).mean(numeric_only=True)


def pct_change_vs(table: pd.DataFrame, metrics: list[str], baseline: str = "fcfs") -> pd.DataFrame:
    """100 * (policy - baseline) / baseline per rate; negative is better for latencies."""
    if table.empty:
        return table[metrics]
    base = table.xs(baseline, level="policy")[metrics]
    out = table[metrics].div(base, level="rate").sub(1).mul(100)
    return out.drop(index=baseline, level="policy")


def table_beside_reported(table: pd.DataFrame, reported: pd.DataFrame, metrics: list[str]) -> pd.DataFrame:
    """Ours and the paper's values side by side at the paper's rates."""
    rep = reported.set_index(["rate", "policy"])[metrics]
    ours = table.loc[table.index.isin(rep.index), metrics]
    both = pd.concat({"ours": ours, "paper": rep}, axis=1).swaplevel(axis=1)
    return both[[(m, w) for m in metrics for w in ("ours", "paper")]]


def asr_findings(table: pd.DataFrame) -> pd.DataFrame:
    """Paper A's qualitative claims, checked at the highest rate of one experiment."""
    top = table.index.get_level_values("rate").max()
    at = table.xs(top, level="rate")
    thr = table["throughput_rps"].unstack("policy")
    f, s, h = (at.loc[p] for p in POLICY_ORDER)
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


FIDELITY_METRICS = ["p50_ttft_ms", "p90_ttft_ms", "p50_e2el_ms", "p90_e2el_ms", "throughput_rps"]


def fidelity_errors(summary: pd.DataFrame, reference: str, candidate: str) -> pd.DataFrame:
    """Relative error (%) of ``candidate`` against ``reference`` for every run both made
    (same workload, model, policy, rate and seed), one column per metric."""
    keys = ["workload", "model", "policy", "rate", "seed"]
    ref = summary[summary["backend"] == reference].set_index(keys)[FIDELITY_METRICS]
    cand = summary[summary["backend"] == candidate].set_index(keys)[FIDELITY_METRICS]
    both = ref.index.intersection(cand.index)
    err = (cand.loc[both] / ref.loc[both] - 1) * 100
    return err.sort_index().assign(reference=reference, candidate=candidate)


def speed_ratio(summary: pd.DataFrame, fast: str = "sim", slow: str = "vllm-sim") -> pd.Series:
    """Wall time of ``slow`` over ``fast`` on the same runs."""
    keys = ["workload", "model", "policy", "rate", "seed"]
    wall = summary.pivot_table(index=keys, columns="backend", values="wall_s")
    return (wall[slow] / wall[fast]).dropna().rename(f"{slow} / {fast} wall time")
