"""What makes a saved figure unreadable, found from its drawn artists: a legend over plotted
points, lines or bars; raw column names as labels, pandas' intervals as tick labels; facets
titled ``column = value``; texts that overlap (tick labels, titles, annotations, legends), that
lie over another panel or that a heatmap cell cannot hold; texts that run off the canvas or
are clipped. :func:`faults` lists them, :func:`check` refuses a figure that has any
(``schedlab.report.save_figure`` calls it on every figure it saves).

Everything is measured in display coordinates after the figure is drawn, so the layout is the
one the saved file has (``tight_layout``, constrained layout and seaborn's grids included)."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
from matplotlib.collections import Collection, LineCollection, QuadMesh
from matplotlib.lines import Line2D
from matplotlib.transforms import Bbox

#: A label in snake_case (``p50_e2el_ms``, ``time_s``): a column's name, not words.
_SNAKE_CASE = re.compile(r"[a-z][a-z0-9]*(_[a-z0-9]+)+")
#: Names that data-frame plumbing gives a column (``melt``, ``assign(label=...)``): as a label
#: they tell the reader nothing.
PLACEHOLDERS = frozenset({"label", "value", "variable", "index", "hue", "level_0"})
#: An interval as pandas prints it (``(-0.001, 512.0]``): a bin's code, not a range in words.
INTERVAL = re.compile(r"([(\[])\s*(-?[\d.e+-]+|-?inf)\s*,\s*(-?[\d.e+-]+|inf)\s*([)\]])")
#: A facet title of seaborn's default form, ``column = value`` (and ``a = x | b = y``).
_DEFAULT_FACET_TITLE = re.compile(r"^[A-Za-z_][\w ]* = ")
#: Boxes may touch: they overlap when they share more than this much in both directions (points).
TOLERANCE_PT = 0.75
#: At most this many findings of one rule are spelled out in a refusal.
SHOWN = 4


@dataclass(frozen=True)
class Fault:
    """One reason a figure is unreadable: ``rule`` (what kind) and ``detail`` (where)."""

    rule: str
    detail: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.detail}"


class UnreadableFigure(ValueError):
    """A figure refused by :func:`check`; the message names the figure and every fault."""


def check(fig, name: str) -> None:
    """Raise :class:`UnreadableFigure` naming ``name`` and its faults when ``fig`` has any."""
    found = faults(fig)
    if not found:
        return
    lines = []
    for rule in dict.fromkeys(f.rule for f in found):
        these = [f.detail for f in found if f.rule == rule]
        more = f" (and {len(these) - SHOWN} more)" if len(these) > SHOWN else ""
        lines.append(f"  {rule}: " + "; ".join(these[:SHOWN]) + more)
    raise UnreadableFigure(f"figure {name!r} is not readable:\n" + "\n".join(lines))


def faults(fig) -> list[Fault]:
    """Every fault of ``fig``, rule by rule (drawing it first)."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    axes = [ax for ax in fig.axes if ax.get_visible()]
    legends = [(leg, f"the legend of {_panel(ax)}") for ax in axes if (leg := ax.get_legend()) and leg.get_visible()]
    legends += [(leg, "the figure's legend") for leg in fig.legends if leg.get_visible()]
    texts = _texts(fig, axes, renderer)
    boxes = texts + [(where, leg.get_window_extent(renderer), None, leg, None) for leg, where in legends]
    tol = TOLERANCE_PT * fig.dpi / 72
    return (_legends_over_data(legends, axes, renderer, tol) + _raw_names(axes, legends) + _facet_titles(axes)
            + _overlaps(boxes, tol) + _over_other_panels(texts, axes, tol) + _overflowing_cells(axes, renderer, tol)
            + _off_canvas(fig, boxes, renderer, tol))


