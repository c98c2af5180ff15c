"""Reading inputs with one-line errors, and atomic writes: every output appears whole under its
final name or not at all, and a run's outputs appear together or not at all."""

from __future__ import annotations

import errno
import io
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


# -- what a command reads, and where its outputs may go ---------------------------------------
#: The files the current command reads, by real path (symbolic links resolved): their device
#: and inode where they exist (a hard link is the same file under another name), and what they
#: are ("an input of this command", "a file of the data mirror ..."). No output may be one.
_inputs: dict[str, tuple[tuple[int, int] | None, str]] = {}
#: Folders the current command reads implicitly (the data mirror, the download cache), by real
#: path: what each is. No output may lie inside one; only :func:`cache_entry` adds a file to
#: the cache.
_folders: dict[str, str] = {}
#: Whether a command is running (from :func:`guard_inputs` to :func:`end_guard`): only then is
#: what the readers read recorded (a library user may read a file and write it again).
_guarding = False
_INPUT = "an input of this command"


def _identity(path: str | os.PathLike) -> tuple[str, tuple[int, int] | None]:
    """``path``'s real path (symbolic links resolved) and, when it exists, its device and
    inode (a hard link is the same file under another name)."""
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
    except (OSError, ValueError):
        return real, None
    return real, (st.st_dev, st.st_ino)


def _same(a: tuple[str, tuple[int, int] | None], b: tuple[str, tuple[int, int] | None]) -> bool:
    return a[0] == b[0] or (a[1] is not None and a[1] == b[1])


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


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


def check_target(path: str | os.PathLike, *, cache: str | None = None) -> None:
    """Refuse, in one line, an output path that exists and is not a regular file (a folder, a
    device, a FIFO, a socket: a rename would replace it, a write would feed it), that lies
    under a file where a folder is expected, that is a file the current command reads
    (:func:`guard_inputs`, :func:`record_input`: named, or implicit) or a link to one, or that
    lies inside a folder it reads implicitly (:func:`guard_folder`). ``cache``: the real path
    of the guarded folder that :func:`cache_entry` adds a new file to."""
    p = Path(path)
    try:
        st = os.stat(p)  # through symbolic links: what a write would reach
    except (FileNotFoundError, NotADirectoryError):
        st = None
    except (OSError, ValueError) as e:
        raise SchedlabError(f"cannot write {p}: {getattr(e, 'strerror', None) or e}") from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise SchedlabError(f"{p}: is a directory, not a file name")
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise SchedlabError(f"{p}: is {_kind(st.st_mode)}, not a regular file: refusing to write over it")
    _first_existing_ancestor_is_folder(p)
    me = _identity(p)
    for real, (inode, what) in _inputs.items():
        if _same(me, (real, inode)):
            raise SchedlabError(f"{p}: is {what} ({real}): refusing to overwrite it")
    linked = _linked_into_folder(me[1]) if st is not None and st.st_nlink > 1 else None
    if linked is not None:
        raise SchedlabError(f"{p}: is a file of {linked[1]} ({linked[0]}): refusing to overwrite it")
    for folder, what in _folders.items():
        if _inside(me[0], folder) and not (folder == cache and st is None):
            where = "" if me[0] == str(p) else f"is {me[0]}, which "
            raise SchedlabError(f"{p}: {where}lies in {what} ({folder}), which this command reads: "
                                "refusing to write there")


def guard_folder(path: str | os.PathLike, what: str) -> None:
    """Guard a folder the current command may read without naming it (the data mirror, the
    download cache): no output may lie inside it, nor be a hard link to a file in it."""
    _folders[os.path.realpath(path)] = what


def _linked_into_folder(inode: tuple[int, int]) -> tuple[str, str] | None:
    """The file of a guarded folder, and what the folder is, that is the file ``inode`` (a
    hard link to it); looked for only when the output has other names."""
    for folder, what in _folders.items():
        for root, _, names in os.walk(folder):
            for name in names:
                member, other = _identity(os.path.join(root, name))
                if other == inode:
                    return member, what
    return None


def record_input(path: str | os.PathLike) -> None:
    """Add ``path`` to the files the current command reads (every reader of this module
    calls it): from now on no write may replace it."""
    if _guarding:
        real, inode = _identity(path)
        _inputs.setdefault(real, (inode, _INPUT))


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


