"""The figure check (schedlab.figure_check) on small figures: each rule refuses a figure that
breaks it and accepts the same figure drawn readably, and save_figure refuses (writing nothing)
what the check refuses."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
import seaborn as sns  # noqa: E402

from schedlab.figure_check import UnreadableFigure, check, faults, is_raw_name  # noqa: E402
from schedlab.report import save_figure  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def rules(fig) -> list[str]:
    return sorted({f.rule for f in faults(fig)})


def crossing_lines(loc=None, **legend):
    """Two lines crossing the whole panel, labelled in words, with their legend at ``loc``."""
    fig, ax = plt.subplots(figsize=(4, 3))
    x = np.linspace(0, 10, 50)
    ax.plot(x, x, label="rising")
    ax.plot(x, 10 - x, label="falling")
    ax.set(xlabel="time (s)", ylabel="latency (ms)")
    ax.legend(loc=loc, **legend)
    return fig, ax


def test_a_legend_over_lines_is_refused_and_one_beside_them_accepted():
    fig, _ = crossing_lines("center")
    assert [str(f) for f in faults(fig)] == [
        "legend over data: the legend of the panel of 'latency (ms)' against 'time (s)' covers lines of the panel "
        "of 'latency (ms)' against 'time (s)'"]
    with pytest.raises(UnreadableFigure, match="figure 'crossing' is not readable:\n  legend over data"):
        check(fig, "crossing")
    fig, _ = crossing_lines("upper left", bbox_to_anchor=(1.01, 1))
    assert faults(fig) == []
    check(fig, "crossing")


def test_a_legend_over_points_or_bars_is_refused_but_not_over_a_reference_line():
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.scatter([0.1, 0.15, 0.9], [0.9, 0.85, 0.1], label="runs")
    ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="rate (req/s)", ylabel="share")
    ax.legend(loc="upper left")
    assert [f.detail.split(" covers ")[1].split(" of ")[0] for f in faults(fig)] == ["points"]
    ax.get_legend().remove()
    ax.legend(loc="lower left")  # away from the three points
    assert faults(fig) == []

    fig, ax = plt.subplots(figsize=(4, 3))
    ax.bar(["a", "b", "c"], [3, 2, 1], label="capacity")
    ax.set(xlabel="scheduler", ylabel="capacity (req/s)")
    ax.legend(loc="upper left")
    assert "covers bars" in faults(fig)[0].detail
    ax.get_legend().remove()
    ax.axhline(2.9, color="k", ls="--", label="the paper's")
    ax.set_ylim(0, 3)
    ax.legend(loc="upper right")  # over the paper's line, above the short bar "c": readable
    assert faults(fig) == []


def test_a_figure_legend_over_a_neighbouring_panel_is_refused():
    fig, axes = plt.subplots(1, 2, figsize=(8, 3))
    for ax in axes:
        ax.plot([0, 1], [0, 1], label="ours")
        ax.plot([0, 1], [1, 0], label="paper")
        ax.set(xlabel="rate (req/s)", ylabel="latency (ms)", title=f"panel {len(fig.texts)}")
    axes[1].set_title("right")
    fig.legend(*axes[0].get_legend_handles_labels(), loc="center", bbox_to_anchor=(0.3, 0.5))
    assert rules(fig) == ["legend over data"]
    fig.legends[0].remove()
    fig.legend(*axes[0].get_legend_handles_labels(), loc="upper left", bbox_to_anchor=(0.9, 0.9))
    fig.subplots_adjust(right=0.85)
    assert faults(fig) == []


def test_raw_column_names_as_labels_and_legend_titles_are_refused():
    data = pd.DataFrame({"time_s": [0, 1, 2, 0, 1, 2], "p50_e2el_ms": [1, 2, 3, 2, 3, 4],
                         "label": ["SJF"] * 3 + ["FCFS"] * 3})
    fig, ax = plt.subplots(figsize=(5, 3))
    sns.lineplot(data=data, x="time_s", y="p50_e2el_ms", hue="label", ax=ax)
    sns.move_legend(ax, "upper left", bbox_to_anchor=(1.01, 1))
    found = [f.detail for f in faults(fig) if f.rule == "raw column name"]
    assert [d.split(" of ")[0] for d in found] == ["x-axis label 'time_s'", "y-axis label 'p50_e2el_ms'", "title 'label'"]
    ax.set(xlabel="time (s)", ylabel="median E2E latency (ms)")
    ax.get_legend().set_title("scheduler")
    assert faults(fig) == []
    assert is_raw_name("g_per_s") and is_raw_name(" value ") and not is_raw_name("offered rate (req/s)")
    assert not is_raw_name("sjf-uncached") and not is_raw_name("G")


def test_pandas_intervals_as_tick_labels_are_refused_and_put_in_words():
    from schedlab.report import interval_words

    bins = ["(-0.001, 512.0]", "(512.0, 1024.0]", "(1024.0, 8192.0]"]
    fig, ax = plt.subplots(figsize=(6, 3))
    ax.bar(bins, [30, 20, 10])
    ax.set(xlabel="prompt tokens", ylabel="requests served")
    assert [f.rule for f in faults(fig)] == ["interval in pandas' notation"] * 3
    assert [interval_words(b) for b in bins] == ["≤ 512", "513–1,024", "1,025–8,192"]
    assert interval_words("(8192.0, inf]") == "> 8,192" and interval_words("[0, 10)") == "0–9"
    assert interval_words("sjf") == "sjf"
    ax.set_xticks(range(3), [interval_words(b) for b in bins])
    assert faults(fig) == []


def test_default_facet_titles_are_refused():
    data = pd.DataFrame({"x": [1, 2, 1, 2], "y": [1, 2, 2, 1], "workload": ["a", "a", "b", "b"]})
    g = sns.relplot(data=data, x="x", y="y", col="workload", kind="line", height=2.5)
    g.set_axis_labels("rate (req/s)", "latency (ms)")
    with pytest.raises(UnreadableFigure, match=r"facet title in the 'column = value' form .*: 'workload = a'; 'workload = b'"):
        check(g.figure, "facets")
    g.set_titles("{col_name}")
    assert faults(g.figure) == []


def test_tick_labels_that_overlap_their_neighbours_are_refused():
    fig, ax = plt.subplots(figsize=(3, 2.5))
    names = [f"scheduler number {i}" for i in range(6)]
    ax.bar(names, range(6))
    ax.set(xlabel="scheduler", ylabel="capacity (req/s)")
    found = faults(fig)
    assert {f.rule for f in found} == {"tick labels overlap"}
    assert "'scheduler number 0' (x tick of" in found[0].detail and "'scheduler number 1' (x tick of" in found[0].detail
    ax.tick_params(axis="x", rotation=90)
    assert faults(fig) == []


def test_texts_over_each_other_are_refused_across_panels_too():
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot([0, 1], [0, 1])
    ax.set(xlabel="P50 (s)", ylabel="P99 (s)")
    ax.text(0.5, 0.5, "sjf")
    ax.text(0.5, 0.5, "hrrn")
    assert [str(f) for f in faults(fig)] == ["texts overlap: 'sjf' (text in the panel of 'P99 (s)' against 'P50 (s)') "
                                             "and 'hrrn' (text in the panel of 'P99 (s)' against 'P50 (s)')"]
    ax.texts[1].set_position((0.1, 0.8))
    assert faults(fig) == []
    # Facet titles wider than their facets run into each other.
    fig, axes = plt.subplots(1, 3, figsize=(6, 2.5))
    for ax in axes:
        ax.set_title("SJF, second-language token ratio 4")
    assert "texts overlap" in rules(fig)


def test_labels_over_a_neighbouring_panel_are_refused():
    fig, axes = plt.subplots(1, 2, figsize=(6, 3))
    fig.subplots_adjust(wspace=0.05)
    for ax, top in zip(axes, (1, 100_000)):
        ax.plot([0, 1], [0, top])
        ax.set(xlabel="rate (req/s)", ylabel="median TTFT (ms)", title=f"up to {top:,}")
    axes[1].yaxis.set_major_formatter("{x:,.0f}")
    found = faults(fig)
    assert {f.rule for f in found} == {"text over another panel"}
    assert "'median TTFT (ms)' (y-axis label of panel 'up to 100,000') lies over panel 'up to 1'" in [f.detail for f in found]
    fig.tight_layout()
    assert faults(fig) == []


def test_a_number_wider_than_its_heatmap_cell_is_refused():
    values = pd.DataFrame(np.full((3, 6), 12345.678), index=list("abc"), columns=list("uvwxyz"))
    fig, ax = plt.subplots(figsize=(3, 2))
    sns.heatmap(values, annot=True, fmt=".1f", cbar=False, ax=ax)
    ax.set(xlabel="workload", ylabel="scheduler")
    assert "number wider than its heatmap cell" in rules(fig)
    fig, ax = plt.subplots(figsize=(9, 2.5))
    sns.heatmap(values, annot=True, fmt=".3g", cbar=False, ax=ax)
    ax.set(xlabel="workload", ylabel="scheduler")
    assert faults(fig) == []


def test_text_off_the_canvas_or_clipped_is_refused():
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot([0, 1], [0, 1])
    ax.set(xlabel="rate (req/s)", ylabel="latency (ms)")
    far = fig.text(1.3, 0.5, "a note outside the saved area")
    far.set_in_layout(False)  # not part of what a tight save keeps
    assert rules(fig) == ["text off the canvas"]
    far.remove()
    ax.text(0.95, 0.5, "a label cut by its panel", clip_on=True)
    assert rules(fig) == ["text clipped"]


def test_save_figure_writes_nothing_for_a_refused_figure(tmp_path):
    fig, _ = crossing_lines("center")
    with pytest.raises(UnreadableFigure, match="figure 'bad' is not readable"):
        save_figure(fig, tmp_path, "bad")
    assert not list(tmp_path.iterdir())
    fig, _ = crossing_lines("upper left", bbox_to_anchor=(1.01, 1))
    save_figure(fig, tmp_path, "good")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["good.pdf", "good.png"]


def test_legend_beside_moves_every_entry_off_the_data_once():
    from schedlab.report import legend_beside

    fig, axes = plt.subplots(1, 2, figsize=(8, 3))
    for ax in axes:
        ax.plot([0, 1], [0, 1], label="rising")
        ax.plot([0, 1], [1, 0], label="falling")
        ax.set(xlabel="time (s)", ylabel="latency (ms)", title=f"panel {len(fig.legends)}")
        ax.legend(loc="center", title="direction")
    axes[1].set_title("right")
    axes[1].axhline(0.5, color="k", ls="--", label="target")  # labelled after the panel's legend was drawn
    assert rules(fig) == ["legend over data"]
    fig.tight_layout()
    legend = legend_beside(fig)
    assert [t.get_text() for t in legend.get_texts()] == ["rising", "falling", "target"]
    assert legend.get_title().get_text() == "direction"
    assert all(ax.get_legend() is None for ax in axes) and faults(fig) == []


def test_plain_log_ticks_label_in_plain_numbers():
    from schedlab.report import plain_log_ticks

    shown = {}
    for low, high in ((70, 300), (60, 16000), (0.5, 2e5)):
        fig, ax = plt.subplots(figsize=(3, 3))
        ax.plot([0, 1], [low, high])
        ax.set(yscale="log", xlabel="rate (req/s)", ylabel="latency (ms)")
        plain_log_ticks(ax.yaxis)
        fig.canvas.draw()
        locs = [*ax.get_yticks(), *ax.get_yticks(minor=True)]
        view = sorted(ax.get_ylim())
        shown[(low, high)] = sorted((loc, t.get_text()) for t, loc in zip(ax.get_yticklabels(which="both"), locs)
                                    if t.get_text() and view[0] <= loc <= view[1])
        assert faults(fig) == []
    assert {k: [label for _, label in v] for k, v in shown.items()} == {
        (70, 300): ["70", "100", "200", "300"], (60, 16000): ["100", "1,000", "10,000"],
        (0.5, 2e5): ["1", "10", "100", "1,000", "10,000", "100,000"]}
