"""Reading inputs with one-line errors, and atomic writes: every output appears whole under its
final name or not at all, and a run's outputs appear together or not at all."""

from __future__ import annotations

import json
import math
import os
import re
import stat
import sys
import tempfile
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Mapping

from schedlab.errors import SchedlabError

if TYPE_CHECKING:  # pandas and pyarrow load when a table is read or written (start-up time)
    import pandas as pd


# -- where outputs may go ------------------------------------------------------------------------
#: The identities (real path, and device and inode where the file exists) of the current
#: command's inputs (:func:`guard_inputs`): no output may land on one of them.
_inputs: dict[str, tuple[int, int] | None] = {}


def _identity(path: str | os.PathLike) -> tuple[str, tuple[int, int] | None]:
    """``path``'s real path (symbolic links resolved) and, when it exists, its device and
    inode (a hard link is the same file under another name)."""
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
    except OSError:
        return real, None
    return real, (st.st_dev, st.st_ino)


def _same(a: tuple[str, tuple[int, int] | None], b: tuple[str, tuple[int, int] | None]) -> bool:
    return a[0] == b[0] or (a[1] is not None and a[1] == b[1])


def _kind(mode: int) -> str:
    for test, kind in ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "not a regular file"


def _first_existing_ancestor_is_folder(path: Path) -> None:
    """Refuse ``path`` when the nearest of its ancestors that exists is not a folder (a file
    where a folder is expected)."""
    for parent in Path(os.path.abspath(path)).parents:
        try:
            st = os.stat(parent)
        except FileNotFoundError:
            continue
        except OSError as e:
            raise SchedlabError(f"cannot write {path}: {parent}: {e.strerror or e}") from None
        if not stat.S_ISDIR(st.st_mode):
            raise SchedlabError(f"cannot write {path}: {parent} exists and is not a folder")
        return


def check_target(path: str | os.PathLike) -> None:
    """Refuse, in one line, an output path that exists and is not a regular file (a folder, a
    device, a FIFO, a socket: a rename would replace it, a write would feed it), that lies
    under a file where a folder is expected, or that is an input of the current command
    (:func:`guard_inputs`)."""
    p = Path(path)
    try:
        st = os.stat(p)  # through symbolic links: what a write would reach
    except (FileNotFoundError, NotADirectoryError):
        st = None
    except OSError as e:
        raise SchedlabError(f"cannot write {p}: {e.strerror or e}") from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise SchedlabError(f"{p}: is a directory, not a file name")
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise SchedlabError(f"{p}: is {_kind(st.st_mode)}, not a regular file: refusing to write over it")
    _first_existing_ancestor_is_folder(p)
    me = _identity(p)
    for real, inode in _inputs.items():
        if _same(me, (real, inode)):
            raise SchedlabError(f"{p}: is an input of this command ({real}): refusing to overwrite it")


def check_folder(path: str | os.PathLike) -> None:
    """Refuse, in one line, an output folder that exists and is not a folder, or that lies
    under a file."""
    p = Path(path)
    try:
        st = os.stat(p)
    except (FileNotFoundError, NotADirectoryError):
        st = None
    except OSError as e:
        raise SchedlabError(f"cannot write {p}: {e.strerror or e}") from None
    if st is not None and not stat.S_ISDIR(st.st_mode):
        raise SchedlabError(f"{p}: exists and is not a folder (it is {_kind(st.st_mode)})"
                            if not stat.S_ISREG(st.st_mode) else f"{p}: exists and is a file, not a folder")
    _first_existing_ancestor_is_folder(p)


def _readable(path: Path) -> None:
    """Refuse, in one line, an input that is missing, that is neither a regular file nor a
    folder (a FIFO would block the read, a device never ends), or that this user cannot read."""
    try:
        st = os.stat(path)
        if stat.S_ISDIR(st.st_mode):
            os.listdir(path)
        elif stat.S_ISREG(st.st_mode):
            with open(path, "rb"):
                pass
        else:
            raise SchedlabError(f"{path}: is {_kind(st.st_mode)}, not a regular file to read")
    except (FileNotFoundError, NotADirectoryError):
        raise SchedlabError(f"file not found: {path}") from None
    except OSError as e:
        raise SchedlabError(f"cannot read {path}: {e.strerror or e}") from None


def check_paths(inputs=(), outputs=(), folders=()) -> None:
    """Check a command's paths before it does any work, and remember its inputs for every
    write that follows (:func:`guard_inputs`): each input exists and is readable (a folder
    stands for the files in it); each output is a new path or a regular file
    (:func:`check_target`), none is an input, and no two outputs are the same file; each
    output folder is a folder or a new path (:func:`check_folder`)."""
    guard_inputs(inputs)
    for path in inputs:
        _readable(Path(path))
    for folder in folders:
        check_folder(folder)
    seen: dict[tuple[str, tuple[int, int] | None], str] = {}
    for path in outputs:
        check_target(path)
        me = _identity(path)
        other = next((name for ident, name in seen.items() if _same(me, ident)), None)
        if other is not None:
            raise SchedlabError(f"{path}: is also another output of this command ({other}): each output needs a file of its own")
        seen[me] = str(path)


def guard_inputs(paths) -> None:
    """Make ``paths`` (files, or folders standing for the files in them that match the path's
    ``members`` pattern, ``*`` by default) the current command's inputs: :func:`check_target`,
    so every write, refuses them from now on."""
    _inputs.clear()
    for path in paths:
        p = Path(path)
        pattern = getattr(path, "members", "*")
        members = [p, *(q for q in _listing(p, pattern) if q.is_file())] if p.is_dir() else [p]
        for member in members:
            real, inode = _identity(member)
            _inputs[real] = inode


