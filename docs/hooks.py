"""MkDocs hooks: the pages' generated parts, filled in as the site is built.

A page asks for one with a marker line, ``<!-- generated: NAME -->`` or ``<!-- generated: results
SECTION -->``:

- ``cli``: the command-line reference, walked from ``schedlab.cli.build_parser()``;
- ``figure-map``: the figure map (``workflow/report/figure_map.yaml``), one table per notebook;
- ``replay-rules``: the replay acceptance rules with their thresholds, read from
  ``schedlab.backends.served.quality``;
- ``import-contracts``: the import-linter contracts of ``pyproject.toml``;
- ``workarounds``: the workarounds of ``schedlab.compat.WORKAROUNDS``, with their canary tests;
- ``runs``: the history of runs (``docs/runs.csv``, appended by ``make record-run``);
- ``results SECTION``: that section of the last run's results page (``<results>/results.md``,
  written by the pipeline's ``results_page`` rule), or a line saying how to make it.

The results folder is ``results/`` beside ``mkdocs.yml`` (``SCHEDLAB_RESULTS`` names another).
"""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"^<!-- generated: (?P<name>[\w-]+)(?: (?P<arg>[^>]*?))? -->$", re.M)


def results_dir() -> Path:
    return Path(os.environ.get("SCHEDLAB_RESULTS", ROOT / "results"))


# -- the command-line reference ------------------------------------------------------------------
def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _option_rows(parser: argparse.ArgumentParser) -> list[str]:
    rows = []
    for action in parser._actions:  # argparse's documented way to list a parser's arguments
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        name = ", ".join(f"`{s}`" for s in action.option_strings) or f"`{action.dest}`"
        if action.choices is not None:
            value = " \\| ".join(f"`{c}`" for c in action.choices)
        elif action.nargs == 0:
            value = ""
        else:
            value = f"`{action.metavar or action.dest.upper()}`" + (" ..." if action.nargs in ("+", "*") else "")
        default = "" if action.default in (None, argparse.SUPPRESS) or action.nargs == 0 else f"`{action.default}`"
        text = action.help or ""
        if "%(" in text:
            text = text % {**vars(action), "prog": parser.prog}
        required = "yes" if action.required or not action.option_strings else ""
        rows.append(f"| {name} | {value} | {required} | {default} | {_cell(text)} |")
    return rows


def cli_markdown(parser: argparse.ArgumentParser, depth: int = 2, about: str = "") -> str:
    """``parser`` and every subcommand under it, one section each: what it does, its usage line
    and a table of its arguments."""
    out = []
    if depth > 2:
        out.append(f"{'#' * depth} `{parser.prog}`\n")
        if about:
            out.append(f"{about}\n")
    out.append(f"```text\n{parser.format_usage().strip()}\n```\n")
    rows = _option_rows(parser)
    if rows:
        out.append("| argument | value | required | default | help |\n|---|---|---|---|---|\n" + "\n".join(rows) + "\n")
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                out.append(cli_markdown(sub, min(depth + 1, 6), helps.get(name, "")))
    return "\n".join(out)


def cli_reference() -> str:
    """The reference of ``schedlab``, its usage lines wrapped at 100 columns whatever the terminal."""
    from schedlab.cli import build_parser

    columns = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"
    try:
        return cli_markdown(build_parser())
    finally:
        if columns is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = columns


# -- the figure map ------------------------------------------------------------------------------
def figure_map_markdown() -> str:
    from schedlab import figure_map

    out = []
    for notebook, entry in figure_map.load(ROOT / "workflow" / "report" / "figure_map.yaml").items():
        rows = [f"| `{name}` | {_cell(f.get('reproduces') or '')} | {_cell(f['caption'])} | "
                f"{', '.join(f'`{r}`' for r in f.get('rules') or [])} |"
                for name, f in (entry.get("figures") or {}).items()]
        rows += [f"| table | {_cell(t.get('reproduces') or '')} | {_cell(t['caption'])} | `notebook` |"
                 for t in entry.get("tables") or []]
        out.append(f"### {entry.get('title', notebook)}\n\n`notebooks/{notebook}.py` -> "
                   f"`results/figures/{notebook}/`, `results/notebooks/{notebook}.html`\n\n"
                   "| figure | reproduces | shows | rules |\n|---|---|---|---|\n" + "\n".join(rows) + "\n")
    return "\n".join(out)


