"""The place where schedlab works around CPython's own behaviour (see :data:`schedlab.compat.WORKAROUNDS`)."""

from __future__ import annotations

import ctypes
import gc
from collections.abc import Iterator
from contextlib import contextmanager


def forget_unhandled_interrupt() -> None:
    """Clear CPython's record of an unhandled KeyboardInterrupt. A KeyboardInterrupt that
    leaves a ``PyRun_*`` call (a C extension runs Python code that way) is recorded as unhandled
    even when Python code catches it later, and the interpreter then ends a module run with
    ``python -m`` by SIGINT as it exits, whatever exit status the program gave. Each ``PyRun_*`` call resets the record
    before it runs: an empty one clears it."""
    ctypes.pythonapi.PyRun_SimpleString(b"pass")


@contextmanager
def frozen_heap() -> Iterator[None]:
    """The objects alive on entry frozen out of the garbage collector's reach until exit: a
    collection of the oldest generation then walks only what an HTTP replay made. Unfrozen, such a
    collection walked the client's whole heap (pandas, httpx, schedlab) and held the event loop
    for 200 ms on a busy 2-core machine, halfway into a replay at 25 req/s: eight requests went
    out late (the latest by 245-365 ms), and the tokens of every stream open then were read as
    late. Not re-entrant: an inner exit thaws what an outer entry froze."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