def check_paths(inputs=(), outputs=(), folders=(), implicit: Mapping[str | os.PathLike, str] | None = None) -> None:
    """Check a command's paths before it does any work, and remember its inputs for every
    write that follows (:func:`guard_inputs`): each input exists and is readable (a folder
    stands for the files in it); each output is a new path or a regular file
    (:func:`check_target`), none is an input or a file of the folders the command reads
    implicitly (``implicit``, path: what it is), and no two outputs are the same file; each
    output folder is a folder or a new path (:func:`check_folder`) outside those folders."""
    guard_inputs(inputs, implicit)
    for path in inputs:
        _readable(Path(path))
    for folder in folders:
        check_folder(folder)
        real = os.path.realpath(folder)
        for guarded, what in _folders.items():
            if _inside(real, guarded):
                raise SchedlabError(f"{folder}: lies in {what} ({guarded}), which this command reads: refusing to write there")
    seen: dict[tuple[str, tuple[int, int] | None], str] = {}
    for path in outputs:
        check_target(path)
        me = _identity(path)
        other = next((name for ident, name in seen.items() if _same(me, ident)), None)
        if other is not None:
            raise SchedlabError(f"{path}: is also another output of this command ({other}): each output needs a file of its own")
        seen[me] = str(path)


def guard_inputs(paths, folders: Mapping[str | os.PathLike, str] | None = None) -> None:
    """Make ``paths`` (files, or folders standing for the files in them that match the path's
    ``members`` pattern, ``*`` by default) the current command's inputs, and ``folders``
    (path: what it is) the folders it reads implicitly (:func:`guard_folder`):
    :func:`check_target`, so every write, refuses them from now on, and every file read from now
    on (:func:`record_input`) until :func:`end_guard`."""
    global _guarding
    end_guard()
    _guarding = True
    for path in paths:
        p = Path(path)
        pattern = getattr(path, "members", "*")
        members = [p, *(q for q in _listing(p, pattern) if q.is_file())] if p.is_dir() else [p]
        for member in members:
            record_input(member)
    for folder, what in (folders or {}).items():
        guard_folder(folder, what)


def end_guard() -> None:
    """The command has ended: nothing it read is guarded any more."""
    global _guarding
    _guarding = False
    _inputs.clear()
    _folders.clear()


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
        try:
            yield tmps
        except OSError as e:
            if getattr(e, "errno", None) not in _FULL:
                raise
            # (the temporaries go with the stack: nothing half-written is left)
            where = next((f for t, f in zip(tmps, finals) if str(t) in str(e)), None)
            raise SchedlabError(f"cannot write {where or ', '.join(map(str, finals))}: "
                                f"{e.strerror or os.strerror(e.errno)}") from None
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


#: Errors of a write that found no room: a full disk, a quota, a file-size limit, a
#: read-only file system.
_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS)


