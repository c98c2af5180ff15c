"""Where data files come from: an offline mirror folder, or a download into the cache."""

from __future__ import annotations

import csv
import http.client
import os
import shutil
import urllib.request
from pathlib import Path

import pandas as pd

from schedlab.errors import SchedlabError
from schedlab.io import atomic_path

COLUMNS = ("utterance_id", "duration_s", "transcript")
TIMEOUT_S = 60


class DataUnavailable(SchedlabError):
    """A data file could be neither found in the mirror nor downloaded."""


def cache_dir() -> Path:
    """Folder for downloads and parsed tables: ``$SCHEDLAB_DATA_CACHE`` or ``./data-cache``."""
    return Path(os.environ.get("SCHEDLAB_DATA_CACHE", "data-cache"))


def mirror_dir() -> Path | None:
    """The offline mirror folder named by ``$SCHEDLAB_DATA_MIRROR``, or None when unset."""
    value = os.environ.get("SCHEDLAB_DATA_MIRROR")
    if not value:
        return None
    path = Path(value)
    if not path.is_dir():
        raise SchedlabError(f"SCHEDLAB_DATA_MIRROR is not a directory: {path}")
    return path


def mirror_file(name: str) -> Path | None:
    """``name`` inside the mirror, or None when there is no mirror or it lacks the file."""
    mirror = mirror_dir()
    if mirror is None or not (mirror / name).is_file():
        return None
    return mirror / name


def download(url: str, dest: str | os.PathLike) -> Path:
    """Fetch ``url`` to ``dest`` atomically; an existing ``dest`` is kept as is."""
    dest = Path(dest)
    if dest.is_file():
        return dest
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response, atomic_path(dest) as tmp:
            with open(tmp, "wb") as out:
                shutil.copyfileobj(response, out)
    except (OSError, http.client.HTTPException) as exc:
        raise DataUnavailable(
            f"cannot download {url} ({exc}); "
            "set SCHEDLAB_DATA_MIRROR to a folder holding an offline copy"
        ) from exc
    return dest


def read_utterances(path: str | os.PathLike) -> pd.DataFrame:
    """Read a tab-separated table with header ``utterance_id, duration_s, transcript``."""
    df = pd.read_csv(
        path, sep="\t", quoting=csv.QUOTE_NONE, keep_default_na=False,
        dtype={"utterance_id": str, "duration_s": float, "transcript": str},
    )
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise SchedlabError(f"{path}: missing columns {', '.join(missing)}")
    return df[list(COLUMNS)]


def write_utterances(df: pd.DataFrame, path: str | os.PathLike) -> None:
    """Write an utterance table in the format :func:`read_utterances` reads."""
    with atomic_path(path) as tmp:
        df[list(COLUMNS)].to_csv(tmp, sep="\t", index=False, quoting=csv.QUOTE_NONE)
