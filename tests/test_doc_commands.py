"""Every shell block of README.md and docs/*.md, run as a reader runs it: page by page, each
page's blocks in order in one temporary folder, under ``bash -euo pipefail``, with the virtual
environment's commands first on the PATH. A page that runs `make` or `snakemake`, or names a file
of the checkout (config.yaml, examples/..., src/...), runs in a copy of the checkout as a fresh
clone holds it (its tracked files, ``.venv`` linked to this interpreter's environment); any other
page from an empty folder. So no block writes into the repository.

A comment on the line just before a block says how it runs (docs/extending.md#documentation
lists them): ``<!-- docs-run: serving -->`` (it starts a real engine or server: the page runs
with the real engines, in the serving phase), ``<!-- docs-run: dry-run: <why> -->`` (its `make`
and `snakemake` commands are planned, ``-n``, not run) or ``<!-- docs-run: skip: <why> -->``
(not run; a test it names must read the page). A block without one must run.

A code block whose first line names a path (``# my-scheduler/pyproject.toml``) is a file the
reader writes: it is written there before the page's next shell block runs. pip installs into a
folder of the test's own (``PIP_TARGET``), as the shared environment is not the test's to change.

Before any page runs (and for the blocks that never run), every `schedlab` and `snakemake`
command and option the pages name, in their blocks and in their prose's code spans, must exist in
the real parsers (a target after `--config` is read as a setting), and every `make` target in the
Makefile.
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

from schedlab.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELLS = {"bash", "sh", "shell", "console"}
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.S | re.M)
MARKER = re.compile(r"^\s*<!--\s*docs-run:\s*(?P<mode>[\w-]+)\s*(?::\s*(?P<reason>.*?))?\s*-->\s*$")
MODES = {"serving": False, "dry-run": True, "skip": True}  # mode: whether it takes a reason
#: A code block that is a file: its first line names the path it is written to.
FILE_LINE = re.compile(r"^# (?P<path>[\w.-]+(?:/[\w.-]+)+)$")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    lang: str
    text: str
    mode: str = "run"
    reason: str = ""

    @property
    def where(self) -> str:
        page = self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page.name
        return f"{page}:{self.line}"

    @property
    def shell(self) -> bool:
        return self.lang in SHELLS

    @property
    def commands(self) -> str:
        """The block's shell: a console block's `$ ` lines (and their continuations), or all of it."""
        if self.lang != "console":
            return self.text
        out, going = [], False
        for line in self.text.splitlines():
            if line.startswith("$ ") or going:
                out.append(line.removeprefix("$ "))
                going = line.endswith("\\")
        return "\n".join(out) + "\n"


def blocks(page: Path) -> list[Block]:
    """The page's fenced code blocks, each with the marker on the line before it."""
    text = page.read_text()
    out = []
    for m in FENCE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        before = text[:max(m.start() - 1, 0)].rsplit("\n", 1)[-1]
        body = "\n".join(row[len(m["indent"]):] for row in m["body"].splitlines()) + "\n"
        marker = MARKER.match(before)
        mode, reason = (marker["mode"], marker["reason"] or "") if marker else ("run", "")
        out.append(Block(page, line, m["lang"], body, mode, reason))
    return out


SHELL_BLOCKS = [b for page in PAGES for b in blocks(page) if b.shell]
NOT_RUN = [b for b in SHELL_BLOCKS if b.mode in ("skip", "dry-run")]


# -- what the pages name -----------------------------------------------------------------------
def _simple_commands(shell: str) -> list[list[str]]:
    """The simple commands of a shell text (words only: operators, redirections and the words of
    `for ...; do`, `done` split off), comments dropped."""
    out, words, redirect = [], [], False
    for token in _tokens(shell):
        if token in {";", "&", "&&", "|", "||", "\n", "(", ")", "do", "then", "else", "done", "fi"}:
            out.append(words)
            words = []
        elif token in {">", ">>", "<", "2>", "&>"}:
            redirect = True
        elif redirect:
            redirect = False
        else:
            words.append(token)
    out.append(words)
    return [w for w in out if w and w[0] not in {"for", "while", "if"}]


def _tokens(shell: str):
    """shlex's words of ``shell``, newlines kept as tokens of their own."""
    for line in shell.replace("\\\n", " ").splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|<>()")
        lexer.whitespace_split = True
        yield from lexer
        yield "\n"


_schedlab_parser = functools.cache(build_parser)