# -- where things are -------------------------------------------------------------------------
def _panel(ax) -> str:
    """How a message names an axes: its title, else its labels."""
    title = ax.get_title() or ax.get_title("left") or ax.get_title("right")
    if title:
        return f"panel {_short(title)!r}"
    return f"the panel of {_short(ax.get_ylabel())!r} against {_short(ax.get_xlabel())!r}"


def _short(text: str, width: int = 40) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _drawn_ticks(axis):
    """The ticks the last draw put on ``axis`` (matplotlib's own selection: in the view
    interval, minor ticks on a major one dropped)."""
    return axis._update_ticks() if axis.get_visible() else []


def _texts(fig, axes, renderer) -> list[tuple]:
    """Every visible, non-empty text: the figure's texts, and each axes' titles, axis labels,
    offset texts, drawn tick labels and annotations, as (description, display box, the axis
    whose tick it is or None, the text, the axes it belongs to or None)."""
    out = []

    def add(text, where, axis=None, ax=None):
        if text.get_visible() and text.get_text().strip():
            box = text.get_window_extent(renderer)
            if box.width > 0 and box.height > 0:
                out.append((f"{_short(text.get_text())!r} ({where})", box, axis, text, ax))

    for text in fig.texts:
        add(text, "figure text")
    for ax in axes:
        where = _panel(ax)
        for title in (ax.title, ax._left_title, ax._right_title):
            add(title, "a title", ax=ax)
        if not ax.axison:
            continue
        for axis in (ax.xaxis, ax.yaxis):
            if not axis.get_visible():
                continue
            name = axis.axis_name
            add(axis.label, f"{name}-axis label of {where}", ax=ax)
            add(axis.get_offset_text(), f"{name}-axis offset of {where}", ax=ax)
            for tick in _drawn_ticks(axis):
                for label in (tick.label1, tick.label2):
                    add(label, f"{name} tick of {where}", axis, ax)
        for text in ax.texts:
            add(text, f"text in {where}", ax=ax)
    return out


# -- the rules --------------------------------------------------------------------------------
def _is_data(transform, ax) -> bool:
    """Whether an artist is placed in ``ax``'s data coordinates (not a reference line or span
    drawn across the axes, such as ``axhline``, ``axvspan``)."""
    return transform.contains_branch(ax.transData)


def _covers(artist, ax, region: Bbox, dpi: float) -> bool:
    """Whether ``artist``, a plotted element of ``ax``, is drawn inside ``region`` (display)."""
    if not artist.get_visible():
        return False
    if isinstance(artist, Line2D):
        if not _is_data(artist.get_transform(), ax):
            return False
        path = artist.get_transform().transform_path(artist.get_path()).cleaned(remove_nans=True)
        if artist.get_linestyle() not in ("None", "", " ") and len(path.vertices) > 1:
            if path.intersects_bbox(region, filled=False):
                return True
        if artist.get_marker() in (None, "None", "", " "):
            return False
        return _points_in(path.vertices, artist.get_markersize() / 2 * dpi / 72, region)
    if isinstance(artist, QuadMesh):
        return _is_data(artist.get_transform(), ax) and _overlap(artist.get_window_extent(), region, 0)
    if isinstance(artist, Collection):
        offsets = artist.get_offsets()
        if len(offsets) and _is_data(artist.get_offset_transform(), ax):
            sizes = np.broadcast_to(artist.get_sizes() if len(artist.get_sizes()) else [36.0], (len(offsets),))
            return _points_in(artist.get_offset_transform().transform(offsets), np.sqrt(sizes) / 2 * dpi / 72, region)
        if not _is_data(artist.get_transform(), ax):
            return False
        filled = not isinstance(artist, LineCollection)
        return any(artist.get_transform().transform_path(p).intersects_bbox(region, filled=filled)
                   for p in artist.get_paths())
    # A patch: a bar, a histogram's bin, a polygon in data coordinates.
    if not _is_data(artist.get_transform(), ax):
        return False
    box = artist.get_window_extent()
    if box.width < 1 or box.height < 1:  # a bar of height 0 draws nothing
        return False
    return artist.get_transform().transform_path(artist.get_path()).intersects_bbox(region, filled=True)


