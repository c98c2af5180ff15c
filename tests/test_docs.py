"""The front door: the documentation site builds with `mkdocs build --strict` (a broken link, a
missing anchor or a page left out of the navigation fails it), its command-line reference is
generated from the real parsers, its results page shows what the pipeline wrote; the README
stays short and points at the site; the hand-written prose holds no run's numbers."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from schedlab import figure_map
from schedlab.backends.served import quality as replay_quality
from schedlab.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
HAND_WRITTEN = [README, *sorted((ROOT / "docs").glob("*.md"))]


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


hooks = _load("docs_hooks", ROOT / "docs" / "hooks.py")
results_page = _load("results_page", ROOT / "workflow" / "scripts" / "results_page.py")


def _build(project: Path, site: Path, results: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "SCHEDLAB_RESULTS": str(results), "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                          cwd=project, env=env, capture_output=True, text=True, timeout=300)


def _commands(parser: argparse.ArgumentParser, prefix: str = "schedlab") -> list[str]:
    """Every command path under ``parser`` (``schedlab fit steptime`` ...)."""
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out += [f"{prefix} {name}", *_commands(sub, f"{prefix} {name}")]
    return out


# -- the site --------------------------------------------------------------------------------------
def _synthetic_numbers() -> dict:
    from schedlab.counting import paper_vs_ours

    def rows(*rows):
        table = paper_vs_ours([{"unit": "ms", "group": "g", **r} for r in rows], why={"g": "slow engine"})
        return json.loads(table.to_json(orient="records"))

    fid = {"policy": "fcfs", "rate": 5.0, "fit": "own steps, rate held out", "below_80": True, "repeats": 5}
    for m, (eng, err) in {"p50_e2el_ms": (345.0, -4.25), "p90_e2el_ms": (500.0, 2.0), "throughput_rps": (5.0, 0.5)}.items():
        fid |= {f"{m}_engine": eng, f"{m}_min": 0.9 * eng, f"{m}_max": 1.2 * eng, f"{m}_error_pct": err}
    return {
        "asr_duration": {"paper_vs_ours": rows(
            {"quantity": "FCFS median", "paper": 100.0, "ours": 110.0, "role": "fitted"},
            {"quantity": "SJF median", "paper": 100.0, "ours": 150.0, "role": "predicted", "low": 95.0, "high": 160.0,
             "seeds": 10},
            {"quantity": "SJF median at 1 req/s", "paper": 80.0, "ours": 81.0, "role": "derived", "reason": "no queue"},
            {"quantity": "SJF change", "unit": "% vs FCFS", "paper": -40.0, "ours": -60.0, "role": "predicted",
             "low": -70.0, "high": -50.0, "seeds": 10})},
        "ewsjf": {"paper_vs_ours": rows({"quantity": "FCFS throughput", "unit": "req/s", "paper": 8.45, "ours": 8.45,
                                         "role": "fitted"}),
                  "sharing": {"levels": [{"questions_per_doc": 1, "fcfs_hit_rate": 0.0, "kmeans-5": -3.21, "ewsjf": -2.0},
                                         {"questions_per_doc": 8, "fcfs_hit_rate": 0.052, "kmeans-5": -20.04, "ewsjf": -9.0}],
                              "conclusion": "The cache does not explain Table 3 as a whole."}},
        "calibration": {"sim_vs_vllm_sim_max_error_pct": 0.0, "engine": [fid], "whisper_engine": None},
        "tournament": {"load": 0.9, "best_g": [{"workload": "mooncake", "policy": "sarathi-spf", "g_per_s": 0.01, "fcfs": 0.005}],
                       "best_p99": [{"workload": "mooncake", "policy": "fcfs", "p99_e2el_ms": 9000.0, "fcfs": 9000.0}],
                       "mean_rank": [{"policy": "fcfs", "g_per_s": 2.0, "p99_e2el_ms": 1.5, "p50_e2el_ms": 3.0}],
                       "prefix_cache": [{"workload": "multi-turn", "policy": "sjf-uncached", "hit rate": 0.61,
                                         "P50 TTFT off (s)": 1.5, "P50 TTFT on (s)": 0.25, "capacity off": 2.0,
                                         "capacity on": 2.6}],
                       "cluster": ["azure-conv, 4 replicas at load 0.9: the lowest P99 E2E latency is least-tokens."]},
        "asr_extensions": {"vad_sjf_change_pct": [{"scenario": "padded", "rate": 22, "change_pct": -4.93}],
                           "switching": [{"policy": "adaptive", "p50_e2el_ms": 1152.0, "p99_e2el_ms": 13967.0}]},
    }


def _synthetic_results(tmp_path: Path) -> Path:
    """A results folder whose page the results rule wrote from :func:`_synthetic_numbers`."""
    results = tmp_path / "results"
    (results / "notebooks").mkdir(parents=True)
    files = []
    for name, numbers in _synthetic_numbers().items():
        files.append(results / "notebooks" / f"{name}.numbers.json")
        files[-1].write_text(json.dumps(numbers))
    results_page.write([str(f) for f in files], results / "results.md", results / "results.json",
                       results=str(results), backend="sim", workdir=tmp_path)
    return results


@pytest.mark.slow
def test_the_site_builds_strictly_with_its_generated_parts(tmp_path):
    """The real build, before a run: every page, the command-line reference walked from the
    parsers, the figure map, the acceptance rules' thresholds, and a results page that says how
    to make it."""
    done = _build(ROOT, tmp_path / "site", tmp_path / "no-results")
    assert done.returncode == 0, done.stderr[-4000:]
    site = tmp_path / "site"
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text().replace("!!python", "#"))["nav"]
    pages = {p for entry in nav for p in entry.values()}
    assert pages == {p.name for p in (ROOT / "docs").glob("*.md")}
    cli = (site / "cli" / "index.html").read_text()
    commands = _commands(build_parser())
    assert len(commands) > 40 and "schedlab fit steptime" in commands
    for command in commands:
        assert f"<code>{command}</code>" in cli, command
    assert "--max-num-batched-tokens" in cli
    mapped = (site / "pipeline" / "index.html").read_text()
    assert all(f"<code>{f.name}</code>" in mapped for f in figure_map.figures(ROOT / "workflow" / "report" / "figure_map.yaml"))
    fidelity = (site / "fidelity" / "index.html").read_text()
    assert f"<code>CLIENT_LAG_MS</code> = {replay_quality.CLIENT_LAG_MS:g} ms" in fidelity
    assert f"<code>INTERFERENCE</code> = {replay_quality.INTERFERENCE:.0%}" in fidelity
    results = (site / "results" / "index.html").read_text()
    assert results.count("Not made yet") == len(results_page.SECTIONS)


@pytest.mark.slow
def test_the_results_page_shows_what_the_pipeline_wrote(tmp_path):
    """The results rule's page from notebooks' numbers, then the site built over it: each
    section shows its numbers under the heading the README links to."""
    results = _synthetic_results(tmp_path)
    md = (results / "results.md").read_text()
    assert [h for h in re.findall(r"^## (.+)$", md, re.M)] == list(results_page.SECTIONS)
    assert ("| A | Duration-aware scheduling for ASR serving | `asr_duration` | 0 of 1 | 1 of 1 | 0 of 1 |  | 1 of 1 | 1 |  |"
            in md)  # one column per role and kind
    assert "| SJF median | ms | 100.00 | 150.00 | 95.00 to 160.00 (10 seeds) | +50.0 % | predicted | no | yes | no | slow engine |" in md
    assert "| C | Sarathi-Serve, RAD and SLAI | `slai` | not compared in this run |" in md
    assert "| fcfs | 5 | 5 | -4.2 | 345 [310-414], 30 % |" in md  # the error beside the repeats' spread
    assert "Snakemake kept no record of this run's jobs." in md
    assert "- azure-conv, 4 replicas at load 0.9: the lowest P99 E2E latency is least-tokens." in md
    assert "The slai notebook wrote no routing study in this run." in md
    assert "| 8 | 5.2 | -20.0 | -9.0 |" in md and "| multi-turn | `sjf-uncached` | 61.0 | 1.50 | 0.25 | 2.00 / 2.60 |" in md
    assert json.loads((results / "results.json").read_text())["notebooks"]["ewsjf"]["paper_vs_ours"][0]["ours"] == 8.45
    done = _build(ROOT, tmp_path / "site", results)
    assert done.returncode == 0, done.stderr[-4000:]
    page = (tmp_path / "site" / "results" / "index.html").read_text()
    assert "Not made yet" not in page and "345 [310-414], 30 %" in page and "sarathi-spf" in page
    for section in results_page.SECTIONS:
        assert f">{section.replace(chr(39), '&#39;')}<" in page or f">{section}<" in page, section


def test_the_results_page_adds_up_the_jobs_snakemake_recorded(tmp_path):
    """One record per output file: a job's outputs share its rule and hash, so they count once."""
    import base64

    meta = tmp_path / ".snakemake" / "metadata"
    meta.mkdir(parents=True)
    records = [("results/a.parquet", "sim", 1, 100.0, 130.0), ("results/b.parquet", "sim", 1, 100.5, 130.0),
               ("results/c.json", "notebook", 2, 140.0, 200.0), ("elsewhere/d.json", "sim", 3, 0.0, 999.0)]
    for path, rule, job, start, end in records:
        name = base64.urlsafe_b64encode(path.encode()).decode()
        (meta / name).write_text(json.dumps({"rule": rule, "job_hash": job, "starttime": start, "endtime": end}))
    t = results_page.timings(results_page.job_times(tmp_path, "results"))
    assert t["jobs"] == 2 and t["span_s"] == 100.0 and t["job_s"] == 90.0
    assert [r["rule"] for r in t["rules"]] == ["notebook", "sim"]


