"""A served engine that dies with the job that started it.

``python -m schedlab.backends.lifeline JOB_PID -- vllm serve ...`` runs the command as its child
and waits for either of two events: the child ends (it then exits with the child's status), or
its own parent, the job ``JOB_PID`` that started it, ends, however it ended (SIGKILL of the job or of its
process group included). Then it sends SIGTERM to its process group, which holds the server and
every process the server started (vLLM's API server, engine core and worker), waits up to
:data:`GRACE_S` for the server to exit, and sends SIGKILL to the group: nothing is left holding
the port or the memory. The job starts it as the leader of a new session
(:func:`schedlab.backends.server_process.start_server`), so a signal to the job's process group
does not reach the server directly, and the job stops it by signalling this group.

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


def _wait_either(child: subprocess.Popen, parent: int) -> bool:
    """Block until the child ends (False) or the parent ends (True)."""
    child_fd, parent_fd = _pidfd(child.pid), _pidfd(parent)
    if child_fd is not None and parent_fd is not None:
        ready, _, _ = select.select([child_fd, parent_fd], [], [])
        return parent_fd in ready and child.poll() is None
    while True:
        try:
            child.wait(POLL_S)
            return False
        except subprocess.TimeoutExpired:
            if os.getppid() != parent:
                return True


def _stop_group(child: subprocess.Popen) -> None:
    """SIGTERM to the whole group (this process ignores it), SIGKILL after :data:`GRACE_S`."""
    group = os.getpgid(0)
    try:
        os.killpg(group, signal.SIGTERM)
        child.wait(GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    os.killpg(group, signal.SIGKILL)  # stragglers, and this process last


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--" or not argv[0].isdigit():
        print("usage: python -m schedlab.backends.lifeline JOB_PID -- COMMAND ...", file=sys.stderr)
        return 2
    parent = int(argv[0])
    if os.getppid() != parent:  # the job ended before the server could start
        print(f"schedlab lifeline: the job (process {parent}) has ended; not starting the server", file=sys.stderr)
        return 1
    # The job stops the server by signalling this group: the server shuts down and this
    # process exits with its status. (Handlers, unlike SIG_IGN, do not pass on to the child.)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: None)
    child = subprocess.Popen(argv[2:])
    if _wait_either(child, parent):
        print(f"schedlab lifeline: the job (process {parent}) ended; stopping the server (process group "
              f"{os.getpgid(0)})", file=sys.stderr, flush=True)
        _stop_group(child)
    status = child.wait()
    return 128 - status if status < 0 else status  # killed by a signal: as a shell reports it


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
