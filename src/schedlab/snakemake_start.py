"""What the pipeline does before Snakemake plans a job (the Snakefile calls both first).

:func:`check_config`: the configuration against ``workflow/schemas/config.schema.yaml``, its
first problem as one line naming the key (``schedlab: error: config key ...``) and exit status
2, where Snakemake's own ``validate`` prints a multi-line ``WorkflowError``; the Snakefile's
cross-reference checks end the same way (:func:`config_error`).

:func:`release_stale_lock`: a run killed hard (SIGKILL, power loss) leaves Snakemake's lock
(``.snakemake/locks``) behind, and the next run refuses to start until ``snakemake --unlock``.
When no other Snakemake process has this working folder as its own (Linux ``/proc``: the
command line and the working folder of every process), the lock is a dead run's, and it is
released, so the plain command resumes; while another Snakemake runs here, the lock stays and
Snakemake refuses as before.
"""

from __future__ import annotations

import math
import os
import shutil
import sys
from pathlib import Path


def config_error(message: str):
    """End the run before any job: one line on stderr, exit status 2."""
    print("schedlab: error: " + " ".join(str(message).split()), file=sys.stderr)
    raise SystemExit(2)


def _key(path) -> str:
    """``asr.experiments.burst.rates[0]`` from a JSON path."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _problem(error) -> str:
    value = error.instance
    if isinstance(value, float) and math.isnan(value):
        return "must be a number, not NaN"
    return error.message


def check_config(config: dict, schema_path: str | os.PathLike) -> None:
    """``config`` against the JSON schema at ``schema_path``; the first problem (jsonschema's
    best match) ends the run in one line naming its key (:func:`config_error`)."""
    import jsonschema
    import yaml

    schema = yaml.safe_load(Path(schema_path).read_text())
    validator = jsonschema.validators.validator_for(schema)(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(config))
    if error is not None:
        where = f"config key {_key(error.absolute_path)}" if error.absolute_path else "config"
        config_error(f"{where}: {_problem(error)}")


# -- the lock of a run that was killed --------------------------------------------------------
def _ancestors() -> set[int]:
    """This process and the processes it descends from (``make``, a shell)."""
    pids, pid = set(), os.getpid()
    while pid > 1 and pid not in pids:
        pids.add(pid)
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            break
    return pids


def _is_snakemake(argv: list[bytes]) -> bool:
    """Whether a command line runs Snakemake (``snakemake ...``, ``python .../snakemake ...``,
    ``python -m snakemake ...``)."""
    head = [os.path.basename(a) for a in argv[:2]]
    return b"snakemake" in head or any(a == b"-m" and b == b"snakemake" for a, b in zip(argv, argv[1:]))


def snakemakes_here(folder: str | os.PathLike = ".") -> list[int] | None:
    """Ids of the other Snakemake processes whose working folder is ``folder`` (one whose
    folder cannot be read, another user's, counts too); None where there is no ``/proc``."""
    proc = Path("/proc")
    if not (proc / "self" / "cmdline").exists():
        return None
    here, mine, found = os.path.realpath(folder), _ancestors(), []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) in mine:
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if not _is_snakemake(argv):
            continue
        try:
            cwd = os.readlink(entry / "cwd")
        except PermissionError:
            found.append(int(entry.name))
            continue
        except OSError:  # it has just ended
            continue
        if os.path.realpath(cwd) == here:
            found.append(int(entry.name))
    return found


def release_stale_lock(workflow=None, folder: str | os.PathLike = ".") -> bool:
    """Remove Snakemake's lock in ``folder`` when it is a dead run's (see the module
    docstring); True when it was released. Only the main Snakemake process does this (not a
    job's own Snakemake on a cluster), and only with the file-based lock."""
    if workflow is not None:
        if not getattr(workflow, "is_main_process", True):
            return False
        settings = getattr(workflow, "workflow_settings", None)
        backend = getattr(getattr(settings, "persistence_backend", None), "name", "FILE")
        if backend != "FILE":
            return False
    locks = Path(folder) / ".snakemake" / "locks"
    try:
        if not any(locks.iterdir()):
            return False
    except OSError:  # no lock
        return False
    others = snakemakes_here(folder)
    if others is None or others:
        return False
    shutil.rmtree(locks, ignore_errors=True)
    print("Released the lock of a Snakemake run that is no longer running (no other Snakemake works in this "
          "folder); jobs it left incomplete run again.", file=sys.stderr)
    return True
