"""How the pipeline ends before Snakemake plans a job: the Snakefile checks the configuration
(:func:`schedlab.validation.config.check_config`) and hands its one-line error to
:func:`config_error`, which prints it as the command line prints errors (``schedlab: error:
...``, exit status 2), where Snakemake itself would print a multi-line ``WorkflowError``.

A killed run's lock is released by :func:`schedlab.compat.snakemake.release_stale_lock`.
"""

from __future__ import annotations

import sys


def config_error(message) -> None:
    """End the run before any job: one line on stderr, exit status 2."""
    print("schedlab: error: " + " ".join(str(message).split()), file=sys.stderr)
    raise SystemExit(2)
