"""``schedlab check-config``: a pipeline config checked as the Snakefile checks it, before a run."""

from __future__ import annotations

from schedlab.cli_types import InputPath

# The checker (YAML, the JSON schema, the registries) is imported inside the command: every
# command, `--help` too, imports this module (start-up time).


def cmd_check_config(args) -> None:
    """A pipeline config checked as the Snakefile checks it before any job (its shape, names and
    references: :mod:`schedlab.validation.config`): the same one-line error, or one line that it
    passed."""
    from schedlab.validation.config import check_config, read_config

    check_config(read_config(args.config))
    print(f"{args.config}: the pipeline config passes every check")


def add_commands(sub) -> None:
    cc = sub.add_parser("check-config", help="check a pipeline config (config.yaml) as the pipeline does, before a run")
    cc.add_argument("config", type=InputPath, help="the config file (YAML), as snakemake --configfile takes it")
    cc.set_defaults(func=cmd_check_config)
