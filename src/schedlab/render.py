"""A notebook's manifest (the inputs its rule declared) and its render: the jupytext source
executed by papermill with the manifest as its parameter, then exported to HTML, in one process."""

from __future__ import annotations

import json
import os
from pathlib import Path

from schedlab.io import atomic_path, atomic_paths

#: The kernel every notebook runs on (installed into the environment by `make install`).
KERNEL = "python3"


def write_manifest(path: str | Path, inputs: dict, **settings) -> None:
    """A notebook's declared inputs as JSON (paths relative to the manifest's folder, so the
    notebook reads them from any working folder), with the settings it renders with."""
    folder = os.path.dirname(path)
    rel = lambda p: [rel(q) for q in p] if isinstance(p, list) else os.path.relpath(p, folder)
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps({**settings, "inputs": {k: rel(v) for k, v in inputs.items()}}, indent=2) + "\n")


def read_manifest(path: str | Path) -> dict:
    """A notebook's inputs as its rule declared them (``<results>/notebooks/<name>.inputs.json``):
    the settings it was rendered with, and ``inputs`` (name -> path, or list of paths), each path
    resolved against the manifest's folder so that it reads the same from any working folder."""
    path = Path(path)
    manifest = json.loads(path.read_text())
    resolve = lambda p: [resolve(q) for q in p] if isinstance(p, list) else path.parent / p
    return {**manifest, "path": path, "inputs": {k: resolve(v) for k, v in manifest["inputs"].items()}}


def numbers_path(manifest: str | Path | dict) -> Path:
    """Where a notebook writes its headline numbers: ``<name>.numbers.json`` beside its manifest
    ``<name>.inputs.json`` (``manifest``: the manifest's path, or :func:`read_manifest`'s dict)."""
    path = Path(manifest["path"] if isinstance(manifest, dict) else manifest)
    return path.with_name(path.name.removesuffix(".inputs.json") + ".numbers.json")


def _plain(value):
    """``value`` as JSON: tables as lists of records (their index as columns), numpy scalars as
    Python numbers, NaN as null."""
    import pandas as pd

    if isinstance(value, pd.Series):
        value = value.to_frame()
    if isinstance(value, pd.DataFrame):
        flat = value.reset_index() if not isinstance(value.index, pd.RangeIndex) else value
        flat.columns = [" ".join(map(str, c)) if isinstance(c, tuple) else str(c) for c in flat.columns]
        return json.loads(flat.to_json(orient="records"))
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "item"):  # a numpy scalar
        value = value.item()
    if isinstance(value, float) and value != value:
        return None
    return value


def write_numbers(manifest: str | Path | dict, **numbers) -> Path:
    """Write a notebook's headline numbers (tables, numbers, text) to :func:`numbers_path`, where
    the pipeline's results page (``workflow/scripts/results_page.py``) reads them."""
    path = numbers_path(manifest)
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(_plain(numbers), indent=1, allow_nan=False) + "\n")
    return path


def render(source: str | Path, *, manifest: str | Path, ipynb: str | Path, html: str | Path, figures_dir: str | Path) -> None:
    """Execute the jupytext notebook ``source`` with parameters ``manifest`` and ``figures_dir``
    into ``ipynb`` (written cell by cell, as papermill does, under a temporary name), then export
    it to ``html``; both appear together, or neither."""
    import jupytext
    import nbconvert
    import papermill
    from jupyter_client.kernelspec import get_kernel_spec

    notebook = jupytext.read(source)
    spec = get_kernel_spec(KERNEL)
    notebook.metadata["kernelspec"] = {"name": KERNEL, "display_name": spec.display_name, "language": spec.language}
    with atomic_paths(ipynb, html) as (tmp_ipynb, tmp_html):
        executed = papermill.execute_notebook(
            notebook,
            str(tmp_ipynb),
            parameters={"manifest": str(manifest), "figures_dir": str(figures_dir)},
            kernel_name=KERNEL,
            progress_bar=False,
        )
        body, _ = nbconvert.HTMLExporter().from_notebook_node(executed)
        tmp_html.write_text(body)
