"""The `notebook` rule: write the notebook's manifest (its declared inputs), then render it."""

import logging
import sys

from schedlab.render import render, write_manifest

sm = snakemake  # noqa: F821 (set by Snakemake's script directive)
with open(sm.log[0], "w") as log:
    sys.stdout = sys.stderr = log
    logging.basicConfig(stream=log, level=logging.INFO, force=True)
    inputs = {k: v if isinstance(v, str) else list(v) for k, v in sm.input.items() if k != "source"}
    write_manifest(sm.output.manifest, inputs, **sm.params.settings)
    render(sm.input.source, manifest=sm.output.manifest, ipynb=sm.output.ipynb, html=sm.output.html,
           figures_dir=sm.output.figures)
