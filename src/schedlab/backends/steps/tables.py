"""Reading a served engine's step and request logs (:mod:`schedlab.backends.steps.log`).

A step's time (:func:`step_table`) is the period from its ``schedule()`` to the next one
while the engine stays busy (synchronous scheduling: schedule, execute, update, then the
engine loop's input and output handling, as a served request sees it); a step after which
the engine had nothing left to do ends at its ``update_from_output()``, so idle time between
requests never counts as a step. The table has the profile columns
(:data:`~schedlab.contracts.PROFILE_COLUMNS`), so the step-time fit reads it as a profile.
"""


from __future__ import annotations

import os
import re
import time
from pathlib import Path

import numpy as np
import pandas as pd

from schedlab.backends.steps.log import RAW_COLUMNS, REQUEST_COLUMNS
from schedlab.contracts import PROFILE_COLUMNS


def _written(path: str | os.PathLike, columns, **read) -> pd.DataFrame:
    """The complete rows of a log written so far (a line being written is left out)."""
    from io import StringIO

    text = Path(path).read_text() if Path(path).exists() else ""
    complete = text[: text.rfind("\n") + 1]
    if complete.count("\n") < 2:
        return pd.DataFrame(columns=list(columns))
    return pd.read_csv(StringIO(complete), **read)


def read_step_log(path: str | os.PathLike) -> pd.DataFrame:
    """The raw step rows written so far."""
    return _written(path, RAW_COLUMNS)


def request_timeline(requests: pd.DataFrame, log: pd.DataFrame, token: str, wall_t0: float) -> pd.DataFrame:
    """``requests`` (a replay's results, by trace position) with the scheduler's times of each
    from its request log (rows whose vLLM request id holds ``<token>-<position>``, the
    ``X-Request-Id`` the client sent), in seconds from the replay's start (``wall_t0``, the
    wall-clock time of the client's zero): ``admitted_s`` (reached the scheduler),
    ``first_scheduled_s`` (the contract's column) and ``engine_finish_s`` (its last token)."""
    pattern = re.compile(rf"(?:^|-){re.escape(token)}-(\d+)(?:-|$)")
    pos = log["request_id"].astype(str).map(lambda rid: (m := pattern.search(rid)) and int(m.group(1)))
    mine = log.assign(pos=pos).dropna(subset=["pos"]).astype({"pos": int}).set_index("pos")
    mine = mine[~mine.index.duplicated()].reindex(range(len(requests)))
    return requests.assign(admitted_s=(mine["t_added"] - wall_t0).to_numpy(),
                           first_scheduled_s=(mine["t_scheduled"] - wall_t0).to_numpy(),
                           engine_finish_s=(mine["t_finished"] - wall_t0).to_numpy())


def read_request_log(path: str | os.PathLike) -> pd.DataFrame:
    """The scheduler's finished-request rows written so far."""
    return _written(path, REQUEST_COLUMNS, dtype={"request_id": str})


def step_table(raw: pd.DataFrame, *, hardware: str, model: str, source: str = "vllm-served") -> pd.DataFrame:
    """One row per step with its time (``time_s``, see the module doc) and the profile columns
    first, then the prefill pairs, request counts and the raw time stamps."""
    raw = raw.sort_values("t_schedule", kind="stable").reset_index(drop=True)
    start = raw["t_schedule"].to_numpy(float)
    own = raw["t_update"].to_numpy(float) - start
    period = np.append(np.diff(start), np.nan)
    busy = raw["busy_after"].to_numpy(bool) & np.isfinite(period)
    table = raw.drop(columns=["busy_after"]).assign(time_s=np.where(busy, period, own), busy_after=busy)
    table.insert(0, "source", source)
    table.insert(1, "hardware", hardware)
    table.insert(2, "model", model)
    first = list(PROFILE_COLUMNS)
    return table[first + [c for c in table.columns if c not in first]]


def steps_between(table: pd.DataFrame, start: float, end: float) -> pd.DataFrame:
    """Steps scheduled in the wall-clock window [start, end] (one replay), with ``t_s``, the
    schedule time from ``start``."""
    inside = table[(table["t_schedule"] >= start) & (table["t_schedule"] <= end)]
    return inside.assign(t_s=inside["t_schedule"] - start).reset_index(drop=True)


def wait_for_idle(path: str | os.PathLike, since: float, timeout_s: float = 30.0) -> pd.DataFrame:
    """The raw log once its last row since ``since`` is a step after which the engine was idle
    (the scheduler writes its buffer then, before the replay's last response is sent; this
    waits out a slow write), or as it is after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        raw = read_step_log(path)
        recent = raw[raw["t_schedule"] >= since]
        if (len(recent) and not recent["busy_after"].iloc[-1]) or time.monotonic() > deadline:
            return raw
        time.sleep(0.1)
