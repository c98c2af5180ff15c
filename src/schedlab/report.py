"""What every paper's notebook shares: the registry's order and colours of schedulers, figure
saving, tables beside a paper's, metric names in words, and the figure of a metric against the
rate (how paper-vs-ours rows are counted: :mod:`schedlab.counting`).
Each paper's own tables are in its package (``schedlab.<paper>.report``); the simulators'
fidelity against a real engine in :mod:`schedlab.fidelity`."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from schedlab.io import atomic_path


def scheduler_order(names) -> list[str]:
    """``names`` (schedulers, as in a table's ``policy`` column) in the registry's order, so
    every figure lists them alike; names the registry does not hold come last, sorted."""
    from schedlab import registry

    present = set(names)
    known = [n for n in registry.names() if n in present]
    return known + sorted(present - set(known))


def scheduler_palette(names=None) -> dict:
    """A colour per scheduler that stays the same across figures: its position in the registry
    (seaborn's colour-blind palette, extended by evenly spaced hues past its ten colours);
    ``names`` the registry does not hold get colours after those."""
    import seaborn as sns

    from schedlab import registry

    everyone = registry.names() + sorted(set(names or ()) - set(registry.names()))
    colours = sns.color_palette("colorblind", 10)
    if len(everyone) > len(colours):
        colours += sns.color_palette("husl", len(everyone) - len(colours))
    return dict(zip(everyone, colours))


#: A facet title of seaborn's default form, ``column = value`` (and ``a = x | b = y``).
_DEFAULT_FACET_TITLE = re.compile(r"^[A-Za-z_][\w ]* = ")


def save_figure(fig, figures_dir: str | Path, name: str) -> None:
    """Write ``name``.png and ``name``.pdf atomically. A facet titled in seaborn's default
    ``column = value`` form is refused: a reader needs words (``FacetGrid.set_titles``)."""
    for ax in fig.axes:
        title = ax.get_title()
        if _DEFAULT_FACET_TITLE.match(title):
            raise ValueError(f"figure {name!r}: facet title {title!r} is in the 'column = value' form; "
                             "title the facets in words (FacetGrid.set_titles)")
    for ext in ("png", "pdf"):
        with atomic_path(Path(figures_dir) / f"{name}.{ext}") as tmp:
            fig.savefig(tmp, format=ext, dpi=150, bbox_inches="tight")


def select(summary: pd.DataFrame, workload: str, model: str) -> pd.DataFrame:
    """One experiment's rows, each number the median over its trace seeds (the value every
    paper-vs-ours row calls ours), indexed by (rate, policy)."""
    rows = summary[(summary["workload"] == workload) & (summary["model"] == model)]
    return rows.groupby(["rate", "policy"]).median(numeric_only=True)


def runs_of(summary: pd.DataFrame, workload: str, model: str) -> pd.DataFrame:
    """One experiment's runs, one row per (rate, policy, seed)."""
    return summary[(summary["workload"] == workload) & (summary["model"] == model)].reset_index(drop=True)


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


# -- paper vs ours (counted by schedlab.counting) -------------------------------------------
METRIC_WORDS = {"p50_ttft_ms": "median TTFT", "p90_ttft_ms": "P90 TTFT", "p50_e2el_ms": "median E2E latency",
                "p90_e2el_ms": "P90 E2E latency", "p25_e2el_ms": "P25 E2E latency", "throughput_rps": "throughput",
                "throughput_tok_s": "output tokens/s", "completion_s": "completion time", "p50_tpot_ms": "median TPOT",
                "p50_itl_ms": "median ITL"}


def plot_beside_paper(table: pd.DataFrame, metrics: list[str], reported: pd.DataFrame | None = None, *,
                      ylabel: str, title: str, log: bool = False, palette: dict | None = None):
    """One panel per metric (titled in words), one line per policy against the offered rate, and
    the paper's points (``reported``, indexed by (rate, policy)) as open diamonds in the policy's
    colour, with one legend entry "paper"; returns the figure."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    policies = scheduler_order(table.index.get_level_values("policy"))
    palette = palette or scheduler_palette(policies)
    fig, axes = plt.subplots(1, len(metrics), figsize=(5.2 * len(metrics), 3.8), squeeze=False)
    for ax, m in zip(axes[0], metrics):
        for p in policies:
            ours = table.xs(p, level="policy")[m]
            ax.plot(ours.index, ours.to_numpy(), marker="o", ms=3, color=palette[p], label=p.upper())
            if reported is not None and m in reported and p in reported.index.get_level_values("policy"):
                rep = reported.xs(p, level="policy")[m]
                ax.scatter(rep.index, rep.to_numpy(), marker="D", s=45, facecolors="none", edgecolors=palette[p], lw=1.5)
        ax.set(title=METRIC_WORDS.get(m, m), xlabel="offered rate (req/s)", ylabel=ylabel)
        if log:
            ax.set_yscale("log")
    handles, labels = axes[0][0].get_legend_handles_labels()
    if reported is not None:
        handles.append(Line2D([], [], marker="D", ls="", mfc="none", mec="k", label="paper"))
        labels.append("paper")
    axes[0][-1].legend(handles, labels, loc="best", fontsize="small")
    fig.suptitle(title, y=1.02)
    fig.tight_layout()
    return fig
