"""``schedlab schedulers`` (the registered schedulers and routers), ``schedlab backends`` (the
registered backends) and ``schedlab collect`` (run summaries gathered into one parquet table);
the listings' printed tables."""

from __future__ import annotations

import sys
from pathlib import Path

from schedlab import registry, validation
from schedlab.cli_types import OutputPath, input_folder
from schedlab.errors import SchedlabError
from schedlab.io import read_json, write_parquet

# pandas is imported inside the command that builds a table with it: every command, `--help`
# too, imports this module (start-up time).


def print_table(header, rows) -> None:
    """Columns padded to their widest value, the last one as it is."""
    widths = [max(len(str(r[k])) for r in [header, *rows]) for k in range(len(header) - 1)]
    for row in [header, *rows]:
        print("  ".join(str(v).ljust(w) for v, w in zip(row, widths)) + "  " + row[-1])


def cmd_backends(args) -> None:
    """Every registered backend, one line each."""
    print_table(("backend", "clock", "schedulers", "from", "what it is"),
                [(e.name, "virtual" if e.simulated else "wall", ",".join(e.kinds), f"{e.distribution} ({e.module})",
                  e.summary) for e in registry.backend_entries()])


def cmd_schedulers(args) -> None:
    """Every registered scheduler and router, one line each, and a line per plug-in that
    failed to load."""
    rows = [(e.name, e.kind, e.paper or "-", ",".join(e.modalities), f"{e.distribution} ({e.module})", e.summary)
            for e in registry.entries()]
    rows += [(e.name, "router", e.paper or "-", "-", f"{e.distribution} ({e.module})", e.summary)
             for e in registry.router_entries()]
    print_table(("name", "kind", "paper", "workloads", "from", "what it does"), rows)
    reasons = list(registry.broken().values())
    for reason in reasons[:-1]:
        print(f"schedlab: error: {reason}", file=sys.stderr)
    if reasons:  # the last one as the command's own error: the listing exits non-zero
        raise SchedlabError(reasons[-1])


def cmd_collect(args) -> None:
    import pandas as pd

    # A folder (one engine job's runs) stands for the run summaries in it: it must hold one.
    paths = []
    for p in args.summaries:
        found = sorted(map(str, Path(p).glob("*.json"))) if Path(p).is_dir() else [p]
        if not found:
            raise SchedlabError(f"{p}: a folder without run summaries (*.json): nothing to collect")
        paths += found
    rows = [read_json(p) for p in paths]
    validation.check_summaries(rows, paths)
    write_parquet(pd.DataFrame(rows), args.out)


def add_commands(sub) -> None:
    sc = sub.add_parser("schedulers", help="list the registered schedulers and routers (built-in and plug-ins)")
    sc.set_defaults(func=cmd_schedulers)
    bk = sub.add_parser("backends", help="list the registered backends (where simulate, vllm-run and the pipeline run a scheduler)")
    bk.set_defaults(func=cmd_backends)

    c = sub.add_parser("collect", help="gather run summaries (JSON) into one parquet table")
    c.add_argument("summaries", type=input_folder("*.json"), nargs="+", help="run summaries (JSON), or folders of them")
    c.add_argument("--out", type=OutputPath, required=True)
    c.set_defaults(func=cmd_collect)
