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
    return {**manifest, "inputs": {k: resolve(v) for k, v in manifest["inputs"].items()}}


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
