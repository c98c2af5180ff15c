"""Progress of long work: a bar on a terminal, one line per stage in the pipeline's logs.

A command's long work is a sequence of *stages*, each opened with :func:`stage` (a run of a
scheduler over a trace, a cluster's run, a tournament's workload and its matches, a profile's
timed points, a replay against servers). Work done inside the innermost stage of a unit is
counted with :func:`advance`; the engines count the requests they complete with
:func:`requests_done`, at no cost when no stage counts requests.

How stages show is ``SCHEDLAB_PROGRESS``'s choice:

- ``bar``, the default when stderr is a terminal: a bar per open stage (rich), each gone when its
  stage ends;
- ``lines``, which the pipeline sets for its jobs: one line on stderr when a stage ends (what it
  did, how much, in how long), so that a job's log says where its time went;
- ``off``, the default when stderr is not a terminal: nothing (a failed command's stderr is its
  one error line).

A stage that ends with an exception writes no line: the error says what happened.
"""

from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager
from typing import Iterator

#: The environment variable that chooses how progress shows (``bar``, ``lines`` or ``off``).
VARIABLE = "SCHEDLAB_PROGRESS"
MODES = ("bar", "lines", "off")
#: Seconds between a bar's updates of its count (the engine reports every completion).
_PUSH_S = 0.1


def mode() -> str:
    """How progress shows now: ``SCHEDLAB_PROGRESS`` when it names a mode, else a bar on a
    terminal and nothing elsewhere."""
    chosen = os.environ.get(VARIABLE, "").strip().lower()
    if chosen in MODES:
        return chosen
    return "bar" if sys.stderr.isatty() else "off"


class Stage:
    """One open stage: its description, its total (None: not known) and its count."""

    def __init__(self, description: str, total: int | None, unit: str, task=None) -> None:
        self.description, self.total, self.unit = description, total, unit
        self.completed = 0
        self.started = time.perf_counter()
        self._task, self._pushed, self._last = task, 0, self.started

    def advance(self, n: int = 1) -> None:
        """``n`` more units done."""
        self.completed += n
        if self._task is not None:
            now = time.perf_counter()
            if now - self._last >= _PUSH_S or (self.total is not None and self.completed >= self.total):
                _live["progress"].update(self._task, completed=self.completed)
                self._last = now

    def line(self) -> str:
        """What the stage did, as its line in a log."""
        done = f"{self.completed:,}" if self.total is None else f"{self.completed:,} of {self.total:,}"
        return f"schedlab: {self.description}: {done} {self.unit} in {time.perf_counter() - self.started:.1f} s"


_open: list[Stage] = []
#: The terminal's live display while a stage is open (bar mode): rich's Progress.
_live: dict = {}


@contextmanager
def stage(description: str, total: int | None = None, unit: str = "requests") -> Iterator[Stage]:
    """A stage of a command's work (see the module docstring): a bar while it runs, or its line
    when it ends."""
    how = mode()
    task = None
    if how == "bar" and not _live:
        try:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
            from rich.table import Column
        except ImportError:  # a bare Python (a GPU machine's profile run): lines instead
            how = "lines"
        else:
            # the description gives way first on a narrow terminal; the counts never do
            fixed = dict(no_wrap=True, overflow="ignore")
            _live["progress"] = Progress(
                TextColumn("{task.description}", table_column=Column(ratio=1, no_wrap=True, overflow="ellipsis")),
                BarColumn(bar_width=20), MofNCompleteColumn(table_column=Column(**fixed)),
                TextColumn("{task.fields[unit]}", table_column=Column(**fixed)),
                TimeElapsedColumn(table_column=Column(**fixed)),
                console=Console(stderr=True), transient=True, refresh_per_second=4, expand=True)
            _live["progress"].start()
    if how == "bar":
        task = _live["progress"].add_task(description, total=total, unit=unit)
    current = Stage(description, total, unit, task)
    _open.append(current)
    ok = False
    try:
        yield current
        ok = True
    finally:
        _open.remove(current)
        if task is not None:
            _live["progress"].remove_task(task)
            if not _open:
                _live.pop("progress").stop()
        if ok and how == "lines":
            print(current.line(), file=sys.stderr, flush=True)


def advance(unit: str, n: int = 1) -> None:
    """``n`` more ``unit`` done in the innermost open stage that counts them (none: nothing)."""
    for open_stage in reversed(_open):
        if open_stage.unit == unit:
            open_stage.advance(n)
            return


def requests_done(n: int) -> None:
    """``n`` requests completed (an engine's report; nothing when no stage counts requests)."""
    if _open:
        advance("requests", n)
