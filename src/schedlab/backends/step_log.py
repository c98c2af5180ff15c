"""Every step of a served engine: its composition and timing, logged by the scheduler.

With ``"step_log": "<path>"`` in the ``schedlab`` section of ``--additional-config``,
:class:`~schedlab.backends.vllm_scheduler.SchedlabScheduler` appends one CSV row per engine
step that ran the model (:data:`RAW_COLUMNS`): the wall-clock time at which ``schedule()``
was called and at which ``update_from_output()`` returned, the step's composition as
schedlab's engine counts it (the features of :class:`~schedlab.engine.steptime.StepTimeModel`
and the prefill attention pairs), how many requests it scheduled, how many were running and
waiting as it was scheduled (a request finishing in it counts as running), and whether requests were left unfinished after it (``busy_after``). Rows are
buffered in memory and written when the engine runs out of work (the end of a replay) or
after :data:`FLUSH_ROWS` rows, so logging costs a tuple per step.

Beside it (:func:`request_log_path`) the scheduler writes one row per finished request
(:data:`REQUEST_COLUMNS`): the wall-clock times at which the request reached the scheduler
(``add_request``), was first scheduled and finished, under vLLM's request id, which holds the
``X-Request-Id`` the client sent. Joined with the client's own times (:func:`request_timeline`)
they split a request's time outside the scheduler into the way in (client, HTTP and API server,
engine core input) and the way out (the last token back to the client).

A step's time (:func:`step_table`) is the period from its ``schedule()`` to the next one
while the engine stays busy (synchronous scheduling: schedule, execute, update, then the
engine loop's input and output handling, as a served request sees it); a step after which
the engine had nothing left to do ends at its ``update_from_output()``, so idle time between
requests never counts as a step. The table has the profile columns
(:data:`~schedlab.contracts.PROFILE_COLUMNS`), so the step-time fit reads it as a profile.
"""

from __future__ import annotations

import csv
import os
import re
import time
from pathlib import Path

import numpy as np
import pandas as pd

from schedlab.contracts import PROFILE_COLUMNS

#: One row per step, as the scheduler writes it.
RAW_COLUMNS = (
    "t_schedule", "t_update", "n_encoder", "n_prefill_tokens", "n_decode", "ctx_tokens", "prefill_pairs",
    "n_scheduled", "n_running", "n_waiting", "busy_after",
)
#: One row per finished request, as the scheduler writes it (wall-clock times).
REQUEST_COLUMNS = ("request_id", "t_added", "t_scheduled", "t_finished")
#: Rows buffered before a write while the engine stays busy.
FLUSH_ROWS = 4096


def request_log_path(step_log: str | os.PathLike) -> Path:
    """The per-request log beside a step log (``x.steps.csv`` -> ``x.requests.csv``)."""
    path = Path(step_log)
    return path.with_name(path.name.removesuffix(".csv").removesuffix(".steps") + ".requests.csv")


class StepLog:
    """The scheduler's side: buffered step rows and finished-request rows appended to two CSV
    files (created, with their headers, when the scheduler starts; a server started again on
    the same files goes on after its predecessor's rows)."""

    def __init__(self, path: str | os.PathLike, flush_rows: int = FLUSH_ROWS) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.requests_path = request_log_path(self.path)
        for log, columns in ((self.path, RAW_COLUMNS), (self.requests_path, REQUEST_COLUMNS)):
            if not log.exists() or log.stat().st_size == 0:
                log.write_text(",".join(columns) + "\n")
        self.flush_rows = flush_rows
        self.rows: list[tuple] = []
        self.request_rows: list[tuple] = []

    def record(self, t_schedule: float, t_update: float, composition, n_scheduled: int, n_running: int,
               n_waiting: int, busy_after: bool) -> None:
        self.rows.append((t_schedule, t_update, *composition, n_scheduled, n_running, n_waiting, int(busy_after)))
        if not busy_after or len(self.rows) >= self.flush_rows:
            self.flush()

    def request(self, request_id: str, t_added: float, t_scheduled: float, t_finished: float) -> None:
        """A finished request's times (written with the next flush of the steps)."""
        self.request_rows.append((request_id, t_added, t_scheduled, t_finished))

    def flush(self) -> None:
        # The requests first: a reader waits for the steps' idle row, then reads both.
        if self.request_rows:
            with open(self.requests_path, "a", newline="") as f:
                csv.writer(f).writerows((rid, f"{a:.6f}", f"{s:.6f}", f"{e:.6f}") for rid, a, s, e in self.request_rows)
            self.request_rows.clear()
        if self.rows:
            lines = "".join(
                f"{r[0]:.6f},{r[1]:.6f}," + ",".join(str(int(v)) for v in r[2:]) + "\n" for r in self.rows
            )
            with open(self.path, "a") as f:
                f.write(lines)
            self.rows.clear()


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


