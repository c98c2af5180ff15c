"""Where data files come from: an offline mirror folder, or a download into the cache.

Every download is a :class:`Remote`: a URL at a pinned revision (a commit id, never a branch)
with the file's SHA-256, checked when it is downloaded and again whenever the cached copy is
reused. Where no checksum is published (``sha256=None``), the first download's is recorded
beside the cached copy (``<file>.sha256``) and checked on every reuse. Mirror files are the
user's copies and are read as they are.

Both folders are inputs of every command (:func:`data_folders`): no output may lie in them, and
a file is added to the cache only by :func:`schedlab.io.cache_entry`, never replaced.
"""

from __future__ import annotations

import csv
import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from schedlab.errors import SchedlabError
from schedlab.io import cache_entry, read_csv

if TYPE_CHECKING:  # pandas loads when a table is read (start-up time)
    import pandas as pd

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


def data_folders() -> dict[Path, str]:
    """The folders any command may read without naming them, and what each is: the mirror
    (when set) and the cache (:func:`schedlab.io.guard_folder`)."""
    folders = {cache_dir(): "the data cache (SCHEDLAB_DATA_CACHE)"}
    mirror = os.environ.get("SCHEDLAB_DATA_MIRROR")
    if mirror:
        folders[Path(mirror)] = "the data mirror (SCHEDLAB_DATA_MIRROR)"
    return folders


def mirror_file(name: str) -> Path | None:
    """``name`` inside the mirror, or None when there is no mirror or it lacks the file."""
    mirror = mirror_dir()
    if mirror is None or not (mirror / name).is_file():
        return None
    return mirror / name


@dataclass(frozen=True)
class Remote:
    """A file to download: its URL at a pinned revision, and its SHA-256 (None: none
    published; the first download's is recorded and checked on reuse)."""

    url: str
    sha256: str | None = None


def sha256_of(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _recorded(dest: Path) -> Path:
    """Where the SHA-256 of a download without a published checksum is kept."""
    return dest.with_name(dest.name + ".sha256")


def _record(dest: Path, sha256: str) -> None:
    with cache_entry(_recorded(dest)) as tmp:
        tmp.write_text(sha256 + "\n")


def _check(path: Path, expected: str, what: str) -> None:
    actual = sha256_of(path)
    if actual != expected:
        raise SchedlabError(f"{what}: SHA-256 {actual} does not match the expected {expected}")


def download(remote: Remote, dest: str | os.PathLike) -> Path:
    """Fetch ``remote`` to ``dest`` atomically and check its SHA-256; an existing ``dest`` is
    reused after the same check (a mismatch is an error naming the file: delete it to fetch
    it again)."""
    import http.client
    import urllib.request

    dest = Path(dest)
    if dest.is_file():
        expected = remote.sha256 or (_recorded(dest).read_text().strip() if _recorded(dest).is_file() else None)
        if expected is None:
            _record(dest, sha256_of(dest))
        else:
            _check(dest, expected, f"cached {dest} (from {remote.url}; delete it to download again)")
        return dest
    try:
        with urllib.request.urlopen(remote.url, timeout=TIMEOUT_S) as response, cache_entry(dest) as tmp:
            with open(tmp, "wb") as out:
                shutil.copyfileobj(response, out)
            if remote.sha256:
                _check(tmp, remote.sha256, f"download of {remote.url}")
            else:
                _record(dest, sha256_of(tmp))
    except (OSError, http.client.HTTPException) as exc:
        raise DataUnavailable(
            f"cannot download {remote.url} ({exc}); "
            "set SCHEDLAB_DATA_MIRROR to a folder holding an offline copy"
        ) from exc
    return dest


def read_utterances(path: str | os.PathLike) -> pd.DataFrame:
    """Read a tab-separated table with header ``utterance_id, duration_s, transcript`` (one
    line naming the file on any problem, :func:`schedlab.io.read_csv`)."""
    df = read_csv(path, sep="\t", quoting=csv.QUOTE_NONE, keep_default_na=False, required=COLUMNS,
                  numeric=("duration_s",), dtype={"utterance_id": str, "transcript": str})
    return df[list(COLUMNS)]


def write_utterances(df: pd.DataFrame, path: str | os.PathLike) -> None:
    """Write an utterance table in the format :func:`read_utterances` reads, a new file of the
    cache."""
    with cache_entry(path) as tmp:
        df[list(COLUMNS)].to_csv(tmp, sep="\t", index=False, quoting=csv.QUOTE_NONE)
