"""What every paper's notebook shares: the registry's order and colours of schedulers, figure
saving, tables beside a paper's, metric names in words, and the figure of a metric against the
rate (how paper-vs-ours rows are counted: :mod:`schedlab.counting`).
Each paper's own tables are in its package (``schedlab.<paper>.report``); the simulators'
fidelity against a real engine in :mod:`schedlab.fidelity`."""

from __future__ import annotations

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


def legend_beside(fig, axes=None, *, entries: dict | None = None, title: str | None = None, **kwargs):
    """One legend right of ``fig``'s panels: ``entries`` (label -> handle) or else every entry of
    ``axes`` (default: all) once: their labelled artists, then the other entries of their
    legends (which are removed). Call it once the layout is set (after ``tight_layout``): it is anchored at
    the top of the highest panel. A legend beside the panels covers none of their data."""
    if entries is None:
        entries = {}
        for ax in fig.axes if axes is None else axes:
            for handle, label in zip(*ax.get_legend_handles_labels()):
                entries.setdefault(label, handle)
            legend = ax.get_legend()
            if legend is not None:
                for handle, text in zip(legend.legend_handles, legend.get_texts()):
                    entries.setdefault(text.get_text(), handle)
                title = title if title is not None else (legend.get_title().get_text() or None)
                legend.remove()
    top = max(ax.get_position().y1 for ax in fig.axes)
    kwargs = {"loc": "upper left", "bbox_to_anchor": (1.0, top), "frameon": False, **kwargs}
    return fig.legend(list(entries.values()), list(entries), title=title, **kwargs)


def _log_labels(low: float, high: float) -> tuple:
    """The mantissas a log axis from ``low`` to ``high`` labels: the sparsest of 1; 1, 3; 1, 2, 5;
    1, 2, 3, 5, 7; 1 to 9 that labels at least three values in view."""
    if not low > 0:
        return (1,)
    decades = range(int(np.floor(np.log10(low))), int(np.ceil(np.log10(high))) + 1)
    for mantissas in ((1,), (1, 3), (1, 2, 5), (1, 2, 3, 5, 7), tuple(range(1, 10))):
        if sum(low <= m * 10.0**d <= high for m in mantissas for d in decades) >= 3:
            return mantissas
    return tuple(range(1, 10))


def plain_log_ticks(*axes) -> None:
    """Label log-scaled axes (``ax.xaxis``, ``ax.yaxis``) in plain numbers (``70``, ``200``,
    ``1,000``; not ``7x10^1``), at the powers of ten or, where that labels fewer than three
    values in view, at more multiples of them (:func:`_log_labels`)."""
    from matplotlib.ticker import Formatter

    class Plain(Formatter):
        def __call__(self, x, pos=None):
            low, high = sorted(self.axis.get_view_interval())
            shown = _log_labels(low, high)
            mantissa = x / 10 ** np.floor(np.log10(x) + 1e-9) if x > 0 else 0
            if not any(abs(mantissa - m) < 1e-6 for m in shown):
                return ""
            return f"{x:,.0f}" if x >= 1 else f"{x:g}"

    for axis in axes:
        axis.set_major_formatter(Plain())
        axis.set_minor_formatter(Plain())


def save_figure(fig, figures_dir: str | Path, name: str) -> None:
    """Write ``name``.png and ``name``.pdf atomically, once :func:`schedlab.figure_check.check`
    finds the figure readable (no legend over data, no raw column names as labels, no facet
    titled ``column = value``, no overlapping or cut text); else nothing is written and the
    refusal names the figure and each fault."""
    from schedlab.figure_check import check

    check(fig, name)
    for ext in ("png", "pdf"):
        with atomic_path(Path(figures_dir) / f"{name}.{ext}") as tmp:
            fig.savefig(tmp, format=ext, dpi=150, bbox_inches="tight")