#: A served replay's front end lagged when its requests spent more than this share of their time
#: in the system outside the engine's scheduler (:func:`outside_engine_share`): the served
#: system's bottleneck was then its front end, which no step-time model holds.
FRONT_END_LAG = 0.25


def front_end_lagged(runs: pd.DataFrame, lag: float = FRONT_END_LAG) -> pd.Series:
    """Per row of ``runs`` (replay summaries or step tables), whether its front end lagged: its
    ``outside_engine_share`` above ``lag`` (False where it is not recorded)."""
    if "outside_engine_share" not in runs:
        return pd.Series(False, index=runs.index)
    return runs["outside_engine_share"] > lag


#: A served replay was interfered with when other processes kept more than this share of the
#: machine's cores busy while it ran (``foreign_cpu_share``).
INTERFERENCE = 0.10
#: The client fell behind the trace when it sent a request more than this long after the
#: request's arrival offset (``send_lag_max_ms``): the replay then did not offer the trace's
#: arrivals. On a 2-core CPU clean replays sent every request within 13 ms (decoder) and 19 ms
#: (Whisper, after the warm-up) in one quiet run and the decoder's within 68 ms in two later
#: ones; replays whose front end stalled, 500 ms to 2 s late. (The client's full garbage
#: collections, which sent requests 245-365 ms late, no longer walk its whole heap:
#: :func:`schedlab.backends.http_client.frozen_heap`.) The late sends left come from the CPU: the
#: served engine keeps both cores busy, and the client's event loop waited 80-500 ms for a core
#: in clean 7 s replays, 0.5-1.7 s in late ones (``client_waited_s``; no page faults, no steal).
#: Giving the client priority (the server 5 nice levels lower) cut its waits but slowed the
#: engine's steps by about 30%: a preempted OpenMP thread holds up the whole forward pass. So
#: the client keeps the server's priority, and a late replay is run again.
CLIENT_LAG_MS = 100.0


def replay_flaws(runs: pd.DataFrame, interference: float = INTERFERENCE, lag: float = FRONT_END_LAG,
                 client_lag_ms: float = CLIENT_LAG_MS) -> pd.Series:
    """Why each served replay (a row of ``runs``: replay summaries or step tables) does not
    measure the engine, "" where it does: other processes kept more than ``interference`` of the
    cores busy ("interference"), its requests spent more than ``lag`` of their time outside the
    engine's scheduler ("front end lagged", :func:`front_end_lagged`), or the client sent a
    request more than ``client_lag_ms`` late ("client late"). A check left unrecorded passes."""
    why = pd.Series("", index=runs.index)
    if "send_lag_max_ms" in runs:
        why[runs["send_lag_max_ms"] > client_lag_ms] = "client late"
    why[front_end_lagged(runs, lag)] = "front end lagged"
    if "foreign_cpu_share" in runs:
        why[runs["foreign_cpu_share"] > interference] = "interference"
    return why


def outside_engine_share(requests: pd.DataFrame, steps: pd.DataFrame) -> float:
    """Share of the requests' time in the system (arrival at the client to the last token
    received) that they spent outside the engine's scheduler: in the client, the HTTP server,
    the API process and the output path. Little's law on one replay: the client's mean number
    in the system (the sum of end-to-end latencies over the replay's span) against the
    scheduler's (running plus waiting as each step starts, weighted by step time). A simulator models only the
    engine, so a large share means the served system's bottleneck is its front end."""
    span = float(requests["finish_s"].max() - requests["arrival_s"].min())
    client = float((requests["finish_s"] - requests["arrival_s"]).sum()) / span
    engine = float(((steps["n_running"] + steps["n_waiting"]) * steps["time_s"]).sum()) / span
    return max(0.0, 1.0 - engine / client) if client > 0 else float("nan")


def way_to_core(requests: pd.DataFrame, steps: pd.DataFrame, wall_t0: float) -> tuple[np.ndarray, np.ndarray]:
    """Bounds on each request's way in to the engine core, in s: its time from arrival to the
    scheduler (``admitted_s - arrival_s``, :func:`request_timeline`) less its wait for the
    step the core was running. Under synchronous scheduling (vLLM's CPU engine) the core adds
    new requests only between steps, so a request that reaches it mid-step waits for that step
    to end before the scheduler sees it; a simulator makes a request wait for the step in
    progress itself, so its way in must not hold that wait again. The moment a request reached
    the core is not logged. Where the engine was idle as it arrived (the last step scheduled
    before it reached the scheduler had ended) it is that moment, and both bounds are its way
    to the scheduler; otherwise it lies between the start of that step (or the arrival,
    whichever came later) and the moment it reached the scheduler. :func:`interval_median`
    gives the median request's way from these bounds. ``steps``: the replay's step table
    (wall-clock ``t_schedule``, ``t_update``); ``wall_t0``: the wall-clock time of the
    client's zero."""
    steps = steps.sort_values("t_schedule")
    start = steps["t_schedule"].to_numpy(float) - wall_t0
    end = steps["t_update"].to_numpy(float) - wall_t0
    arrival = requests["arrival_s"].to_numpy(float)
    upper = requests["admitted_s"].to_numpy(float) - arrival
    if not len(start):
        return upper, upper
    k = np.searchsorted(start, upper + arrival, side="left") - 1  # the last step scheduled before it was added
    before = np.clip(k, 0, None)
    busy = (k >= 0) & (end[before] > arrival)
    return np.where(busy, np.maximum(0.0, start[before] - arrival), upper), upper