def _points_in(points, radius, region: Bbox) -> bool:
    points = np.asarray(points, dtype=float).reshape(-1, 2)
    radius = np.broadcast_to(radius, (len(points),))
    ok = np.isfinite(points).all(axis=1)
    p, r = points[ok], radius[ok]
    return bool(((p[:, 0] + r > region.x0) & (p[:, 0] - r < region.x1)
                 & (p[:, 1] + r > region.y0) & (p[:, 1] - r < region.y1)).any())


def _kind(artist) -> str:
    if isinstance(artist, Line2D):
        return "lines" if artist.get_linestyle() not in ("None", "", " ") else "points"
    if isinstance(artist, QuadMesh):
        return "cells"
    if isinstance(artist, Collection):
        return "points" if len(artist.get_offsets()) and not isinstance(artist, LineCollection) else "areas"
    return "bars"


def _legends_over_data(legends, axes, renderer, tol) -> list[Fault]:
    out = []
    for leg, where in legends:
        box = leg.get_window_extent(renderer)
        # Shrunk by the tolerance: a frame touching a point is not over it.
        box = Bbox.from_extents(box.x0 + tol, box.y0 + tol, box.x1 - tol, box.y1 - tol)
        for ax in axes:
            region = Bbox.intersection(box, ax.bbox)
            if region is None or region.width <= 0 or region.height <= 0:
                continue
            hit = sorted({_kind(a) for a in (*ax.lines, *ax.collections, *ax.patches)
                          if _covers(a, ax, region, ax.figure.dpi)})
            if hit:
                out.append(Fault("legend over data", f"{where} covers {' and '.join(hit)} of {_panel(ax)}"))
    return out


def is_raw_name(text: str) -> bool:
    """Whether a label is a data frame's column name rather than words: snake_case, or one of
    :data:`PLACEHOLDERS`."""
    text = text.strip()
    return bool(_SNAKE_CASE.fullmatch(text)) or text in PLACEHOLDERS


def _raw_names(axes, legends) -> list[Fault]:
    """Column names as axis labels, titles, legend titles or entries; pandas' intervals as tick
    labels or legend entries."""
    out = []
    for ax in axes:
        for what, text in (("x-axis label", ax.get_xlabel() if ax.xaxis.get_visible() else ""),
                           ("y-axis label", ax.get_ylabel() if ax.yaxis.get_visible() else ""),
                           ("title", ax.get_title())):
            if is_raw_name(text):
                out.append(Fault("raw column name", f"{what} {text!r} of {_panel(ax)}"))
    for leg, where in legends:
        title = leg.get_title().get_text() if leg.get_title().get_visible() else ""
        if is_raw_name(title):
            out.append(Fault("raw column name", f"title {title!r} of {where}"))
        for t in leg.get_texts():
            if is_raw_name(t.get_text()):
                out.append(Fault("raw column name", f"entry {t.get_text()!r} of {where}"))
            if INTERVAL.fullmatch(t.get_text().strip()):
                out.append(Fault("interval in pandas' notation", f"entry {t.get_text()!r} of {where}"))
    for ax in axes:
        for axis in (ax.xaxis, ax.yaxis):
            for tick in _drawn_ticks(axis):
                if tick.label1.get_visible() and INTERVAL.fullmatch(tick.label1.get_text().strip()):
                    out.append(Fault("interval in pandas' notation", f"tick {tick.label1.get_text()!r} of {_panel(ax)}"))
    return out


def _facet_titles(axes) -> list[Fault]:
    return [Fault("facet title in the 'column = value' form (title facets in words: FacetGrid.set_titles)",
                  repr(ax.get_title()))
            for ax in axes if _DEFAULT_FACET_TITLE.match(ax.get_title())]


def _overlap(a: Bbox, b: Bbox, tol: float) -> bool:
    return min(a.x1, b.x1) - max(a.x0, b.x0) > tol and min(a.y1, b.y1) - max(a.y0, b.y0) > tol