def _schedlab_problem(words: list[str]) -> str | None:
    """What is wrong with a `schedlab ...` command's names (its commands and options; the values
    are the run's to check), or None."""
    parser, path = _schedlab_parser(), ["schedlab"]
    for word in words[1:]:
        if word in ("-h", "--help"):
            return None
        commands = next((a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        if word.startswith("-"):
            if word.split("=", 1)[0] not in parser._option_string_actions:
                return f"`{' '.join(path)}` has no option {word.split('=', 1)[0]}"
        elif commands is not None:
            if word not in commands:
                return f"`{' '.join(path)}` has no command {word}"
            parser = commands[word]
            path.append(word)
    if any(isinstance(a, argparse._SubParsersAction) and a.required for a in parser._actions):
        return f"`{' '.join(path)}` names no command"
    return None


@functools.cache
def _snakemake_options() -> dict:
    from snakemake.cli import get_argument_parser

    return get_argument_parser()._option_string_actions


def _snakemake_problem(words: list[str]) -> str | None:
    """An option Snakemake does not have, or a target read as a `--config` pair (`--config` takes
    every word up to the next option or `--`), or None."""
    options = _snakemake_options()
    for word in words:
        if word.startswith("-") and word != "--" and word.split("=", 1)[0] not in options:
            return f"snakemake has no option {word.split('=', 1)[0]}"
    if "--config" in words:
        after = words[words.index("--config") + 1:]
        pairs = after[:next((i for i, w in enumerate(after) if w.startswith("-")), len(after))]
        if not pairs or any("=" not in w for w in pairs):
            return "--config reads the words after it as key=value pairs: a target goes before it, or after --"
    return None


def _make_targets() -> set[str]:
    return set(re.findall(r"^([A-Za-z0-9_.-]+)\s*:(?!=)", (ROOT / "Makefile").read_text(), re.M))


def _named_commands(page: Path) -> list[tuple[str, list[str]]]:
    """Each `schedlab`, `snakemake` and `make` command a page names: in its shell blocks, and in
    its prose's code spans (`schedlab simulate --policy edf`), with where it is."""
    out = []
    for block in blocks(page):
        if block.shell:
            out += [(block.where, words) for words in _simple_commands(block.commands)]
    prose = FENCE.sub("", page.read_text())
    for span in re.findall(r"`((?:schedlab|snakemake|make) [^`]+)`", prose.replace("\n", " ")):
        if "..." not in span and "<" not in span:
            out += [(f"{page.relative_to(ROOT)} (prose)", words) for words in _simple_commands(span)]
    return out


def test_every_command_option_and_make_target_the_pages_name_exists():
    problems = []
    targets = _make_targets()
    for page in PAGES:
        for where, words in _named_commands(page):
            program = Path(words[0]).name
            if program == "schedlab":
                problem = _schedlab_problem(words)
            elif program == "snakemake":
                problem = _snakemake_problem(words)
            elif program == "make":
                missing = [w for w in words[1:] if not w.startswith("-") and "=" not in w and w not in targets]
                problem = f"the Makefile has no target {', '.join(missing)}" if missing else None
            else:
                continue
            if problem:
                problems.append(f"{where}: {problem}: {' '.join(words)}")
    assert not problems, "\n".join(problems)


def test_the_name_check_finds_a_missing_command_option_or_target():
    assert _schedlab_problem(["schedlab", "simulate", "--trace", "t", "--policy=sjf"]) is None
    assert _schedlab_problem(["schedlab", "fit", "steptime", "--profile", "p"]) is None
    assert "no option --no-such" in _schedlab_problem(["schedlab", "simulate", "--no-such", "1"])
    assert "no command frobnicate" in _schedlab_problem(["schedlab", "frobnicate"])
    assert "`schedlab fit` names no command" in _schedlab_problem(["schedlab", "fit"])
    words = _simple_commands("for b in sim x; do schedlab simulate --backend $b \\\n  --out r.parquet; done # c\n"
                             "schedlab schedulers | grep edf > out.txt && make test-fast")
    assert words == [["schedlab", "simulate", "--backend", "$b", "--out", "r.parquet"],
                     ["schedlab", "schedulers"], ["grep", "edf"], ["make", "test-fast"]]
    assert "test-fast" in _make_targets() and "no-such-target" not in _make_targets()
    assert _snakemake_problem(["snakemake", "--cores", "all", "t.html", "--config", "a=1", "b=2"]) is None
    assert _snakemake_problem(["snakemake", "--config", "a=1", "--", "t.html"]) is None
    assert "a target goes before it" in _snakemake_problem(["snakemake", "--config", "a=1", "t.html"])
    assert "no option --no-such" in _snakemake_problem(["snakemake", "--no-such"])


# -- markers -----------------------------------------------------------------------------------
def test_every_marker_is_a_known_one_just_before_a_shell_block():
    problems = []
    for page in PAGES:
        text = page.read_text()
        marked = {b.line - 1 for b in blocks(page) if b.mode != "run"}
        for i, line in enumerate(text.splitlines(), start=1):
            if line.lstrip().startswith("<!--") and "docs-run" in line:
                m = MARKER.match(line)
                if not m or m["mode"] not in MODES or MODES[m["mode"]] != bool(m["reason"]):
                    problems.append(f"{page.name}:{i}: not a marker (serving, dry-run: <why>, skip: <why>): {line}")
                elif i not in marked:
                    problems.append(f"{page.name}:{i}: a marker not on the line just before a code block")
        problems += [f"{b.where}: a marker on a {b.lang or 'plain'} block" for b in blocks(page)
                     if b.mode != "run" and not b.shell]
        problems += [f"{b.where}: a code block without a language" for b in blocks(page) if not b.lang]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("block", NOT_RUN, ids=[b.where for b in NOT_RUN])
def test_a_block_not_run_says_why(block):
    """Listed (pytest's summary shows each reason); a test it names exists, and reads the page of
    a block it runs in the block's stead."""
    for named in re.findall(r"tests/\w+\.py", block.reason):
        assert (ROOT / named).is_file(), f"{block.where} names {named}, which does not exist"
        assert block.mode != "skip" or block.page.name in (ROOT / named).read_text(), \
            f"{named} does not read {block.page.name}"
    pytest.skip(f"{block.where}: {'planned (-n) only' if block.mode == 'dry-run' else 'not run'}: {block.reason}")


# -- the pages, run ----------------------------------------------------------------------------
def _tracked() -> list[str]:
    done = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT,
                          capture_output=True, text=True, check=True)
    return [p for p in done.stdout.split("\0") if p and (ROOT / p).is_file()]


def _needs_checkout(page_blocks: list[Block], tracked: list[str]) -> bool:
    names = set(tracked) | {str(parent) for p in tracked for parent in Path(p).parents}
    for block in (b for b in page_blocks if b.shell and b.mode != "skip"):
        for words in _simple_commands(block.commands):
            if Path(words[0]).name in ("make", "snakemake") or any(w.removeprefix("./") in names for w in words):
                return True
    return False


def _script(page_blocks: list[Block], folder: Path) -> str:
    """One bash script of the page's blocks in order: a file block written, a dry-run block with
    `make` and `snakemake` as their plans, a skipped block left out; each announced on stderr."""
    parts = ["set -euo pipefail"]
    for block in page_blocks:
        first = block.text.splitlines()[0] if block.text.strip() else ""
        if not block.shell and (m := FILE_LINE.match(first)):
            path = folder / m["path"]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(block.text)
        if not block.shell or block.mode == "skip":
            continue
        parts.append(f"echo {shlex.quote('docs-run: ' + block.where)} \"$EPOCHREALTIME\" >&2")
        if block.mode == "dry-run":
            parts.append("make() { command make -n \"$@\"; }; snakemake() { command snakemake -n \"$@\"; }")
        parts.append(block.commands.rstrip("\n"))
        if block.mode == "dry-run":
            parts.append("unset -f make snakemake")
    parts.append("echo 'docs-run: end' \"$EPOCHREALTIME\" >&2")
    return "\n".join(parts) + "\n"


def _environment(tmp: Path) -> dict[str, str]:
    site = tmp / "site"
    env = {**os.environ, "PIP_TARGET": str(site), "PIP_NO_DEPS": "1", "SCHEDLAB_DATA_CACHE": str(tmp / "cache"),
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
           "PYTHONPATH": os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)}
    if not os.environ.get("SCHEDLAB_DATA_MIRROR"):
        from test_pipeline import _synthetic_mirror

        (tmp / "mirror").mkdir()
        _synthetic_mirror(tmp / "mirror")
        env["SCHEDLAB_DATA_MIRROR"] = str(tmp / "mirror")
    return env


