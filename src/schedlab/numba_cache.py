"""A writable cache for numba's compiled kernels, chosen before numba is imported.

The kernels are compiled with ``cache=True``. numba caches beside the source (``__pycache__``)
or, where that is read-only, in the user's cache folder; where neither can be written (another
user's install and a home that is missing or read-only) every kernel fails with "no locator
available". Then this picks the first writable of ``$XDG_CACHE_HOME/schedlab/numba`` (or
``~/.cache/schedlab/numba``) and ``<temp>/schedlab-numba-<uid>`` as ``NUMBA_CACHE_DIR``; a
``NUMBA_CACHE_DIR`` the user set is kept.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

#: The folders of schedlab's modules with cached kernels (numba caches beside each source).
KERNEL_FOLDERS = ("engine", "slosa")


def _writable(folder: Path) -> bool:
    """Whether files can be made in ``folder`` (or, when it is missing, in its nearest parent
    that exists, where it would be made)."""
    while not folder.exists():
        if folder.parent == folder:
            return False
        folder = folder.parent
    return folder.is_dir() and os.access(folder, os.W_OK | os.X_OK)


def _user_cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path(os.path.expanduser("~")) / ".cache")


def cache_folder() -> str | None:
    """The folder numba must cache in, or None where its own choice works."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        return None
    package = Path(__file__).resolve().parent
    if all(_writable(package / name / "__pycache__") for name in KERNEL_FOLDERS):
        return None
    candidates = [_user_cache() / "schedlab" / "numba", Path(tempfile.gettempdir()) / f"schedlab-numba-{os.getuid()}"]
    for candidate in candidates:
        try:
            candidate.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if _writable(candidate):
            return str(candidate)
    return None


def use_writable_cache() -> None:
    """Set ``NUMBA_CACHE_DIR`` where numba's own choice cannot be written (numba reads it when
    imported; when it already is, its configuration is changed too)."""
    folder = cache_folder()
    if folder is None:
        return
    os.environ["NUMBA_CACHE_DIR"] = folder
    if "numba" in sys.modules:
        sys.modules["numba"].config.CACHE_DIR = folder