def _overlaps(boxes, tol) -> list[Fault]:
    """Pairs of texts (legends counted as one box each) drawn over each other."""
    if len(boxes) < 2:
        return []
    e = np.array([[b.x0, b.y0, b.x1, b.y1] for _, b, *_ in boxes])
    w = np.minimum(e[:, None, 2], e[None, :, 2]) - np.maximum(e[:, None, 0], e[None, :, 0])
    h = np.minimum(e[:, None, 3], e[None, :, 3]) - np.maximum(e[:, None, 1], e[None, :, 1])
    i, j = np.nonzero(np.triu((w > tol) & (h > tol), k=1))
    out = []
    for a, b in zip(i, j):
        rule = ("tick labels overlap" if boxes[a][2] is not None and boxes[a][2] is boxes[b][2]
                else "texts overlap")
        out.append(Fault(rule, f"{boxes[a][0]} and {boxes[b][0]}"))
    return out


def _over_other_panels(texts, axes, tol) -> list[Fault]:
    """A panel's titles, labels, ticks and annotations drawn inside another panel (a twin, on the
    same area, excepted)."""
    out = []
    for where, box, _, _, owner in texts:
        if owner is None:
            continue
        for ax in axes:
            if ax is not owner and ax.bbox.bounds != owner.bbox.bounds and _overlap(box, ax.bbox, tol):
                out.append(Fault("text over another panel", f"{where} lies over {_panel(ax)}"))
    return out


def _overflowing_cells(axes, renderer, tol) -> list[Fault]:
    """Annotations of a heatmap (texts anchored in a cell of a mesh) wider or taller than their cell."""
    out = []
    for ax in axes:
        for mesh in (c for c in ax.collections if isinstance(c, QuadMesh)):
            corners = mesh.get_transform().transform(mesh.get_coordinates().reshape(-1, 2))
            corners = corners.reshape(mesh.get_coordinates().shape)
            xs, ys = np.sort(corners[0, :, 0]), np.sort(corners[:, 0, 1])
            for text in ax.texts:
                if not (text.get_visible() and text.get_text().strip()):
                    continue
                x, y = text.get_transform().transform(text.get_position())
                i, j = np.searchsorted(xs, x) - 1, np.searchsorted(ys, y) - 1
                if not (0 <= i < len(xs) - 1 and 0 <= j < len(ys) - 1):
                    continue
                box = text.get_window_extent(renderer)
                if box.width > xs[i + 1] - xs[i] + tol or box.height > ys[j + 1] - ys[j] + tol:
                    out.append(Fault("number wider than its heatmap cell", f"{text.get_text()!r} in {_panel(ax)}"))
    return out


def _off_canvas(fig, boxes, renderer, tol) -> list[Fault]:
    """Texts outside what a tight save keeps of the figure, and texts cut by their clip box."""
    canvas = fig.get_tightbbox(renderer).transformed(fig.dpi_scale_trans)
    out = []
    for where, box, _, artist, _ in boxes:
        if artist.get_clip_on() and artist.get_clip_box() is not None:
            continue  # cut by its clip box: the rule below
        if box.x0 < canvas.x0 - tol or box.x1 > canvas.x1 + tol or box.y0 < canvas.y0 - tol or box.y1 > canvas.y1 + tol:
            out.append(Fault("text off the canvas", where))
    for ax in fig.axes:
        for text in [*ax.texts, ax.title]:
            clip = text.get_clip_box() if text.get_clip_on() else None
            if clip is None or not (text.get_visible() and text.get_text().strip()):
                continue
            box = text.get_window_extent(renderer)
            if box.x0 < clip.x0 - tol or box.x1 > clip.x1 + tol or box.y0 < clip.y0 - tol or box.y1 > clip.y1 + tol:
                out.append(Fault("text clipped", f"{text.get_text()!r} in {_panel(ax)}"))
    return out