def interval_words(label: str) -> str:
    """A bin as pandas prints it (:data:`schedlab.figure_check.INTERVAL`: ``(-0.001, 512.0]``,
    ``(512.0, 1024.0]``) in words, for a count such as tokens: ``≤ 512``, ``513–1,024``,
    ``> 8,192``; a label of another form is returned as it is."""
    from schedlab.figure_check import INTERVAL

    match = INTERVAL.fullmatch(label.strip())
    if not match:
        return label
    left, low, high, right = match[1], float(match[2]), float(match[3]), match[4]
    if high == float("inf"):
        return f"> {low:,.0f}" if left == "(" else f"≥ {low:,.0f}"
    if low < 0:
        return f"≤ {high:,.0f}" if right == "]" else f"< {high:,.0f}"
    first, last = (low + 1 if left == "(" else low), (high if right == "]" else high - 1)
    return f"{first:,.0f}–{last:,.0f}"


def select(summary: pd.DataFrame, workload: str, model: str) -> pd.DataFrame:
    """One experiment's rows, each number the median over its trace seeds (the value every
    paper-vs-ours row calls ours), indexed by (rate, policy)."""
    rows = summary[(summary["workload"] == workload) & (summary["model"] == model)]
    return rows.groupby(["rate", "policy"]).median(numeric_only=True)


def seed_bands(runs: pd.DataFrame, metrics: list[str], by=("rate", "policy")) -> tuple[pd.DataFrame, pd.DataFrame] | None:
    """The 5-95 % band over trace seeds of ``runs`` (one row per seed, see :func:`runs_of`) as
    two tables (low, high) indexed by ``by``; None for runs on fewer than two seeds."""
    from schedlab.counting import BAND

    if runs.empty or runs.groupby(list(by)).size().max() < 2:
        return None
    grouped = runs.groupby(list(by))[metrics]
    return grouped.quantile(BAND[0] / 100), grouped.quantile(BAND[1] / 100)


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


def nested_style(k: int) -> dict:
    """The ``k``-th line's marker and dashes: markers shrink from an open circle, so lines that
    coincide show as markers nested in each other."""
    return {"marker": "osD^v<>"[k % 7], "ms": max(9 - 2 * k, 3), "mfc": "none" if k == 0 else None,
            "ls": ("-", "--", ":", "-.")[k % 4], "alpha": 0.9}


def plot_beside_paper(table: pd.DataFrame, metrics: list[str], reported: pd.DataFrame | None = None, *,
                      ylabel: str, title: str, log: bool = False, palette: dict | None = None,
                      bands: tuple[pd.DataFrame, pd.DataFrame] | None = None):
    """One panel per metric (titled in words), one line per policy against the offered rate (each
    policy its own marker and dashes, so lines that coincide stay visible), and
    the paper's points (``reported``, indexed by (rate, policy)) as open diamonds in the policy's
    colour, with one entry "paper" in the legend beside the panels; with ``bands`` (the low and
    high tables, indexed as ``table``: the seeds' 5-95 % band, :func:`seed_bands`) each line's
    band shaded in its colour. Returns the figure."""
    import matplotlib.pyplot as plt

    policies = scheduler_order(table.index.get_level_values("policy"))
    palette = palette or scheduler_palette(policies)
    fig, axes = plt.subplots(1, len(metrics), figsize=(5.2 * len(metrics), 3.8), squeeze=False)
    for ax, m in zip(axes[0], metrics):
        for k, p in enumerate(policies):
            ours = table.xs(p, level="policy")[m]
            ax.plot(ours.index, ours.to_numpy(), color=palette[p], label=p.upper(), **nested_style(k))
            if bands is not None:
                low, high = (b.xs(p, level="policy")[m].reindex(ours.index) for b in bands)
                ax.fill_between(ours.index, low.to_numpy(), high.to_numpy(), color=palette[p], alpha=0.15, lw=0)
            if reported is not None and m in reported and p in reported.index.get_level_values("policy"):
                rep = reported.xs(p, level="policy")[m]
                ax.scatter(rep.index, rep.to_numpy(), marker="D", s=45, facecolors="none", edgecolors=palette[p], lw=1.5)
        ax.set(title=METRIC_WORDS.get(m, m), xlabel="offered rate (req/s)", ylabel=ylabel)
        if log:
            ax.set_yscale("log")
            plain_log_ticks(ax.yaxis)
    if reported is not None:  # one entry for every policy's paper points
        axes[0][0].plot([], [], marker="D", ls="", mfc="none", mec="k", label="paper")
    fig.suptitle(title)
    fig.tight_layout()
    legend_beside(fig)
    return fig
