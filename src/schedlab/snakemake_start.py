"""What the pipeline does before Snakemake plans a job (the Snakefile calls it first).

:func:`check_config`: the configuration against ``workflow/schemas/config.schema.yaml``, its
first problem as one line naming the key (``schedlab: error: config key ...``) and exit status
2, where Snakemake's own ``validate`` prints a multi-line ``WorkflowError``; the Snakefile's
cross-reference checks end the same way (:func:`config_error`).

A killed run's lock is released by :func:`schedlab.compat.snakemake.release_stale_lock`.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path


def config_error(message: str):
    """End the run before any job: one line on stderr, exit status 2."""
    print("schedlab: error: " + " ".join(str(message).split()), file=sys.stderr)
    raise SystemExit(2)


def _key(path) -> str:
    """``asr.experiments.burst.rates[0]`` from a JSON path."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _problem(error) -> str:
    value = error.instance
    if isinstance(value, float) and math.isnan(value):
        return "must be a number, not NaN"
    return error.message


def check_config(config: dict, schema_path: str | os.PathLike) -> None:
    """``config`` against the JSON schema at ``schema_path``; the first problem (jsonschema's
    best match) ends the run in one line naming its key (:func:`config_error`)."""
    import jsonschema
    import yaml

    schema = yaml.safe_load(Path(schema_path).read_text())
    validator = jsonschema.validators.validator_for(schema)(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(config))
    if error is not None:
        where = f"config key {_key(error.absolute_path)}" if error.absolute_path else "config"
        config_error(f"{where}: {_problem(error)}")
    _check_results(config.get("results"))


def _check_results(results) -> None:
    """The results folder, where every output goes: a folder or a new path, under folders (a file
    in its place gave a Snakemake traceback of some 40 lines)."""
    if not isinstance(results, str):
        return
    path = Path(results)
    for where in (path, *path.parents):
        if where.exists() and not where.is_dir():
            config_error(f"config key results: {results} {'is' if where == path else f'lies under {where}, which is'} "
                         "a file, not a folder")
        if where.exists():
            return
