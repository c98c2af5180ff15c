"""Reading inputs with one-line errors, and atomic writes: every output appears whole under its
final name or not at all, and a run's outputs appear together or not at all."""

from __future__ import annotations

import json
import math
import os
import tempfile
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Iterator, Mapping

import pandas as pd
import pyarrow

from schedlab.errors import SchedlabError


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` only on success."""
    with atomic_paths(path) as (tmp,):
        yield tmp


@contextmanager
def atomic_paths(*paths: str | os.PathLike) -> Iterator[list[Path]]:
    """Yield a temporary path beside each of ``paths``; only when the block succeeds are they
    renamed onto ``paths``, all of them (a rename that fails undoes the ones before it)."""
    finals = [Path(p) for p in paths]
    for final in finals:
        if final.is_dir():
            raise SchedlabError(f"{final}: is a directory, not a file name")
    with ExitStack() as stack:
        tmps = [stack.enter_context(_temporary(final)) for final in finals]
        yield tmps
        done: list[Path] = []
        for tmp, final in zip(tmps, finals):
            try:
                os.replace(tmp, final)
            except OSError as e:
                for written in done:
                    written.unlink()
                raise SchedlabError(f"cannot write {final}: {e.strerror or e}") from None
            done.append(final)


@contextmanager
def _temporary(final: Path) -> Iterator[Path]:
    """A temporary file beside ``final``, removed again unless it was renamed."""
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent)
    except OSError as e:
        raise SchedlabError(f"cannot write {final}: {e.strerror or e}") from None
    os.close(fd)
    try:
        yield Path(tmp)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_outputs(outputs: Mapping[str | os.PathLike, pd.DataFrame | dict]) -> None:
    """Write several outputs as one set (tables as parquet, dicts as JSON): all appear or none."""
    with atomic_paths(*outputs) as tmps:
        for tmp, obj in zip(tmps, outputs.values()):
            if isinstance(obj, pd.DataFrame):
                obj.to_parquet(tmp, index=False)
            else:
                tmp.write_text(json.dumps(_plain(obj), indent=2, sort_keys=True) + "\n")


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
        raise SchedlabError(f"file not found: {p}")
    return p


def read_json(path: str | os.PathLike):
    """A JSON document, failing in one line when the file is missing or not JSON. ``Infinity``
    and ``NaN`` are read as floats (a burst run's rate is ``Infinity``); the models of
    :mod:`schedlab.validation` reject them where a value must be finite."""
    p = _existing(path)
    try:
        return json.loads(p.read_bytes())
    except json.JSONDecodeError as e:
        raise SchedlabError(f"{p}: not valid JSON: {e.msg} (line {e.lineno}, column {e.colno})") from None
    except (ValueError, RecursionError) as e:  # bad UTF-8, absurd nesting
        raise SchedlabError(f"{p}: not valid JSON: {e}") from None


def read_parquet(path: str | os.PathLike, required: tuple[str, ...] = ()) -> pd.DataFrame:
    """Read a parquet table, failing in one line when it is missing, not parquet, or lacks
    ``required`` columns."""
    p = _existing(path)
    try:
        df = pd.read_parquet(p)
    except (pyarrow.ArrowException, OSError, ValueError) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise SchedlabError(f"{p}: not a readable parquet table ({reason})") from None
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise SchedlabError(f"{p}: missing columns {', '.join(missing)}")
    return df