@contextmanager
def cache_entry(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``, a new file of a download cache; on success it
    becomes ``path``. The one way a file is added to a folder the command reads implicitly
    (:func:`guard_folder`): a cache entry is made once and never replaced (when another process
    made it meanwhile, theirs is kept), so no command replaces what it reads."""
    final = Path(path)
    real = os.path.join(os.path.realpath(final.parent), final.name)
    cache = next((folder for folder in _folders if _inside(real, folder)), None)
    check_target(final, cache=cache)
    with _temporary(final) as tmp:
        try:
            yield tmp
        except OSError as e:
            if getattr(e, "errno", None) not in _FULL:
                raise
            raise SchedlabError(f"cannot write {final}: {e.strerror or os.strerror(e.errno)}") from None
        try:
            os.chmod(tmp, 0o666 & ~_umask())
            os.link(tmp, final)  # never onto an existing file
        except FileExistsError:
            pass
        except OSError as e:
            raise SchedlabError(f"cannot write {final}: {e.strerror or e}") from None


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
    """A temporary file beside ``final``, removed again unless it was renamed, with the folders
    made for it (nothing is left of a write that failed or was interrupted); the temporaries of
    ``final`` that a killed writer left are removed first (a run resumed after a hard kill
    leaves none behind)."""
    made = [p for p in Path(os.path.abspath(final)).parents if not os.path.lexists(p)]
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
            for folder in made:  # innermost first; one another output of the set still uses stays
                try:
                    folder.rmdir()
                except OSError:
                    break


def write_outputs(outputs: Mapping[str | os.PathLike, pd.DataFrame | dict | str | bytes]) -> None:
    """Write several outputs as one set (tables as parquet, dicts as JSON, text and bytes as
    they are): all appear or none."""
    with atomic_paths(*outputs) as tmps:
        for tmp, (final, obj) in zip(tmps, outputs.items()):
            if _is_table(obj):
                _to_parquet(obj, tmp, final)
            elif isinstance(obj, bytes):
                tmp.write_bytes(obj)
            elif isinstance(obj, str):
                tmp.write_text(obj)
            else:
                tmp.write_text(json.dumps(_plain(obj), indent=2, sort_keys=True) + "\n")


def _to_parquet(df: pd.DataFrame, tmp: Path, final) -> None:
    """``df`` as parquet at ``tmp``; a column that parquet cannot hold (values of mixed
    types) is one line naming ``final`` and the column."""
    import pyarrow

    try:
        df.to_parquet(tmp, index=False)
    except (pyarrow.ArrowInvalid, pyarrow.ArrowTypeError, pyarrow.ArrowNotImplementedError) as e:
        column = re.search(r"column (\S+)", str(e))
        where = f" column {column.group(1)!r}" if column else ""
        raise SchedlabError(f"{final}: cannot write{where} as parquet ({_first_line(e)})") from None


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


# -- reading: one reader per format --------------------------------------------------------
def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _open_input(path: str | os.PathLike) -> Path:
    """``path``, a regular file this user can read, recorded as an input of the command
    (:func:`record_input`); else one line saying why not."""
    p = Path(path)
    try:
        st = os.stat(p)
    except (FileNotFoundError, NotADirectoryError):
        raise SchedlabError(f"file not found: {p}") from None
    except (OSError, ValueError) as e:
        raise SchedlabError(f"cannot read {p}: {getattr(e, 'strerror', None) or e}") from None
    if not stat.S_ISREG(st.st_mode):
        raise SchedlabError(f"{p}: is {_kind(st.st_mode)}, not a regular file to read")
    record_input(p)
    return p


def read_bytes(path: str | os.PathLike) -> bytes:
    """A file's bytes, failing in one line when it is missing, not a file, or unreadable."""
    p = _open_input(path)
    try:
        return p.read_bytes()
    except OSError as e:
        raise SchedlabError(f"cannot read {p}: {e.strerror or e}") from None


def read_text(path: str | os.PathLike) -> str:
    """A UTF-8 text file, failing in one line when it is empty or holds bytes that are not
    UTF-8 (a binary file)."""
    data = read_bytes(path)
    if not data.strip():
        raise SchedlabError(f"{path}: is empty")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SchedlabError(f"{path}: not UTF-8 text (byte {e.start}: {data[e.start:e.start + 1]!r})") from None


def read_json(path: str | os.PathLike):
    """A JSON document, failing in one line when the file is missing, empty, not text or not
    JSON. ``Infinity`` and ``NaN`` are read as floats (a burst run's rate is ``Infinity``); the
    models of :mod:`schedlab.validation` reject them where a value must be finite."""
    text = read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise SchedlabError(f"{path}: not valid JSON: {e.msg} (line {e.lineno}, column {e.colno})") from None
    except (ValueError, RecursionError) as e:  # absurd nesting
        raise SchedlabError(f"{path}: not valid JSON: {_first_line(e)}") from None


def _checked_table(df: pd.DataFrame, p, required: tuple[str, ...], numeric: tuple[str, ...], rows: bool) -> pd.DataFrame:
    """``df`` read from ``p``: the ``required`` columns present, at least one row (with
    ``rows``), and the ``numeric`` columns that it holds finite numbers."""
    import numpy as np
    import pandas as pd

    missing = [c for c in required if c not in df.columns]
    if missing:
        raise SchedlabError(f"{p}: missing columns {', '.join(map(str, missing))}")
    if rows and not len(df):
        raise SchedlabError(f"{p}: holds no rows")
    for column in (c for c in numeric if c in df.columns):
        values = df[column]
        if not pd.api.types.is_numeric_dtype(values) or pd.api.types.is_bool_dtype(values):
            number = pd.to_numeric(values.map(lambda v: None if isinstance(v, bool) else v), errors="coerce")
            bad = int(np.argmax(number.isna().to_numpy())) if number.isna().any() else 0
            raise SchedlabError(f"{p}: column {column!r} must hold numbers, first bad row {bad} ({_short(values.iloc[bad])})")
        finite = np.isfinite(values.to_numpy(float))
        if not finite.all():
            bad = int(np.argmin(finite))
            raise SchedlabError(f"{p}: column {column!r} must hold finite numbers, first bad row {bad} "
                                f"({_short(values.iloc[bad])})")
    return df


def _short(value) -> str:
    text = repr(value.item() if hasattr(value, "item") else value)
    return text if len(text) <= 40 else text[:37] + "..."


def read_csv(path: str | os.PathLike, *, required: tuple[str, ...] = (), numeric: tuple[str, ...] = (),
             rows: bool = True, **options) -> pd.DataFrame:
    """A CSV table (TSV with ``sep="\\t"``; ``options`` go to :func:`pandas.read_csv`), failing in
    one line naming the file when it is empty, not UTF-8 text, not a table, lacks ``required``
    columns or (with ``rows``) rows, or holds anything but finite numbers in a ``numeric``
    column."""
    import pandas as pd

    p = Path(path)
    text = read_text(p)
    try:
        df = pd.read_csv(io.StringIO(text), **options)
    except pd.errors.EmptyDataError:
        raise SchedlabError(f"{p}: is empty (no header)") from None
    except (pd.errors.ParserError, ValueError, TypeError) as e:  # ragged rows, a column of the wrong type
        raise SchedlabError(f"{p}: not a readable table ({_first_line(e)})") from None
    return _checked_table(df, p, required, numeric, rows)


def read_jsonl(path: str | os.PathLike, *, required: tuple[str, ...] = (), numeric: tuple[str, ...] = (),
               rows: bool = True) -> pd.DataFrame:
    """A JSON Lines table (one object a line), failing in one line as :func:`read_csv` does;
    a line that is not a JSON object is named by its number."""
    import pandas as pd

    p = Path(path)
    text = read_text(p)
    try:
        df = pd.read_json(io.StringIO(text), lines=True)
    except (ValueError, TypeError, RecursionError) as e:
        raise SchedlabError(f"{p}: not JSON Lines ({_bad_line(text) or _first_line(e)})") from None
    bad = _bad_line(text) if len(df.columns) and any(not isinstance(c, str) for c in df.columns) else None
    if bad:
        raise SchedlabError(f"{p}: not JSON Lines ({bad})")
    return _checked_table(df, p, required, numeric, rows)


def _bad_line(text: str) -> str | None:
    """The first line of ``text`` that is not a JSON object, said as "line N: why"."""
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except (ValueError, RecursionError) as e:
            return f"line {number}: {_first_line(e)}"
        if not isinstance(value, dict):
            return f"line {number}: not a JSON object"
    return None


def read_parquet(path: str | os.PathLike, required: tuple[str, ...] = (), *, numeric: tuple[str, ...] = (),
                 rows: bool = False) -> pd.DataFrame:
    """Read a parquet table, failing in one line when it is missing, empty, not parquet, lacks
    ``required`` columns or (with ``rows``) rows, or holds anything but finite numbers in a
    ``numeric`` column."""
    import pandas as pd
    import pyarrow

    p = _open_input(path)
    if p.stat().st_size == 0:
        raise SchedlabError(f"{p}: is empty")
    try:
        df = pd.read_parquet(p)
    except PermissionError as e:
        raise SchedlabError(f"cannot read {p}: {e.strerror or e}") from None
    except (pyarrow.ArrowException, OSError, ValueError, TypeError) as e:
        raise SchedlabError(f"{p}: not a readable parquet table ({_first_line(e)})") from None
    return _checked_table(df, p, required, numeric, rows)