def run_page(page: Path, tmp: Path) -> tuple[Path, subprocess.CompletedProcess]:
    """The page's blocks run in order (see the module's docstring); the folder they ran in."""
    page_blocks = blocks(page)
    folder = tmp / "work"
    tracked = _tracked()
    if _needs_checkout(page_blocks, tracked):
        for path in tracked:
            (folder / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / path, folder / path)
        (folder / ".venv").symlink_to(sys.prefix)
    folder.mkdir(exist_ok=True)
    done = subprocess.run(["bash", "-c", _script(page_blocks, folder)], cwd=folder, env=_environment(tmp),
                          capture_output=True, text=True, timeout=3600)
    times = re.findall(r"^docs-run: (\S+) (\d+[.,]\d+)$", done.stderr, re.M)
    last = times[-1][0] if times else page.name
    print("\n".join(f"{where}: {float(t1.replace(',', '.')) - float(t0.replace(',', '.')):.1f} s"
                    for (where, t0), (_, t1) in zip(times, times[1:])))
    failed = next((b for b in page_blocks if b.where == last), None)
    assert done.returncode == 0, (f"{last} failed (exit {done.returncode}):\n{failed.text if failed else ''}\n"
                                  f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return folder, done


def _phase(page: Path) -> list:
    marks = [pytest.mark.slow]
    if any(b.mode == "serving" for b in blocks(page)):
        marks.append(pytest.mark.serving)
    return marks


RUN_PAGES = [p for p in PAGES if any(b.shell and b.mode != "skip" for b in blocks(p))]


@pytest.mark.parametrize("page", [pytest.param(p, marks=_phase(p), id=p.name) for p in RUN_PAGES])
def test_the_pages_commands_run_in_order(page, tmp_path):
    folder, done = run_page(page, tmp_path)
    CHECKS.get(page.name, lambda folder, done: None)(folder, done)


def test_a_page_runs_in_order_its_files_written_its_plans_not_run_and_fails_naming_its_block(tmp_path):
    """A made-up page: a file block written, a skipped block left out, a dry-run block's `make`
    planned without making its target, and the failing block named with its line."""
    page = tmp_path / "page.md"
    page.write_text("```bash\necho made > made.txt\n```\n\n<!-- docs-run: skip: never -->\n```bash\nexit 3\n```\n\n"
                    "```make\n# plan/Makefile\nout:\n\ttouch out\n```\n\n<!-- docs-run: dry-run: planned -->\n"
                    "```bash\nmake -C plan out\n```\n\n```console\n$ test -s made.txt && test ! -e plan/out\n"
                    "$ echo one \\\n    two\none two\n$ false\n```\n")
    assert [(b.line, b.mode) for b in blocks(page)] == [(1, "run"), (6, "skip"), (10, "run"), (17, "dry-run"), (21, "run")]
    with pytest.raises(AssertionError, match=r"page.md:21 failed \(exit 1\)") as failed:
        run_page(page, tmp_path)
    assert "one two" in str(failed.value) and (tmp_path / "work" / "plan" / "Makefile").is_file()


# -- what some pages promise, checked after their run -------------------------------------------
def _first_scheduler(folder: Path, done: subprocess.CompletedProcess) -> None:
    """Your first scheduler: listed, plotted, on both backends, equal, and ahead of FCFS."""
    assert "shortest-total" in done.stdout and "my-scheduler (my_scheduler)" in done.stdout
    assert (folder / "ttft.png").stat().st_size > 0
    runs = pd.read_parquet(folder / "runs.parquet").set_index(["policy", "backend"])
    assert len(runs) == 6 and (runs["completed"] == 400).all()  # the page's 400 requests, every one served
    ttft = runs["p50_ttft_ms"].unstack("backend")
    assert (ttft["sim"] - ttft["vllm-sim"]).abs().max() < 1e-6  # the same decisions on both
    assert ttft.loc["shortest-total", "sim"] < ttft.loc["fcfs", "sim"]


CHECKS = {"first-scheduler.md": _first_scheduler}


def test_your_first_scheduler_is_under_15_lines_of_shell_and_names_its_files():
    page = blocks(ROOT / "docs" / "first-scheduler.md")
    shell = [b for b in page if b.shell]
    assert len(shell) == 1 and shell[0].mode == "run" and len(shell[0].text.strip().splitlines()) < 15
    files = [FILE_LINE.match(b.text.splitlines()[0])["path"] for b in page if b.lang in ("python", "toml")]
    assert files == ["my-scheduler/my_scheduler.py", "my-scheduler/pyproject.toml"]
