"""Every step of a served engine: its composition and timing, logged by the scheduler.

With ``"step_log": "<path>"`` in the ``schedlab`` section of ``--additional-config``,
:class:`~schedlab.backends.vllm.scheduler.SchedlabScheduler` (a queue policy) or
:class:`~schedlab.backends.vllm.plan.SchedlabPlanScheduler` (step plans) appends one CSV row per engine
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
``X-Request-Id`` the client sent. Joined with the client's own times (:func:`~schedlab.backends.steps.tables.request_timeline`)
they split a request's time outside the scheduler into the way in (client, HTTP and API server,
engine core input) and the way out (the last token back to the client).

The readers are in :mod:`schedlab.backends.steps.tables`.
"""

from __future__ import annotations

import csv
import os
import time
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


class StepRecorder:
    """What a scheduler class keeps for its :class:`StepLog`: when each request reached it and
    was first scheduled (wall clock), and each step's composition and queues as the step began,
    written once vLLM has the step's output (``update_from_output``)."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.log = StepLog(path)
        self._logged: dict[int, tuple] = {}  # id(scheduler output) -> (schedule time, composition, queues)
        self._timeline: dict[str, list[float]] = {}  # request id -> [added, first scheduled]

    def added(self, request_id: str) -> None:
        if request_id not in self._timeline:
            self._timeline[request_id] = [time.time(), float("nan")]

    def scheduled(self, output, wall: float, composition, n_running: int, n_waiting: int) -> None:
        """A step that ``schedule()`` (called at ``wall``) returned; ``n_running`` counts a
        request finishing in it as running."""
        if output.total_num_scheduled_tokens <= 0:
            return
        self._logged[id(output)] = (wall, composition, n_running, n_waiting)
        for new in output.scheduled_new_reqs:
            times = self._timeline.get(new.req_id)
            if times is not None and times[1] != times[1]:  # first scheduled (NaN until then)
                times[1] = wall

    def updated(self, scheduler_output, outputs, busy: bool) -> None:
        """The step's outputs (vLLM's engine core outputs by client), as ``update_from_output``
        returns them; ``busy``: requests are left unfinished."""
        logged = self._logged.pop(id(scheduler_output), None)
        if logged is None:
            return
        now = time.time()
        for out in (o for batch in outputs.values() for o in batch.outputs if o.finish_reason is not None):
            times = self._timeline.pop(out.request_id, None)
            if times is not None:
                self.log.request(out.request_id, times[0], times[1], now)
        wall, composition, n_running, n_waiting = logged
        if not busy:  # requests that ended without output (aborted) leave no timeline behind
            self._timeline.clear()
        self.log.record(wall, now, composition, len(scheduler_output.num_scheduled_tokens), n_running, n_waiting, busy)

    def flush(self) -> None:
        self.log.flush()
