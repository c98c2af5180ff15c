"""``schedlab`` command line: data, workload(s), profile, steptime, front-end-cost, fit, simulate, cluster,
schedulers, collect, check-config, vllm-run, vllm-serve, transformers-run, slosa, ewsjf, slai, tournament, extensions."""

from __future__ import annotations

import argparse
import sys

from schedlab.cli import clusters, engines, exits, fits, pipeline_config, profiles, simulation, tables, traces
from schedlab.cli_types import command_paths
from schedlab.data.sources import data_folders
from schedlab.ewsjf import cli as ewsjf_cli
from schedlab.extensions import cli as extensions_cli
from schedlab.io import check_paths, end_guard
from schedlab.slai import cli as slai_cli
from schedlab.slosa import cli as slosa_cli
from schedlab.tournament import cli as tournament_cli

#: The command groups, each adding its commands with ``add_commands(sub)``, in the order
#: ``schedlab --help`` lists them: schedlab's own, then the papers' and the cross-paper ones.
COMMAND_GROUPS = (traces, profiles, fits, simulation, engines, clusters, tables, pipeline_config,
                  slosa_cli, ewsjf_cli, slai_cli, tournament_cli, extensions_cli)


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line (``schedlab: error: ...``), exit status 2, like other errors."""

    def error(self, message: str):
        print(f"schedlab: error: {message}", file=sys.stderr)
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="schedlab", description=__doc__)
    p.add_argument("--debug", action="store_true",
                   help=f"print an error's traceback before its one line (also: {exits.DEBUG_VARIABLE}=1)")
    sub = p.add_subparsers(dest="command", required=True)
    for group in COMMAND_GROUPS:
        group.add_commands(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run one command (:func:`schedlab.cli.exits.exit_status`: bad input is one line and exit
    status 2, Ctrl-C one line and 130). Either way no output is left half-written
    (:mod:`schedlab.io`)."""
    try:
        args = build_parser().parse_args(argv)
    except KeyboardInterrupt:
        return exits.interrupted()
    exits.stop_on_sigterm()

    def command() -> None:
        # Before any work: inputs readable, outputs where a file may go, none of them an input,
        # named or implicit (the data mirror and cache that any command may read).
        inputs, outputs, folders = command_paths(args)
        check_paths(inputs, outputs, folders, implicit=data_folders())
        args.func(args)

    try:
        return exits.exit_status(command, debug=args.debug)
    finally:
        end_guard()  # the command's inputs are guarded while it runs, not after