@pytest.mark.slow
def test_a_page_left_out_of_the_navigation_or_a_broken_link_fails_the_build(tmp_path):
    """The site copied as it is builds; with a page outside the navigation, a link to no page or
    a link to no heading, it does not."""
    for name, change, said in (
        ("as-is", lambda d: None, None),
        ("orphan", lambda d: (d / "orphan.md").write_text("# Orphan\n"), "orphan.md"),
        ("link", lambda d: (d / "index.md").write_text((d / "index.md").read_text() + "\n[gone](no-such-page.md)\n"),
         "no-such-page.md"),
        ("anchor", lambda d: (d / "index.md").write_text((d / "index.md").read_text()
                                                          + "\n[gone](results.md#no-such-section)\n"), "no-such-section"),
    ):
        project = tmp_path / name
        for item in ("docs", "mkdocs.yml", "pyproject.toml", "workflow/report"):
            (project / item).parent.mkdir(parents=True, exist_ok=True)
            (shutil.copytree if (ROOT / item).is_dir() else shutil.copy)(ROOT / item, project / item)
        change(project / "docs")
        done = _build(project, project / "site", tmp_path / "no-results")
        if said is None:
            assert done.returncode == 0, done.stderr[-3000:]
        else:
            assert done.returncode != 0 and said in done.stderr, (name, done.stderr[-3000:])


