"""Atomic writes: every output appears whole under its final name or not at all."""

from __future__ import annotations

import json
import math
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pandas as pd

from schedlab.errors import SchedlabError


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` only on success."""
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, final)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_parquet(df: pd.DataFrame, path: str | os.PathLike) -> None:
    with atomic_path(path) as tmp:
        df.to_parquet(tmp, index=False)


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


def write_json(obj: dict, path: str | os.PathLike) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(_plain(obj), indent=2, sort_keys=True) + "\n")


def read_parquet(path: str | os.PathLike, required: tuple[str, ...] = ()) -> pd.DataFrame:
    """Read a parquet table, failing clearly when it is missing or lacks ``required`` columns."""
    p = Path(path)
    if not p.is_file():
        raise SchedlabError(f"file not found: {p}")
    df = pd.read_parquet(p)
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise SchedlabError(f"{p}: missing columns {', '.join(missing)}")
    return df
