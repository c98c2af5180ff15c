"""How a paper's numbers are counted against ours: one rule, used by every paper notebook and by
the pipeline's results page.

Every number a paper reports gets exactly one **role** (:data:`ROLES`):

- ``fitted``: a calibration target; matching it says how well the fit went, nothing more.
- ``derived``: determined by fitted values, so matching it is not evidence either: it equals a
  fitted cell because the treatment cannot act there (the treatment's value equals the
  baseline's on every trace seed, :func:`unchanged_on_every_seed`), or it follows from fitted
  numbers by arithmetic. The row says which (``reason``).
- ``predicted``: nothing fitted determines it. Only these rows measure the model.
- ``bound``: a claim the paper states as a limit (``"<= 1"``, ``">= 99"``), tested on the
  variant the paper describes; met or not.
- ``not identified``: a number the data cannot pin down on its own (a coefficient collinear with
  others); shown, never counted as a match.

Every row carries our value as the **median over trace seeds** (``ours``) with the 5-95 % band
of the seeds (``low``, ``high``) when it was run on several. Two kinds of number are judged
apart:

- an **absolute** number is *within* when ours is within :data:`TOLERANCE` percent of the
  paper's, and *in band* when the paper's value lies inside our seed band;
- a **change** in percent (units :data:`CHANGE_UNITS`) is judged by the seeds alone: it
  matches when the paper's change lies inside our band, i.e. when the noise of one run's
  arrivals (the paper reports one run) can explain the difference; a change whose sign or size
  that noise cannot explain is a miss, however few points it is off. A change run on fewer than
  :data:`MIN_BAND_SEEDS` seeds has no band and is not judged.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

#: The roles of a paper's number, in the order tables list them.
ROLES = ("fitted", "derived", "predicted", "bound", "not identified")
#: An absolute number is within when ours is within this many percent of the paper's.
TOLERANCE = 15.0
#: Units of a change in percent (judged by the seed band, not by a tolerance).
CHANGE_UNITS = ("% vs FCFS",)
#: Units whose error is a difference in percentage points, not a relative error.
POINT_UNITS = CHANGE_UNITS + ("%",)
#: The seed band's percentiles.
BAND = (5.0, 95.0)
#: The fewest trace seeds a band is drawn from; fewer, and a change is not judged.
MIN_BAND_SEEDS = 5
#: Relative difference below which a treatment's value counts as the baseline's own.
SAME = 1e-9

COLUMNS = ["quantity", "unit", "kind", "paper", "ours", "low", "high", "seeds", "role", "reason", "group", "bound"]


def seed_band(values: Iterable[float]) -> dict:
    """The median of ``values`` (one per trace seed, NaN ignored) and their :data:`BAND`
    percentiles: ``{"ours", "low", "high", "seeds"}``."""
    v = np.asarray([x for x in values if x is not None and np.isfinite(x)], dtype=float)
    if v.size == 0:
        return {"ours": np.nan, "low": np.nan, "high": np.nan, "seeds": 0}
    low, high = np.percentile(v, BAND)
    return {"ours": float(np.median(v)), "low": float(low), "high": float(high), "seeds": int(v.size)}


def unchanged_on_every_seed(treatment: pd.Series, baseline: pd.Series) -> bool:
    """Whether a treatment's value equals the baseline's on every trace seed both ran (two
    series indexed by seed): then the treatment did not act at that cell, and its number is the
    fitted baseline's."""
    both = pd.concat({"t": treatment, "b": baseline}, axis=1).dropna()
    if both.empty:
        return False
    return bool(np.all(np.abs(both["t"] - both["b"]) <= SAME * np.maximum(np.abs(both["b"]), 1e-300)))


