"""The figure map (workflow/report/figure_map.yaml) against what the notebooks save and the rules
the pipeline has: every mapped figure is saved by its notebook, every saved figure is mapped,
and every rule it names exists."""

from __future__ import annotations

import ast
import fnmatch
import re
import subprocess
from pathlib import Path

import pytest

from schedlab import figure_map
from schedlab.errors import SchedlabError

ROOT = Path(__file__).resolve().parents[1]
MAP = ROOT / "workflow" / "report" / "figure_map.yaml"


def _is_save(node) -> bool:
    return isinstance(node, ast.Call) and getattr(node.func, "id", None) == "save_figure" and len(node.args) == 3


def saved_names(notebook: Path) -> set[str]:
    """The figure names a notebook saves: the third argument of each ``save_figure`` call when it
    is a literal; an f-string as a pattern (``f"torch_profile_{key[2]}"`` -> ``torch_profile_*``);
    a helper's parameter (``save_figure(fig, figures_dir, name)`` inside ``def by_rate(..., name)``)
    as the literals its calls pass there, directly or from the loop around the call."""
    tree = ast.parse(notebook.read_text())
    names, helpers = set(), {}
    for node in ast.walk(tree):
        if not _is_save(node):
            continue
        arg = node.args[2]
        if isinstance(arg, ast.Constant):
            names.add(arg.value)
        elif isinstance(arg, ast.JoinedStr):
            names.add("".join(v.value if isinstance(v, ast.Constant) else "*" for v in arg.values))
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef):
            params = [a.arg for a in fn.args.args]
            for node in ast.walk(fn):
                if _is_save(node) and isinstance(node.args[2], ast.Name) and node.args[2].id in params:
                    helpers[fn.name] = (params.index(node.args[2].id), node.args[2].id)
    loops = [n for n in ast.walk(tree) if isinstance(n, ast.For)]
    for call in ast.walk(tree):
        if not (isinstance(call, ast.Call) and getattr(call.func, "id", None) in helpers):
            continue
        index, param = helpers[call.func.id]
        given = next((k.value for k in call.keywords if k.arg == param), call.args[index] if index < len(call.args) else None)
        if isinstance(given, ast.Constant) and given.value is not None:  # None: the helper saves no figure
            names.add(given.value)
        elif isinstance(given, ast.Name):
            for loop in loops:
                if call in ast.walk(loop) and given.id in {n.id for n in ast.walk(loop.target) if isinstance(n, ast.Name)}:
                    names |= {n.value for n in ast.walk(loop.iter) if isinstance(n, ast.Constant)
                              and isinstance(n.value, str) and re.fullmatch(r"[a-z0-9_]+", n.value)}
    return names


MAPPED = figure_map.figures(MAP)


def test_the_map_covers_every_notebook():
    assert {f.notebook for f in MAPPED} == {p.stem for p in (ROOT / "notebooks").glob("*.py")}


def _pattern(fig: figure_map.Figure) -> str:
    return re.sub(r"\{[^}]*\}", "*", fig.name)


@pytest.mark.parametrize("fig", MAPPED, ids=lambda f: f"{f.notebook}/{f.name}")
def test_every_mapped_figure_is_saved_by_its_notebook(fig):
    saved = saved_names(ROOT / "notebooks" / f"{fig.notebook}.py")
    assert _pattern(fig) in saved, f"notebooks/{fig.notebook}.py saves no figure {fig.name!r}: {sorted(saved)}"


@pytest.mark.parametrize("notebook", sorted(p.stem for p in (ROOT / "notebooks").glob("*.py")))
def test_every_saved_figure_is_mapped(notebook):
    saved = saved_names(ROOT / "notebooks" / f"{notebook}.py")
    assert saved, f"no figure found in {notebook}.py"
    unmapped = saved - {_pattern(f) for f in MAPPED if f.notebook == notebook}
    assert not unmapped, f"notebooks/{notebook}.py saves figures the map lacks: {sorted(unmapped)}"


@pytest.mark.slow
def test_every_rule_the_map_names_exists():
    done = subprocess.run(["snakemake", "--list-rules"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    rules = set(done.stdout.split())
    assert "notebook" in rules
    missing = {r for f in MAPPED for r in f.rules if not fnmatch.filter(rules, r)}
    assert not missing, f"the figure map names rules the pipeline lacks: {sorted(missing)}"


def test_a_figure_is_matched_by_name_and_labelled_by_the_paper_figure():
    fig = next(f for f in MAPPED if f.name == "fig03_librispeech_e2el")
    assert fig.label == "A Fig. 3 LibriSpeech P50/P90 E2EL"
    assert figure_map.label(MAPPED, "asr_duration", "fig03_librispeech_e2el") == fig.label
    assert figure_map.label(MAPPED, "slosa", "fig03_librispeech_e2el") == ""
    torch = next(f for f in MAPPED if f.name == "torch_profile_{model}")
    assert torch.matches("torch_profile_whisper-tiny") and not torch.matches("torch_profile_")
    assert figure_map.label(MAPPED, "calibration", "torch_profile_whisper-tiny") == torch.label


def test_a_figure_without_a_caption_is_refused(tmp_path):
    bad = tmp_path / "map.yaml"
    bad.write_text("slai:\n  figures:\n    capacity: {reproduces: C Fig. 1}\n")
    with pytest.raises(SchedlabError, match="slai/capacity has no caption"):
        figure_map.load(bad)


def test_the_pipeline_reads_nothing_from_the_readme():
    for smk in [ROOT / "Snakefile", *(ROOT / "workflow").rglob("*.smk"), *(ROOT / "workflow").rglob("*.py")]:
        assert "README" not in smk.read_text(), smk