def _listing(folder: Path, pattern: str) -> list[Path]:
    try:
        return list(folder.glob(pattern))
    except OSError:
        return []


def _umask() -> int:
    """The process's file-creation mask (read by setting it, then setting it back)."""
    mask = os.umask(0o22)
    os.umask(mask)
    return mask


# -- atomic writes --------------------------------------------------------------------------
@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` only on success."""
    with atomic_paths(path) as (tmp,):
        yield tmp


@contextmanager
def atomic_paths(*paths: str | os.PathLike) -> Iterator[list[Path]]:
    """Yield a temporary path beside each of ``paths``; only when the block succeeds are they
    renamed onto ``paths``, all of them (a rename that fails undoes the ones before it). Every
    target is checked first and again just before its rename (:func:`check_target`): a
    folder, a device, a FIFO, a socket or an input of the command is never replaced. Files
    get the permissions of the user's umask, as ``open`` would give them."""
    finals = [Path(p) for p in paths]
    for final in finals:
        check_target(final)
    with ExitStack() as stack:
        tmps = [stack.enter_context(_temporary(final)) for final in finals]
        yield tmps
        for final in finals:
            check_target(final)
        mode = 0o666 & ~_umask()
        done: list[Path] = []
        for tmp, final in zip(tmps, finals):
            try:
                os.chmod(tmp, mode)
                os.replace(tmp, final)
            except OSError as e:
                for written in done:
                    written.unlink()
                raise SchedlabError(f"cannot write {final}: {e.strerror or e}") from None
            done.append(final)


def _stale_temporaries(final: Path) -> list[Path]:
    """Temporaries of ``final`` that a writer killed before it could remove them left behind
    (SIGKILL, power loss): ``.<name>.<8 random characters>.tmp<extension>`` beside it."""
    name = re.compile(rf"\.{re.escape(final.name)}\.[a-z0-9_]{{8}}\.tmp{re.escape(final.suffix)}")
    try:
        return [p for p in final.parent.iterdir() if name.fullmatch(p.name)]
    except OSError:
        return []


@contextmanager
def _temporary(final: Path) -> Iterator[Path]:
    """A temporary file beside ``final``, removed again unless it was renamed; the temporaries
    of ``final`` that a killed writer left are removed first (a run resumed after a hard kill
    leaves none behind)."""
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        for stale in _stale_temporaries(final):
            stale.unlink(missing_ok=True)
        # (ending in the final name's extension, for writers that look at it: papermill)
        fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.", suffix=f".tmp{final.suffix}", dir=final.parent)
    except OSError as e:
        raise SchedlabError(f"cannot write {final}: {e.strerror or e}") from None
    os.close(fd)
    try:
        yield Path(tmp)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_outputs(outputs: Mapping[str | os.PathLike, pd.DataFrame | dict | str | bytes]) -> None:
    """Write several outputs as one set (tables as parquet, dicts as JSON, text and bytes as
    they are): all appear or none."""
    with atomic_paths(*outputs) as tmps:
        for tmp, obj in zip(tmps, outputs.values()):
            if _is_table(obj):
                obj.to_parquet(tmp, index=False)
            elif isinstance(obj, bytes):
                tmp.write_bytes(obj)
            elif isinstance(obj, str):
                tmp.write_text(obj)
            else:
                tmp.write_text(json.dumps(_plain(obj), indent=2, sort_keys=True) + "\n")


def _is_table(obj) -> bool:
    """Whether ``obj`` is a pandas DataFrame (pandas is loaded wherever one exists, so this
    does not import it)."""
    pd = sys.modules.get("pandas")
    return pd is not None and isinstance(obj, pd.DataFrame)


def write_parquet(df: pd.DataFrame, path: str | os.PathLike) -> None:
    write_outputs({path: df})


def write_json(obj: dict, path: str | os.PathLike) -> None:
    write_outputs({path: obj})


def _plain(value):
    """numpy scalars to Python ones; NaN to null (JSON has no NaN)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def _existing(path: str | os.PathLike) -> Path:
    p = Path(path)
    if not p.is_file():
        raise SchedlabError(f"{p}: is not a regular file" if p.exists() else f"file not found: {p}")
    return p


def read_bytes(path: str | os.PathLike) -> bytes:
    """A file's bytes, failing in one line when it is missing, not a file, or unreadable."""
    p = _existing(path)
    try:
        return p.read_bytes()
    except OSError as e:
        raise SchedlabError(f"cannot read {p}: {e.strerror or e}") from None


def read_json(path: str | os.PathLike):
    """A JSON document, failing in one line when the file is missing or not JSON. ``Infinity``
    and ``NaN`` are read as floats (a burst run's rate is ``Infinity``); the models of
    :mod:`schedlab.validation` reject them where a value must be finite."""
    p = Path(path)
    try:
        return json.loads(read_bytes(p))
    except json.JSONDecodeError as e:
        raise SchedlabError(f"{p}: not valid JSON: {e.msg} (line {e.lineno}, column {e.colno})") from None
    except (ValueError, RecursionError) as e:  # bad UTF-8, absurd nesting
        raise SchedlabError(f"{p}: not valid JSON: {e}") from None


def read_parquet(path: str | os.PathLike, required: tuple[str, ...] = ()) -> pd.DataFrame:
    """Read a parquet table, failing in one line when it is missing, not parquet, or lacks
    ``required`` columns."""
    import pandas as pd
    import pyarrow

    p = _existing(path)
    try:
        df = pd.read_parquet(p)
    except PermissionError as e:
        raise SchedlabError(f"cannot read {p}: {e.strerror or e}") from None
    except (pyarrow.ArrowException, OSError, ValueError) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise SchedlabError(f"{p}: not a readable parquet table ({reason})") from None
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise SchedlabError(f"{p}: missing columns {', '.join(missing)}")
    return df