# -- the README ------------------------------------------------------------------------------------
def _readme() -> list[str]:
    return README.read_text().splitlines()


def test_the_readme_is_short_and_starts_with_a_command():
    lines = _readme()
    assert len(lines) <= 200
    first = next(i for i, line in enumerate(lines) if line.startswith("```bash"))
    assert first + 1 < 40 and lines[first + 1].startswith("make ")


def test_the_readme_names_each_paper_package_and_notebook_that_exist():
    rows = [line for line in _readme() if re.match(r"\| [ABCD] \| ", line)]
    assert len(rows) == 4
    for row in rows:
        package = re.search(r"`(src/schedlab/\w+)`", row).group(1)
        notebook = re.search(r"\((notebooks/\w+\.py)\)", row).group(1)
        assert (ROOT / package / "__init__.py").exists() and (ROOT / notebook).exists(), row


def _glance_rows() -> list[str]:
    text = README.read_text()
    table = text.split("## Results at a glance", 1)[1].split("\n## ", 1)[0]
    return [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| finding")]


def test_the_readmes_results_rows_link_a_mapped_figure_and_the_results_page_and_hold_no_number():
    """At most ten rows; each links figures of the figure map and a section of the results page
    that exists; its numbers are only there (a number on a row would go stale with the next run)."""
    rows = _glance_rows()
    assert 1 <= len(rows) <= 10
    mapped = {f"results/figures/{f.notebook}/{f.name}.png" for f in figure_map.figures(ROOT / "workflow" / "report" / "figure_map.yaml")}
    headings = {hooks_slug(h) for h in re.findall(r"^## (.+)$", (ROOT / "docs" / "results.md").read_text(), re.M)}
    for row in rows:
        links = re.findall(r"\]\(([^)]+)\)", row)
        figures = [link for link in links if link.startswith("results/figures/")]
        assert figures and set(figures) <= mapped, row
        anchors = [link.split("#", 1)[1] for link in links if link.startswith("docs/results.md#")]
        assert anchors and set(anchors) <= headings, row
        words = re.sub(r"\[[^\]]*\]\([^)]*\)", "", row)
        assert not re.search(r"\d[\d.,]*\s*(%|ms|µs|s\b|x\b|req/s|points)|\d+ of \d+", words), row


def hooks_slug(heading: str) -> str:
    """The anchor Markdown gives a heading (MkDocs' and GitHub's alike for these)."""
    return re.sub(r"[\s]+", "-", re.sub(r"[^\w\s-]", "", heading).strip().lower())


def test_every_relative_link_of_the_readme_exists():
    for link in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text()):
        if not link.startswith(("http", "results/")):
            assert (ROOT / link).exists(), link


def test_hand_written_prose_holds_no_run_numbers_commit_hashes_or_past_timings():
    for path in HAND_WRITTEN:
        text = path.read_text()
        assert not re.search(r"\brun \d+|\bruns \d+", text, re.I), path
        assert not re.search(r"\d+ min \d+ s\b", text), path
        assert not re.search(r"`[0-9a-f]{7,40}`", text), path