def paper_vs_ours(rows: list[dict], why: dict[str, str] | None = None, tolerance: float = TOLERANCE) -> pd.DataFrame:
    """One row per number the paper reports, from dicts with ``quantity``, ``unit``, ``paper``,
    ``ours`` and ``role`` (:data:`ROLES`), and optionally ``low``/``high``/``seeds`` (the seed
    band, :func:`seed_band`), ``reason`` (why a row is ``derived``: required there), ``group``
    (the key of ``why``) and ``bound`` (a bound's ``"<= x"`` or ``">= x"``).

    Adds ``kind`` (``absolute`` or ``change``), ``error`` (percent of the paper's value for an
    absolute number, percentage points for a change or a unit of percent), ``within`` (an absolute number within
    ``tolerance``; a bound met), ``in_band`` (the paper's value inside our seed band), ``match``
    (the row's verdict under its kind: ``within`` for absolute numbers and bounds, ``in_band``
    for changes; empty for ``not identified`` rows and changes with no band) and ``why`` (the
    sentence of the row's group, on rows that do not match)."""
    table = pd.DataFrame(rows).reindex(columns=COLUMNS)
    unknown = set(table["role"]) - set(ROLES)
    if unknown:
        raise ValueError(f"unknown roles {sorted(unknown)}; use {', '.join(ROLES)}")
    unexplained = table[(table["role"] == "derived") & table["reason"].isna()]
    if len(unexplained):
        raise ValueError(f"derived rows need a reason: {', '.join(unexplained['quantity'])}")
    table["kind"] = np.where(table["unit"].isin(CHANGE_UNITS), "change", "absolute")
    paper, ours = table["paper"].astype(float), table["ours"].astype(float)
    is_change = (table["kind"] == "change").to_numpy()
    points = table["unit"].isin(POINT_UNITS).to_numpy()
    table["error"] = np.where(points, ours - paper, (ours / paper - 1) * 100)
    table["error unit"] = np.where(points, "points", "%")
    table["seeds"] = table["seeds"].fillna(1).astype(int)
    banded = table["seeds"] >= MIN_BAND_SEEDS
    low, high = table["low"].astype(float), table["high"].astype(float)
    in_band = banded & (low <= paper) & (paper <= high)
    within = table["error"].abs() <= tolerance
    is_bound = (table["role"] == "bound").to_numpy()
    within = within.to_numpy().copy()
    within[is_bound] = [_meets(o, b) for o, b in zip(ours[is_bound], table.loc[is_bound, "bound"])]
    match = np.where(is_change, np.where(banded, in_band, np.nan), within).astype(object)
    match[(table["role"] == "not identified").to_numpy()] = np.nan
    table["within"] = np.where(is_change, "", np.where(within, "yes", "no"))
    table["in_band"] = np.where(banded & ~is_bound, np.where(in_band, "yes", "no"), "")
    table["match"] = [("" if m is None or (isinstance(m, float) and np.isnan(m)) else ("yes" if m else "no")) for m in match]
    table["why"] = np.where(table["match"] == "no", [(why or {}).get(g, "") for g in table["group"]], "")
    table["reason"] = table["reason"].astype(object).fillna("")
    table["bound"] = table["bound"].astype(object).fillna("")
    return table.drop(columns="group")


def _meets(value: float, bound: str) -> bool:
    op, limit = bound.split()
    return bool(value <= float(limit)) if op == "<=" else bool(value >= float(limit))


def counts(table: pd.DataFrame | list[dict]) -> dict:
    """The counts of a :func:`paper_vs_ours` table (or its records), one entry per role and
    kind: ``fitted`` and ``bound`` as (met, of), ``derived`` and ``not identified`` as numbers
    of rows, ``predicted`` as (within, in band, of) over absolute numbers, ``changes`` as
    (paper's change inside our band, judged, of) over predicted changes."""
    t = pd.DataFrame(table)
    if t.empty:
        return {"fitted": (0, 0), "derived": 0, "predicted": (0, 0, 0), "changes": (0, 0, 0), "bound": (0, 0),
                "not identified": 0}
    role, kind = t["role"], t["kind"]
    yes = lambda col, rows: int((t.loc[rows, col] == "yes").sum())
    fitted, bound = role == "fitted", role == "bound"
    absolute, change = (role == "predicted") & (kind == "absolute"), (role == "predicted") & (kind == "change")
    return {
        "fitted": (yes("within", fitted), int(fitted.sum())),
        "derived": int((role == "derived").sum()),
        "predicted": (yes("within", absolute), yes("in_band", absolute), int(absolute.sum())),
        "changes": (yes("match", change), int((t.loc[change, "match"] != "").sum()), int(change.sum())),
        "bound": (yes("within", bound), int(bound.sum())),
        "not identified": int((role == "not identified").sum()),
    }


def count_line(table: pd.DataFrame | list[dict], tolerance: float = TOLERANCE) -> str:
    """The counts of :func:`counts` in words, one part per role present."""
    c = counts(table)
    parts = []
    if c["predicted"][2]:
        w, b, n = c["predicted"]
        parts.append(f"predicted: {w} of {n} within {tolerance:g} % of our median, the paper's value inside our "
                     f"seed band for {b}")
    if c["changes"][2]:
        m, judged, n = c["changes"]
        parts.append(f"changes vs the baseline: the paper's inside our seed band for {m} of {judged} judged"
                     + (f" ({n - judged} on too few seeds to judge)" if judged < n else ""))
    if c["bound"][1]:
        parts.append("bounds met: {} of {}".format(*c["bound"]))
    if c["fitted"][1]:
        parts.append("fitted: {} of {} within {:g} %".format(*c["fitted"], tolerance))
    if c["derived"]:
        parts.append(f"derived from the fit: {c['derived']}")
    if c["not identified"]:
        parts.append(f"not identified: {c['not identified']}")
    return "; ".join(parts)


def derived_rows(table: pd.DataFrame) -> pd.DataFrame:
    """The ``derived`` rows of a :func:`paper_vs_ours` table with their reasons (every paper
    notebook lists them)."""
    return table.loc[table["role"] == "derived", ["quantity", "paper", "ours", "reason"]]
