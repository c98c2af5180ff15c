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
``X-Request-Id`` the client sent. Joined with the client's own times (:func:`~schedlab.backends.step_tables.request_timeline`)
they split a request's time outside the scheduler into the way in (client, HTTP and API server,
engine core input) and the way out (the last token back to the client).

The readers are in :mod:`schedlab.backends.step_tables`.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

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