# -- citation and licence ---------------------------------------------------------------------------
def test_the_citation_file_cites_schedlab_and_the_four_papers_of_the_readme():
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["type"] == "software" and cff["authors"]
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert cff["license"] == project["license"]["text"] == "Apache-2.0" and cff["version"] == project["version"]
    titles = [re.match(r"\| [ABCD] \| ([^|]+) \|", line).group(1).strip() for line in _readme() if re.match(r"\| [ABCD] \| ", line)]
    assert [r["title"] for r in cff["references"]] == titles
    assert all(r["authors"] for r in cff["references"])


def test_the_licence_is_apaches():
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License\n                           Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text


def test_a_notebook_writes_its_numbers_beside_its_manifest(tmp_path):
    """``write_numbers`` from the manifest's path or from ``read_manifest``'s dict: tables as
    records with their index as columns, numpy numbers as numbers, NaN as null."""
    import numpy as np
    import pandas as pd

    from schedlab.render import read_manifest, write_manifest, write_numbers

    manifest = tmp_path / "notebooks" / "slai.inputs.json"
    manifest.parent.mkdir()
    write_manifest(manifest, {"pool": str(tmp_path / "pool.parquet")}, backend="sim")
    table = pd.DataFrame({"ours": [1.5, np.nan]}, index=pd.Index(["a", "b"], name="quantity"))
    for given in (str(manifest), read_manifest(manifest)):
        path = write_numbers(given, vs=table, worst=np.float64(0.25), rows=pd.Series([1, 2], name="n"))
        assert path == tmp_path / "notebooks" / "slai.numbers.json"
        assert json.loads(path.read_text()) == {"vs": [{"quantity": "a", "ours": 1.5}, {"quantity": "b", "ours": None}],
                                                "worst": 0.25, "rows": [{"n": 1}, {"n": 2}]}


def test_a_run_is_appended_to_the_history_and_the_docs_show_the_spread(tmp_path):
    """`make record-run`: one row per run from results.json (the counts, sim's largest error up to
    80 % beside the engine's repeat span); the docs give each number's median and range."""
    record_run = _load("record_run", ROOT / "workflow" / "scripts" / "record_run.py")
    header = (ROOT / "docs" / "runs.csv").read_text().splitlines()[0]
    assert header == ",".join(record_run.COLUMNS)  # the shipped history starts from the same columns
    results = _synthetic_results(tmp_path)
    history = tmp_path / "runs.csv"
    first = record_run.append(results / "results.json", history)
    assert (first["A_predicted"], first["A_predicted_within"], first["A_predicted_in_band"], first["A_changes"],
            first["A_changes_in_band"], first["C_predicted"]) == (1, 0, 1, 1, 0, "")
    assert (first["p50_e2el_error_pct"], first["engine_repeat_span_pct"]) == (4.25, 30.0)
    record_run.append(results / "results.json", history)
    assert len(history.read_text().splitlines()) == 3
    shown = hooks.runs_markdown(history)
    assert shown.startswith("2 runs recorded.") and "| `p50_e2el_error_pct` | 2 | 4.25 | 4.25 | 4.25 |" in shown
    history.write_text(header + "\n")
    assert "No run recorded yet" in hooks.runs_markdown(history)


@pytest.mark.slow
def test_the_results_page_script_runs_under_snakemakes_script_directive(tmp_path):
    """The script as the `results_page` rule runs it (Snakemake puts its preamble first), in a
    throwaway workflow whose jobs write the notebooks' numbers: their times are on the page."""
    staged = tmp_path / "staged"
    staged.mkdir()
    for name, numbers in _synthetic_numbers().items():
        (staged / f"{name}.json").write_text(json.dumps(numbers))
    script = ROOT / "workflow" / "scripts" / "results_page.py"
    (tmp_path / "Snakefile").write_text(
        "rule results_page:\n"
        "    input: numbers=expand('results/notebooks/{n}.numbers.json', n=%r)\n"
        "    output: md='results/results.md', json='results/results.json'\n"
        "    log: 'results/logs/results_page.log'\n"
        "    params: backend='sim'\n"
        "    script: %r\n\n"
        "rule numbers:\n"
        "    input: 'staged/{n}.json'\n"
        "    output: 'results/notebooks/{n}.numbers.json'\n"
        "    shell: 'cp {input} {output}'\n" % (sorted(_synthetic_numbers()), str(script)))
    done = subprocess.run([str(Path(sys.executable).parent / "snakemake"), "--cores", "1", "--quiet"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    page = (tmp_path / "results" / "results.md").read_text()
    assert "| A | Duration-aware scheduling for ASR serving | `asr_duration` | 0 of 1 | 1 of 1 | 0 of 1 |" in page
    assert f"{len(_synthetic_numbers())} jobs from the first job's start" in page and "| `numbers` |" in page