def interval_median(lower: np.ndarray, upper: np.ndarray, iterations: int = 1000) -> float:
    """The median of a quantity seen only as intervals ``[lower, upper]`` (exact where the two
    are equal; rows with a NaN left out): Turnbull's nonparametric maximum-likelihood estimate
    of its distribution, by self-consistency iterations. The estimate puts its mass on the
    innermost intervals (an interval's lower end followed by an upper end, all ends sorted); each
    observation covers a run of them, so an iteration costs O(observations + innermost intervals)
    in time and memory. Where a mass lies in an innermost interval is not identified: half of it
    goes to each end. Where every interval holds the same value, that value, however wide."""
    seen = np.isfinite(lower) & np.isfinite(upper)
    lower, upper = np.asarray(lower, float)[seen], np.asarray(upper, float)[seen]
    n = len(lower)
    if not n:
        return float("nan")
    ends = np.concatenate([lower, upper])
    is_upper = np.repeat([False, True], n)
    order = np.lexsort((is_upper, ends))  # at a tie a lower end first: closed intervals
    ends, is_upper = ends[order], is_upper[order]
    first = np.flatnonzero(~is_upper[:-1] & is_upper[1:])
    q, p = ends[first], ends[first + 1]
    # Observation i covers innermost intervals a[i] .. b[i] - 1: those with lower[i] <= q, p <= upper[i].
    a, b = np.searchsorted(q, lower, "left"), np.searchsorted(p, upper, "right")
    m = len(q)
    mass = np.full(m, 1.0 / m)
    for _ in range(iterations):
        held = np.concatenate([[0.0], np.cumsum(mass)])
        share = 1.0 / (held[b] - held[a])
        cover = np.cumsum(np.bincount(a, share, m + 1) - np.bincount(b, share, m + 1))[:m]
        nxt = mass * cover / n
        if np.abs(nxt - mass).max() < 1e-10:
            break
        mass = nxt
    points = np.concatenate([q, p])
    weights = np.concatenate([np.where(q < p, nxt / 2, nxt), np.where(q < p, nxt / 2, 0.0)])
    order = np.argsort(points, kind="stable")
    return float(points[order][np.searchsorted(np.cumsum(weights[order]), 0.5 - 1e-9)])


def front_end_timing(requests: pd.DataFrame, steps: pd.DataFrame | None = None,
                     wall_t0: float | None = None) -> dict[str, float]:
    """Where a served replay's requests spent their time outside the scheduler, in ms: the
    client's lag sending them after their arrival (``send_lag``, from ``sent_s``); the time from
    sending to the start of the server's answer (``response``, from ``response_s``: the HTTP
    server and the API server's handler, before vLLM hands a request to its engine); with the
    scheduler's times (:func:`request_timeline`), the way in, arrival to the scheduler
    (``front_in``), and the way out, the engine's last token to the client's (``way_out``);
    with the replay's ``steps`` and ``wall_t0`` too, the way in to the engine core
    (``to_core``, :func:`way_to_core`: its median only). Median and largest of each, and the
    means of the ways in and out."""
    out = {}
    parts = {"send_lag": ("arrival_s", "sent_s"), "response": ("sent_s", "response_s"),
             "front_in": ("arrival_s", "admitted_s"), "way_out": ("engine_finish_s", "finish_s")}
    for name, (start, end) in parts.items():
        if {start, end} <= set(requests) and requests[end].notna().any():
            ms = (requests[end] - requests[start]) * 1e3
            out |= {f"{name}_p50_ms": float(ms.median()), f"{name}_max_ms": float(ms.max())}
            if name in ("front_in", "way_out"):
                out[f"{name}_mean_ms"] = float(ms.mean())
    if steps is not None and len(steps) and wall_t0 is not None and "admitted_s" in requests \
            and requests["admitted_s"].notna().any():
        lower, upper = way_to_core(requests, steps, wall_t0)
        out["to_core_p50_ms"] = interval_median(lower, upper) * 1e3
    return out
