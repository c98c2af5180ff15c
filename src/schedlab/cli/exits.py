"""How a command ends: bad input as one line and exit status 2, a job runner's SIGTERM through
the context managers (128 + 15), Ctrl-C as one line (130), a reader of stdout gone (128 + 13)."""

from __future__ import annotations

import errno
import os
import signal
import sys
import traceback
from typing import Callable

from schedlab.compat.cpython import forget_unhandled_interrupt
from schedlab.errors import SchedlabError

#: The environment variable that makes every command print an error's traceback (as --debug).
DEBUG_VARIABLE = "SCHEDLAB_DEBUG"


class _Stopped(SystemExit):
    """The exit that SIGTERM raises where the main thread stands (see :func:`stop_on_sigterm`)."""


def _stop(signum: int, frame) -> None:
    raise _Stopped(128 + signal.SIGTERM)


def _stop_again(unraisable) -> None:
    """An exception that Python cannot raise, from a finalizer or a weakref callback, is handed
    here and dropped. When it is the SIGTERM exit (the signal landed while such code ran), the
    exit is raised again 10 ms later, from a timer's signal, which lands where it can propagate
    (or, landing in such code again, comes back here); anything else is reported as Python
    reports it."""
    if isinstance(unraisable.exc_value, _Stopped):
        signal.signal(signal.SIGALRM, _stop)
        signal.setitimer(signal.ITIMER_REAL, 0.01)
    else:
        sys.__unraisablehook__(unraisable)


def stop_on_sigterm() -> None:
    """A job runner stops a job with SIGTERM (Snakemake, SLURM's scancel): exit through the
    context managers, so that servers started here are stopped and no partial output is left."""
    signal.signal(signal.SIGTERM, _stop)
    sys.unraisablehook = _stop_again


def exit_status(command: Callable[[], None], debug: bool) -> int:
    """Run ``command``; bad input (any :class:`SchedlabError`) is one line on stderr and exit
    status 2, as for usage errors (with the traceback before it under ``debug`` or
    :data:`DEBUG_VARIABLE`); an interrupt (Ctrl-C) is one line and exit status 130."""
    try:
        command()
    except SchedlabError as e:
        if debug or os.environ.get(DEBUG_VARIABLE, "") not in ("", "0"):
            traceback.print_exc()
        print("schedlab: error: " + " ".join(str(e).split()), file=sys.stderr)
        return 2
    except PermissionError as e:  # a file of the user's that this user may not read or write
        print(f"schedlab: error: {e.filename or ''}: {e.strerror or e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return interrupted()
    except BrokenPipeError:
        return _reader_gone()
    except OSError as e:
        if e.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        # a write outside the atomic writers (a cache, a log): theirs are removed already
        print(f"schedlab: error: {e.filename or 'a write'}: {e.strerror or os.strerror(e.errno)}", file=sys.stderr)
        return 2
    return 0


def _reader_gone() -> int:
    """The reader of stdout stopped reading (``schedlab schedulers | head``): no more output and
    no error, the exit status a shell gives a process ended by SIGPIPE (128 + 13). stdout goes
    to /dev/null so that the interpreter's own flush as it exits does not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 128 + signal.SIGPIPE


def interrupted() -> int:
    """Ctrl-C: one line, exit status 130 (128 + SIGINT, as a shell reports it). The command is
    ending: a second Ctrl-C is ignored, and CPython's record of the interrupt as unhandled (when
    it left a C extension's ``PyRun_*`` call) is cleared, or the process would end by SIGINT as
    it exits (:func:`schedlab.compat.cpython.forget_unhandled_interrupt`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    forget_unhandled_interrupt()
    print("schedlab: interrupted", file=sys.stderr)
    return 128 + signal.SIGINT
