"""The place where schedlab works around CPython's own behaviour (see :data:`schedlab.compat.WORKAROUNDS`)."""

from __future__ import annotations

import ctypes


def forget_unhandled_interrupt() -> None:
    """Clear CPython's record of an unhandled KeyboardInterrupt. A KeyboardInterrupt that
    leaves a ``PyRun_*`` call (a C extension runs Python code that way) is recorded as unhandled
    even when Python code catches it later, and the interpreter then ends a module run with
    ``python -m`` by SIGINT as it exits, whatever exit status the program gave. Each ``PyRun_*`` call resets the record
    before it runs: an empty one clears it."""
    ctypes.pythonapi.PyRun_SimpleString(b"pass")
