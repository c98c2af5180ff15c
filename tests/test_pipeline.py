"""A tiny end-to-end Snakemake run: data -> profile (roofline, real vLLM engine) -> fit ->
calibrate -> runs on sim, vllm-sim, vllm and transformers' engine -> paper D's, paper B's and
paper C's studies -> the tournament and paper A's extensions -> papermill renders."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import jupytext
import numpy as np
import pandas as pd
import pytest
import yaml
from nbclient import NotebookClient

from schedlab import figure_map
from schedlab.fit.latency_predictor import fit_predictor
from schedlab.latency.predictor_profile import PREDICTOR_PROFILE_COLUMNS
from schedlab.slai.report import backend_differences

REPO = Path(__file__).resolve().parents[1]
FIGURES = [
    "fig01_toy", "fig02_kappa_scatter", "fig03_librispeech_e2el", "fig04_librispeech_e2el_pct",
    "fig05_uniform_e2el", "fig06_uniform_e2el_pct", "fig07_throughput", "fig08_librispeech_ttft",
    "fig09_librispeech_ttft_pct", "fig10_uniform_ttft", "fig11_uniform_ttft_pct", "fig12_burst",
    "fig13_medium_e2el", "front_end_cost",
]
EWSJF_FIGURES = [
    "workload_lengths", "table3_queue_count", "fig3_throughput_vs_rate", "fig4_variants",
    "fig2_fig5_tuning", "fig6_starvation", "fig7_short_ttft", "sharing_curve",
]
SLAI_FIGURES = [
    "engine_calibration", "fig6_parameters", "fig7_p5", "fig7_vllm_sim", "fig11_p50", "fig8_kv_memory", "fig9_ttft_buckets",
    "fig10_priority", "capacity", "throughput_optimality", "queue_around_capacity", "routing_capacity",
]
EXTENSION_FIGURES = ["vad_e2el", "kappa_estimate_quality", "kappa_who_gains", "switching_timeline"]
TOURNAMENT_FIGURES = ["pareto", "cluster_pareto", "slo_g_heatmap", "attainment_vs_load", "mean_rank", "prefix_cache"]
SLO_SA_FIGURES = [
    "predictor_fit", "fig7_g_attainment_latency", "fig7_served", "fig8_temperature_iterations",
    "fig9_length_error", "fig10_coefficient_perturbation", "fig11_multi_instance",
]


def _synthetic_mirror(folder: Path, n: int = 300) -> None:
    """A LibriSpeech-shaped table: lognormal durations, ~2.6 words per second of speech."""
    rng = np.random.default_rng(7)
    words = ["the", "river", "ran", "quietly", "past", "old", "mills", "and", "houses", "at", "night"]
    durations = np.clip(rng.lognormal(1.8, 0.6, n), 1.3, 35.0).round(4)
    rows = [
        (f"{i // 100}-{i % 100}-{i:04d}", d, " ".join(rng.choice(words, max(1, int(d * 2.6)))).upper())
        for i, d in enumerate(durations)
    ]
    pd.DataFrame(rows, columns=["utterance_id", "duration_s", "transcript"]).to_csv(
        folder / "librispeech_test_clean.tsv", sep="\t", index=False
    )
    # Azure-trace-shaped code lengths (paper D's offline stand-in for its code requests).
    stamps = lambda: (pd.Timestamp("2023-11-16 18:17:03") + pd.to_timedelta(np.cumsum(rng.exponential(0.4, n)), unit="s")).astype(str)
    pd.DataFrame({
        "TIMESTAMP": stamps(),
        "ContextTokens": rng.integers(50, 1800, n),
        "GeneratedTokens": rng.integers(5, 150, n),
    }).to_csv(folder / "AzureLLMInferenceTrace_code.csv", index=False)
    # Paper B's short (Azure conversation) and long (Mooncake) prompt sources.
    pd.DataFrame({
        "TIMESTAMP": stamps(),
        "ContextTokens": rng.integers(20, 1200, n),
        "GeneratedTokens": rng.integers(5, 300, n),
    }).to_csv(folder / "AzureLLMInferenceTrace_conv.csv", index=False)
    inputs = rng.integers(900, 6000, n)
    # chained block hashes as the release records them: one shared first block, then each
    # request's own (a new id for every other block)
    firsts = np.cumsum(-(-inputs // 512) - 1)
    hash_ids = [[0, *range(1 + f - (b - 1), 1 + f)] for f, b in zip(firsts, -(-inputs // 512))]
    pd.DataFrame({
        "timestamp": np.cumsum(rng.integers(0, 900, n)), "input_length": inputs, "output_length": rng.integers(5, 600, n),
        "hash_ids": hash_ids,
    }).to_json(folder / "mooncake_conversation_trace.jsonl", orient="records", lines=True)
    # openchat-shaped (prompt, decode) lengths for paper C.
    prompt = np.clip(rng.lognormal(7.4, 0.9, n), 10, 7000).astype(int)
    decode = rng.integers(20, 900, n)
    pd.DataFrame({"num_prefill_tokens": prompt, "num_decode_tokens": decode, "num_total_tokens": prompt + decode,
                  "pd_ratio": prompt / decode}).to_csv(folder / "openchat_sharegpt4_lengths_llama2.csv", index=False)


def _run_until_a_notebook_renders(command, results: Path, **kw) -> None:
    """Start ``command`` and SIGKILL it (and every process it started) once a notebook render
    has begun (papermill writes its output notebook under a temporary name: it exists)."""
    proc = subprocess.Popen(command, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kw)
    try:
        deadline = time.monotonic() + 2400
        while proc.poll() is None and time.monotonic() < deadline:
            if list((results / "notebooks").glob(".*.ipynb.*.tmp.ipynb")):
                break
            time.sleep(0.1)
        assert proc.poll() is None, "the run ended before a notebook render could be interrupted"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def workflow_copy(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """The workflow copied to ``tmp_path/work`` (no results), and an environment that reads a
    synthetic data mirror and finds this interpreter's commands first."""
    work = tmp_path / "work"
    work.mkdir()
    for item in ("Snakefile", "config.yaml", ".test", "workflow", "notebooks", "envs", "profiles"):
        src = REPO / item
        if src.is_dir():
            shutil.copytree(src, work / item, ignore=shutil.ignore_patterns("results", ".snakemake"))
        else:
            shutil.copy(src, work / item)
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    _synthetic_mirror(mirror)
    env = {
        **os.environ,
        "SCHEDLAB_DATA_MIRROR": str(mirror),
        "SCHEDLAB_DATA_CACHE": str(tmp_path / "cache"),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    return work, env


@pytest.mark.slow
def test_snakemake_pipeline_renders_notebooks(tmp_path):
    """The whole tiny pipeline (.test/config.yaml), killed (SIGKILL of its process group) during
    its first notebook render, resumed by the same plain command, with no `snakemake --unlock`:
    the dead run's lock is released (no other Snakemake works in the folder), the default
    profile's rerun-incomplete redoes the interrupted job, and no temporary is left behind."""
    work, env = workflow_copy(tmp_path)
    results = work / yaml.safe_load((REPO / ".test" / "config.yaml").read_text())["results"]
    command = ["snakemake", "--cores", "2", "--configfile", ".test/config.yaml", "--quiet", "rules"]
    _run_until_a_notebook_renders(command, results, cwd=work, env=env)
    assert list((work / ".snakemake" / "incomplete").rglob("*")), "the kill left no job marked incomplete"
    assert list((work / ".snakemake" / "locks").iterdir()), "the kill left no lock"
    proc = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, timeout=2400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Released the lock of a Snakemake run that is no longer running" in proc.stderr

    for name in ("asr_duration", "calibration", "slosa", "ewsjf", "slai", "tournament", "asr_extensions"):
        nb = json.loads((results / "notebooks" / f"{name}.ipynb").read_text())
        errors = [o for c in nb["cells"] for o in c.get("outputs", []) if o.get("output_type") == "error"]
        assert not errors
        assert (results / "notebooks" / f"{name}.html").stat().st_size > 10_000
    # A run job's log says where its time went: one line per scheduler run (schedlab.progress's
    # "lines", which the pipeline sets for its jobs).
    fcfs_log = (results / "logs" / "runs" / "sim" / "librispeech" / "fcfs" / "seed0.log").read_text()
    assert re.search(r"^schedlab: fcfs on sim, librispeech at [\d.]+ req/s: (\d+) of \1 requests in ", fcfs_log, re.M), fcfs_log
    # The results page: every notebook's numbers, sim beside the served engine, the run's job times.
    page = (results / "results.md").read_text()
    for section in ("## Paper vs ours", "## Fidelity", "## The prefix cache", "## Tournament", "## Paper A's future work", "## Timings"):
        assert section in page
    numbers = json.loads((results / "results.json").read_text())["notebooks"]
    assert set(numbers) == {"asr_duration", "calibration", "slosa", "ewsjf", "slai", "tournament", "asr_extensions"}
    assert all(numbers[n]["paper_vs_ours"] for n in ("asr_duration", "ewsjf", "slai", "slosa"))
    # one row per (fit, policy, rate) with a clean replay (none where every replay was flawed)
    assert {r["fit"] for r in numbers["calibration"]["engine"]} <= {"profile", "own steps, rate held out"}
    assert "jobs from the first job's start to the last one's end" in page
    for fig in FIGURES:
        for ext in ("png", "pdf"):
            assert (results / "figures" / "asr_duration" / f"{fig}.{ext}").stat().st_size > 0
    # transformers' engine on the CPU beside sim (the tiny config turns the option on)
    from test_transformers_backend import check_the_pipelines_transformers_study

    check_the_pipelines_transformers_study(results, yaml.safe_load((REPO / ".test" / "config.yaml").read_text()))

    for fig in SLO_SA_FIGURES:
        assert (results / "figures" / "slosa" / f"{fig}.png").stat().st_size > 0
    for fig in EWSJF_FIGURES:
        assert (results / "figures" / "ewsjf" / f"{fig}.png").stat().st_size > 0
    queues = pd.read_parquet(results / "ewsjf" / "study" / "queues-mixed.parquet")
    # one row per method on each of the tiny config's trace seeds, methods in the study's order
    assert sorted(queues["seed"].unique()) == [0, 1]
    for _, by_seed in queues.groupby("seed"):
        assert by_seed["method"].tolist() == ["fcfs", "kmeans-5", "kmeans-10", "kmeans-30", "ewsjf"]
    assert (queues["completed"] == 400).all()
    sharing = pd.read_parquet(results / "ewsjf" / "study" / "sharing.parquet")
    assert sorted(set(sharing["questions_per_doc"])) == [1, 4] and (sharing["completed"] == 400).all()
    assert sharing.loc[sharing["questions_per_doc"] == 1, "cached_tokens"].eq(0).all()
    assert len(pd.read_parquet(results / "ewsjf" / "study" / "tuning.parquet")) == 4
    for fig in SLAI_FIGURES:
        assert (results / "figures" / "slai" / f"{fig}.png").stat().st_size > 0
    slai = pd.concat([pd.read_parquet(p) for p in (results / "slai" / "sweep").glob("p*/*/summary.parquet")])
    assert len(slai) == 2 * 4 * 2  # shares x schedulers x rates
    assert (slai["completed"] == slai["arrived"]).all()
    fid = pd.concat([pd.read_parquet(p) for p in (results / "slai" / "fidelity").glob("*/*/summary.parquet")])
    diffs = backend_differences(fid)
    assert len(diffs) == 3 * 2 and diffs["diff_pct"].abs().max() < 1.0  # vLLM's scheduler: Fig. 7 within 1%
    compare = pd.read_parquet(results / "slosa" / "study" / "compare.parquet")
    assert set(compare["method"]) == {"fcfs", "sa", "sa-no-early-exit", "exhaustive"}
    assert len(compare) == 4 * 2 * 2  # methods x N x max batch, one seed
    # Paper D's `vllm` predictor source (rule slosa_profile_vllm, three repeats): every (batch,
    # length) point is prefilled in one engine step, then decoded together for four steps.
    prof = pd.read_parquet(results / "slosa" / "profile" / "vllm.parquet")
    assert tuple(prof.columns) == PREDICTOR_PROFILE_COLUMNS and set(prof["source"]) == {"vllm"}
    assert (prof["time_s"] > 0).all()
    prefill, decode = prof[prof["phase"] == "prefill"], prof[prof["phase"] == "decode"]
    points = {(b, n) for b in (1, 2, 4, 8) for n in (64, 128, 256, 512)}
    assert prefill.groupby(["batch", "length"]).size().to_dict() == dict.fromkeys(points, 3)  # one step a repeat
    per_point = decode.assign(base=decode["length"] - decode["length"] % 64).groupby(["batch", "base"]).size()
    assert per_point.to_dict() == dict.fromkeys(points, 4 * 3)  # four decode steps a repeat
    assert (decode["length"] % 64).between(1, 4).all()  # context: the prompt plus tokens so far
    assert np.isfinite(fit_predictor(prof).coefficients_ms()["ms"]).all()

    for fig in TOURNAMENT_FIGURES:
        assert (results / "figures" / "tournament" / f"{fig}.png").stat().st_size > 0
    for fig in EXTENSION_FIGURES:
        assert (results / "figures" / "asr_extensions" / f"{fig}.png").stat().st_size > 0
    vad = pd.read_parquet(results / "extensions" / "vad" / "runs.parquet")
    assert len(vad) == 2 * 2 * 3 * 2  # scenarios x estimates x policies x rates
    kappa = pd.read_parquet(results / "extensions" / "kappa" / "runs.parquet")
    assert set(kappa["source"]) == {"stand-in"}  # no FLEURS in the mirror
    switching = pd.read_parquet(results / "extensions" / "switching" / "summary.parquet")
    assert (switching["completed"] == switching["completed"].iloc[0]).all()
    table = pd.read_parquet(results / "tournament" / "table.parquet")
    per_workload = table.groupby("workload")["policy"].nunique()
    assert per_workload[["librispeech", "uniform"]].eq(4).all()  # paper A's policies only on ASR
    assert per_workload.drop(["librispeech", "uniform"]).eq(15).all()
    cached = table[table["workload"].str.endswith("-cache")]
    assert cached["prefix_cache_hit_rate"].gt(0).all() and table.loc[~table.index.isin(cached.index), "cached_tokens"].eq(0).all()
    assert (table.groupby(["workload", "load"])["pareto"].sum() >= 1).all()
    assert (table["completed"] == table["arrived"]).all()
    cluster = pd.read_parquet(results / "tournament" / "cluster_table.parquet")
    assert len(cluster) == 1 * 1 * 1 * 2 * 2  # workloads x replica counts x loads x routers x entrants
    assert (cluster["completed"] == cluster["arrived"]).all() and (cluster["replicas"] == 2).all()
    routing = pd.read_parquet(results / "slai" / "study" / "routing.parquet")
    assert len(routing) == 2 * 2 * 2 * 2  # schedulers x replica counts x loads x routers

    summary = pd.read_parquet(results / "summary" / "asr_sim.parquet")
    assert set(summary["policy"]) == {"fcfs", "sjf", "hrrn"}
    # policies x the experiments' rates (librispeech 2, uniform 2, burst 1, medium 2) x asr.seeds
    assert len(summary) == 3 * (2 + 2 + 1 + 2) * len(yaml.safe_load((REPO / ".test" / "config.yaml").read_text())["asr"]["seeds"])
    assert (summary["completed"] == summary["arrived"]).all()
    fidelity = pd.read_parquet(results / "summary" / "fidelity.parquet")
    assert set(fidelity["backend"]) == {"sim", "vllm-sim", "vllm"}
    # beside the engine, both simulators with the profile's fit and with held-out fits of its own steps
    fits = fidelity[fidelity["backend"] != "vllm"].groupby("steptime_fit")["rate"].nunique()
    assert fits.to_dict() == {"profile": 2, "own steps, rate held out": 2}
    for policy in set(fidelity.loc[fidelity["backend"] == "vllm", "policy"]):  # one fit per server, of its own steps
        held = json.loads((results / "fit" / "steptime" / "served" / "fidelity-engine" / policy / "seed0" /
                           "without_rate5.json").read_text())["meta"]
        assert held["held_out_rate"] == 5.0 and held["rates"] == [10.0] and held["servers"] == [[policy, 0]]
    cal = json.loads((results / "fit" / "calibration" / "A100-40GB.json").read_text())["meta"]["calibration"]
    # 150 requests per rate make a weak fit: check its record, not its accuracy.
    assert len(cal["residuals"]) == 18 and set(cal["uncertainty"]) == {"compute", "memory", "frontend_s"}
    assert {r["rate"] for r in cal["implied_saturation"]} <= {20.0, 25.0}  # what each overloaded row alone implies
    assert {b["bound"] for b in cal["bounds"]} == {"150 requests", "10 s, at most 20 in flight", "10 s, open"}
    assert cal["achieved"]["saturation_rps"] == pytest.approx(cal["targets"]["saturation_rps"], rel=0.3)
    assert not list(results.rglob("*.tmp*"))  # no temporary left behind

    # `make report`: one self-contained HTML page holding every figure and executed notebook.
    report = subprocess.run(["snakemake", "--configfile", ".test/config.yaml", "--report", "results/report.html"],
                            cwd=work, env=env, capture_output=True, text=True, timeout=600)
    assert report.returncode == 0, report.stderr[-3000:]
    html = (results / "report.html").read_text()
    figures = {"asr_duration": FIGURES, "slosa": SLO_SA_FIGURES, "ewsjf": EWSJF_FIGURES, "slai": SLAI_FIGURES,
               "tournament": TOURNAMENT_FIGURES, "asr_extensions": EXTENSION_FIGURES}
    for notebook, names in figures.items():
        for name in names:
            assert f"{name}.png" in html, (notebook, name)
        assert f"{notebook}.html" in html
    assert figure_map.label(figure_map.figures(REPO / "workflow" / "report" / "figure_map.yaml"), "asr_duration",
                            "fig03_librispeech_e2el") in html  # a caption from the figure map

    # Jupyter-first: opened by hand (jupytext, no papermill parameters), a notebook runs top to
    # bottom against this run's results: its parameter cell's defaults find the rule's manifest.
    manifest = json.loads((results / "notebooks" / "tournament.inputs.json").read_text())
    assert manifest["inputs"] == {"table": "../tournament/table.parquet", "cluster": "../tournament/cluster_table.parquet"}
    (results / "figures" / "tournament" / "pareto.png").unlink()
    notebook = jupytext.read(work / "notebooks" / "tournament.py")
    NotebookClient(notebook, kernel_name="python3", timeout=600,
                   resources={"metadata": {"path": str(work / "notebooks")}}).execute()
    assert (results / "figures" / "tournament" / "pareto.png").stat().st_size > 0
