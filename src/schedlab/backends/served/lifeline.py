"""A served engine that dies with the job that started it, and with the pipeline that started
the job.

``python -m schedlab.backends.served.lifeline JOB_PID [--pipeline PID] [--hold FD] -- vllm serve ...``
runs the command as its child and waits for any of three events: the child ends (it then exits
with the child's status); its own parent, the job ``JOB_PID`` that started it, ends, however it
ended (SIGKILL of the job or of its process group included); or the pipeline ``PID`` that started
the job ends (the Snakemake process it runs under, :func:`schedlab.compat.snakemake.pipeline_process`:
SIGKILL of that process alone, as an out-of-memory kill does, leaves its jobs running, adopted by
process 1). Then it sends SIGTERM to the job when the pipeline is the one that ended (the job
exits through its context managers, leaving no partial output), SIGTERM to its own process group,
which holds the server and every process the server started (vLLM's API server, engine core and
worker), waits up to :data:`GRACE_S` for the server to exit, and sends SIGKILL to the group:
nothing is left holding the port or the memory. The job starts it as the leader of a new session
(:func:`schedlab.backends.served.server.start_server`), so a signal to the job's process group
does not reach the server directly, and the job stops it by signalling this group.

``--hold FD``: a file descriptor the job passes on, the lock on the server's output
(:func:`schedlab.backends.served.server.start_server`); the lifeline and the server keep it open
while they live, so a job started again for that output sees that an earlier server still runs.

The waits are on process file descriptors (``pidfd_open``, Linux 5.3): no polling while a
measured engine runs beside it; elsewhere it polls once a second.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys

#: Seconds the server gets to shut down after its job ended, before SIGKILL.
GRACE_S = 5.0
#: Seconds between looks at the parent where process file descriptors are not available.
POLL_S = 1.0


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _wait_any(child: subprocess.Popen, parent: int, pipeline: int | None) -> str | None:
    """Block until the child ends (None), the parent ends ("job") or the pipeline ends
    ("pipeline")."""
    watched = {"job": _pidfd(parent), **({"pipeline": _pidfd(pipeline)} if pipeline is not None else {})}
    child_fd = _pidfd(child.pid)
    if child_fd is not None and all(fd is not None for fd in watched.values()):
        ready, _, _ = select.select([child_fd, *watched.values()], [], [])
        if child.poll() is not None:
            return None
        return next(name for name, fd in watched.items() if fd in ready)
    while True:
        try:
            child.wait(POLL_S)
            return None
        except subprocess.TimeoutExpired:
            if os.getppid() != parent:
                return "job"
            if pipeline is not None and not _alive(pipeline):
                return "pipeline"


def _stop_group(child: subprocess.Popen) -> None:
    """SIGTERM to the whole group (this process ignores it), SIGKILL after :data:`GRACE_S`."""
    group = os.getpgid(0)
    try:
        os.killpg(group, signal.SIGTERM)
        child.wait(GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    os.killpg(group, signal.SIGKILL)  # stragglers, and this process last


USAGE = "usage: python -m schedlab.backends.served.lifeline JOB_PID [--pipeline PID] [--hold FD] -- COMMAND ..."


def _options(argv: list[str]) -> tuple[int, int | None, int | None, list[str]] | None:
    """``JOB_PID``, the pipeline's process, the descriptor held and the command; None when
    ``argv`` is not that."""
    if "--" not in argv:
        return None
    head, command = argv[:argv.index("--")], argv[argv.index("--") + 1:]
    if not head or not head[0].isdigit() or not command or len(head) % 2 == 0:
        return None
    options = dict(zip(head[1::2], head[2::2]))
    if set(options) - {"--pipeline", "--hold"} or not all(v.isdigit() for v in options.values()):
        return None
    pipeline, hold = options.get("--pipeline"), options.get("--hold")
    return int(head[0]), None if pipeline is None else int(pipeline), None if hold is None else int(hold), command


def main(argv: list[str]) -> int:
    parsed = _options(argv)
    if parsed is None:
        print(USAGE, file=sys.stderr)
        return 2
    parent, pipeline, hold, command = parsed
    if os.getppid() != parent:  # the job ended before the server could start
        print(f"schedlab lifeline: the job (process {parent}) has ended; not starting the server", file=sys.stderr)
        return 1
    if pipeline is not None and not _alive(pipeline):
        print(f"schedlab lifeline: the pipeline (process {pipeline}) has ended; not starting the server", file=sys.stderr)
        return 1
    # The job stops the server by signalling this group: the server shuts down and this
    # process exits with its status. (Handlers, unlike SIG_IGN, do not pass on to the child.)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: None)
    child = subprocess.Popen(command, pass_fds=() if hold is None else (hold,))
    ended = _wait_any(child, parent, pipeline)
    if ended == "pipeline":
        print(f"schedlab lifeline: the pipeline (process {pipeline}) ended; stopping the job (process {parent}) and "
              f"the server (process group {os.getpgid(0)})", file=sys.stderr, flush=True)
        try:
            os.kill(parent, signal.SIGTERM)  # the job exits through its context managers
        except ProcessLookupError:
            pass
    if ended is not None:
        if ended == "job":
            print(f"schedlab lifeline: the job (process {parent}) ended; stopping the server (process group "
                  f"{os.getpgid(0)})", file=sys.stderr, flush=True)
        _stop_group(child)
    status = child.wait()
    return 128 - status if status < 0 else status  # killed by a signal: as a shell reports it


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