# -- the replay acceptance rules -----------------------------------------------------------------
def replay_rules_markdown() -> str:
    from schedlab.backends.served import quality as q

    rules = [
        ("Other processes left the engine the machine.", f"`INTERFERENCE` = {q.INTERFERENCE:.0%} of the cores",
         "`foreign_cpu_share` (busy CPU time from `/proc/stat` less the server's and the client's own) at most the "
         "threshold; otherwise flawed as *interference*"),
        ("The engine's scheduler, not the front end, set the latencies.", f"`FRONT_END_LAG` = {q.FRONT_END_LAG:.0%} of "
         "the requests' time", "`outside_engine_share` (Little's law: the client's mean number of requests in the system "
         "against the scheduler's) at most the threshold; otherwise flawed as *front end lagged*"),
        ("The client offered the trace's arrivals.", f"`CLIENT_LAG_MS` = {q.CLIENT_LAG_MS:g} ms",
         "`send_lag_max_ms` (the latest request's send time after its arrival offset) at most the threshold; "
         "otherwise flawed as *client late*"),
    ]
    return ("| statement | threshold | check |\n|---|---|---|\n"
            + "\n".join(f"| {s} | {t} | {c} |" for s, t, c in rules) + "\n")


# -- the import contracts -----------------------------------------------------------------------
def import_contracts_markdown() -> str:
    import tomllib

    out = []
    for c in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]:
        mods = lambda key: ", ".join(f"`{m}`" for m in c.get(key, []))
        if c["type"] == "forbidden":
            rule = f"{mods('source_modules')} import none of {mods('forbidden_modules')}"
        elif c["type"] == "independence":
            rule = f"none of {mods('modules')} imports another"
        else:
            rule = "each layer imports only the layers below it: " + " > ".join(f"`{layer}`" for layer in c["layers"])
        out.append(f"- **{c['name']}** ({c['type']}): {rule}.")
    return "\n".join(out) + "\n"


# -- the workarounds ----------------------------------------------------------------------------
def workarounds_markdown() -> str:
    from schedlab.compat import WORKAROUNDS

    rows = [f"| {w.name} | `{w.shim}` (used by `{w.used_by}`) | {_cell(w.what)} | {w.written_for} | "
            f"{_cell(w.upstream)} | `{w.canary}` |" for w in WORKAROUNDS]
    return ("| workaround | where | what it does | written for | upstream | canary |\n|---|---|---|---|---|---|\n"
            + "\n".join(rows) + "\n")


# -- the results page ----------------------------------------------------------------------------
def results_section(section: str) -> str:
    page = results_dir() / "results.md"
    if not page.exists():
        return ("*Not made yet: this section is filled from `results/results.md`, which `make reproduce` "
                "writes (the pipeline's `results_page` rule).*\n")
    text = page.read_text()
    found = re.search(rf"^## {re.escape(section)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    if not found:
        return f"*The results page of this run has no section {section!r}.*\n"
    body = found.group(1).strip()
    if section == "Paper vs ours":  # the page's header (date, commit, machine) leads the first section
        header = text.split("\n## ", 1)[0].split("\n", 1)[1].strip()
        body = f"{header}\n\n{body}"
    return body + "\n"


# -- the history of runs ------------------------------------------------------------------------
def runs_markdown(history: Path | None = None) -> str:
    """The runs recorded in ``history`` (docs/runs.csv, appended by ``make record-run``): for each
    number, its median and range over the runs, then every run."""
    import csv

    rows = list(csv.DictReader((history or ROOT / "docs" / "runs.csv").open()))
    if not rows:
        return "*No run recorded yet: after `make reproduce`, `make record-run` appends this run.*\n"
    numeric = [c for c in rows[0] if c not in ("generated", "commit", "machine", "backend")]
    values = {c: sorted(float(r[c]) for r in rows if r[c] not in ("", None)) for c in numeric}
    summary = [f"| `{c}` | {len(v)} | {v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2:g} | "
               f"{v[0]:g} | {v[-1]:g} |" for c, v in values.items() if v]
    table = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    table += ["| " + " | ".join(_cell(r[c]) for c in rows[0]) + " |" for r in rows]
    return (f"{len(rows)} runs recorded.\n\n| number | runs | median | min | max |\n|---|---|---|---|---|\n"
            + "\n".join(summary) + "\n\n" + "\n".join(table) + "\n")


GENERATORS = {"cli": cli_reference, "figure-map": figure_map_markdown, "replay-rules": replay_rules_markdown,
              "import-contracts": import_contracts_markdown, "runs": runs_markdown,
              "workarounds": workarounds_markdown}


def fill(markdown: str) -> str:
    """``markdown`` with every marker replaced by what it asks for."""
    def one(m: re.Match) -> str:
        if m.group("name") == "results":
            return results_section(m.group("arg") or "")
        if m.group("name") not in GENERATORS:
            raise ValueError(f"unknown generated part {m.group('name')!r}")
        return GENERATORS[m.group("name")]()

    return MARKER.sub(one, markdown)


def on_page_markdown(markdown, page, config, files):
    return fill(markdown)
