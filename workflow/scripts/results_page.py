"""The `results_page` rule (run by Snakemake's script directive, which puts its own preamble
first: no ``from __future__`` import here): this run's headline numbers as one page (`<results>/results.md`) and one
data file (`<results>/results.json`), from what the notebooks wrote (`<results>/notebooks/
<name>.numbers.json`) and Snakemake's record of each job's start and end. The documentation's
results page (docs/results.md) shows the Markdown section by section, under the same headings."""

import datetime
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

from schedlab.compat.snakemake import job_records
from schedlab.counting import counts
from schedlab.io import atomic_path

#: The page's sections, in order; docs/results.md has one heading per name.
SECTIONS = ("Paper vs ours", "Fidelity", "The prefix cache", "Tournament", "A cluster of engines", "Paper A's future work",
            "Timings")
#: Each paper notebook, the paper it reproduces and the figure it opens with.
PAPERS = {
    "asr_duration": ("A", "Duration-aware scheduling for ASR serving"),
    "ewsjf": ("B", "EWSJF"),
    "slai": ("C", "Sarathi-Serve, RAD and SLAI"),
    "slosa": ("D", "SLO-aware scheduling by simulated annealing"),
}
#: Where the fidelity tables' columns come from (calibration.numbers.json, schedlab.fidelity.fidelity_table).
METRICS = (("p50_e2el_ms", "P50 E2EL", "ms", 0), ("p90_e2el_ms", "P90 E2EL", "ms", 0), ("throughput_rps", "throughput", "req/s", 2))


def _table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join("" if c is None else str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _num(value, digits: int = 1, sign: bool = False) -> str:
    if value is None:
        return "n/a"
    return f"{value:+.{digits}f}" if sign else f"{value:,.{digits}f}"


def _of(met, n) -> str:
    return f"{met} of {n}" if n else ""


def papers_section(numbers: dict) -> str:
    rows_out, details = [], []
    for name, (paper, title) in PAPERS.items():
        rows = (numbers.get(name) or {}).get("paper_vs_ours")
        if rows is None:
            rows_out.append([paper, title, f"`{name}`", "not compared in this run"] + [""] * 6)
            continue
        c = counts(rows)
        rows_out.append([paper, title, f"`{name}`", _of(c["predicted"][0], c["predicted"][2]),
                         _of(c["predicted"][1], c["predicted"][2]), _of(c["changes"][0], c["changes"][1]),
                         _of(*c["bound"]), _of(*c["fitted"]), c["derived"] or "", c["not identified"] or ""])
        band = lambda r: (f"{_num(r['low'], 2)} to {_num(r['high'], 2)} ({r['seeds']} seeds)"
                          if r.get("seeds", 1) > 1 and r.get("low") is not None else "")
        details.append(f"### Paper {paper}: every number\n\n" + _table(
            ["quantity", "unit", "paper", "ours (median)", "5-95 % band", "error", "role", "within 15 %",
             "paper in band", "match", "reason or why"],
            [[r["quantity"], r["unit"], _num(r["paper"], 2), _num(r["ours"], 2), band(r),
              f"{_num(r['error'], 1, sign=True)} {r['error unit']}" if r["error"] is not None else "n/a",
              r["role"], r["within"], r["in_band"], r["match"], r.get("reason") or r.get("why", "")] for r in rows]))
    head = ("Each paper number has one role: `fitted` (a calibration target), `derived` (determined by fitted "
            "values), `predicted`, `bound` (a claim stated as a limit) or `not identified`. Ours is the median over "
            "the trace seeds. A predicted absolute number is counted twice: within 15 % of our median, and the "
            "paper's value inside our 5-95 % seed band; a change vs the baseline matches only when the paper's change "
            "lies inside our band (columns left empty: no such rows).\n\n")
    return head + _table(["paper", "title", "notebook", "predicted within 15 %", "predicted: paper in our band",
                          "changes: paper in our band", "bounds met", "fitted within 15 %", "derived", "not identified"],
                         rows_out) + "\n\n" + "\n\n".join(details)


def fidelity_rows(table: list[dict], fit: str) -> list[list]:
    """One row per (policy, rate) of one fit: for each metric the error beside the engine's
    clean repeats (median, min-max, their span in % of the median)."""
    rows = []
    for r in (t for t in table if t["fit"] == fit):
        row = [r["policy"], f"{r['rate']:g}" + ("" if r["below_80"] else " (past 80 %)"), r["repeats"]]
        for m, _, _, digits in METRICS:
            lo, med, hi = r[f"{m}_min"], r[f"{m}_engine"], r[f"{m}_max"]
            span = (hi - lo) / med * 100 if med else None
            row += [_num(r[f"{m}_error_pct"], 1, sign=True),
                    f"{_num(med, digits)} [{_num(lo, digits)}-{_num(hi, digits)}], {_num(span, 0)} %"]
        rows.append(row)
    return rows


def fidelity_section(numbers: dict) -> str:
    cal = numbers.get("calibration")
    if not cal:
        return "The calibration notebook wrote no numbers in this run."
    out = [f"`sim` against `vllm-sim` (vLLM's own scheduler on the same step-time model) on paper A's workloads: "
           f"largest |error| of median TTFT and E2EL **{_num(cal['sim_vs_vllm_sim_max_error_pct'], 3)} %**."]
    header = ["policy", "rate (req/s)", "clean repeats"]
    for _, words, unit, _ in METRICS:
        header += [f"{words}: sim error (%)", f"{words}: engine median [min-max] ({unit}), span"]
    for key, label in (("engine", "the decoder engine"), ("whisper_engine", "the Whisper engine")):
        table = cal.get(key)
        if not table:
            if key == "engine":
                out.append("No clean replay of the served decoder engine to compare with in this run.")
            continue
        for fit in dict.fromkeys(t["fit"] for t in table):
            out.append(f"### `sim` against {label}, step-time fit: {fit}\n\n"
                       "Each error is against the median of the engine's clean repeats, shown beside it with their "
                       "range and its span in % of the median. The 10 % target applies up to 80 % of the engine's "
                       "highest measured throughput.\n\n" + _table(header, fidelity_rows(table, fit)))
    return "\n\n".join(out)


def tournament_section(numbers: dict) -> str:
    t = numbers.get("tournament")
    if not t:
        return "The tournament notebook wrote no numbers in this run."
    p99 = {r["workload"]: r for r in t["best_p99"]}
    rows = [[r["workload"], f"`{r['policy']}`", _num(r["g_per_s"], 4), _num(r["fcfs"], 4),
             f"`{p99[r['workload']]['policy']}`", _num(p99[r["workload"]]["p99_e2el_ms"] / 1e3, 1),
             _num(p99[r["workload"]]["fcfs"] / 1e3, 1)] for r in t["best_g"]]
    ranks = sorted(t["mean_rank"], key=lambda r: r["g_per_s"])
    return (f"At load {t['load']:g} (a fraction of FCFS's backlog capacity on each workload):\n\n"
            + _table(["workload", "best G", "G (1/s)", "FCFS's G", "best P99 E2EL", "P99 (s)", "FCFS's P99 (s)"], rows)
            + "\n\nMean rank over every workload and load (1 = best):\n\n"
            + _table(["entrant", "G", "P99 E2EL", "P50 E2EL"],
                     [[f"`{r['policy']}`", _num(r["g_per_s"], 2), _num(r["p99_e2el_ms"], 2), _num(r["p50_e2el_ms"], 2)]
                      for r in ranks]))


def prefix_cache_section(numbers: dict) -> str:
    """Paper B's sharing study (completion time vs FCFS at each sharing level) and the
    tournament's workloads played with the cache off and on."""
    out = []
    sharing = (numbers.get("ewsjf") or {}).get("sharing")
    if sharing:
        methods = [m for m in sharing["levels"][0] if m not in ("questions_per_doc", "fcfs_hit_rate")]
        rows = [[f"{r['questions_per_doc']:g}", _num(100 * r["fcfs_hit_rate"], 1),
                 *(_num(r[m], 1, sign=True) for m in methods)] for r in sharing["levels"]]
        out.append("Paper B's Table 3 with the long prompts as documents asked several times (FCFS calibrated at "
                   "each level, every other row predicted): completion time vs FCFS (%).\n\n"
                   + _table(["questions per document", "FCFS's prompt tokens cached (%)", *methods], rows)
                   + "\n\n" + sharing["conclusion"])
    else:
        out.append("The ewsjf notebook wrote no sharing study in this run.")
    cache = (numbers.get("tournament") or {}).get("prefix_cache")
    if cache:
        out.append("The tournament's workloads whose prompts share tokens, the cache off and on, at its highest load:\n\n"
                   + _table(["workload", "entrant", "hit rate (%)", "P50 TTFT off (s)", "P50 TTFT on (s)",
                             "FCFS capacity off / on (req/s)"],
                            [[r["workload"], f"`{r['policy']}`", _num(100 * r["hit rate"], 1),
                              _num(r["P50 TTFT off (s)"], 2), _num(r["P50 TTFT on (s)"], 2),
                              f"{_num(r['capacity off'], 2)} / {_num(r['capacity on'], 2)}"] for r in cache]))
    return "\n\n".join(out)


def cluster_section(numbers: dict) -> str:
    """Paper C's routing claim as its notebook read it, and the tournament's cluster study."""
    routing = (numbers.get("slai") or {}).get("routing")
    cluster = (numbers.get("tournament") or {}).get("cluster")
    return "\n\n".join([
        ("Paper C's routing claim, random routing against join-the-shortest-queue on clusters of identical "
         "engines:\n\n" + "\n".join(f"- {line}" for line in routing)) if routing
        else "The slai notebook wrote no routing study in this run.",
        ("The cluster study, routers against per-replica schedulers:\n\n" + "\n".join(f"- {line}" for line in cluster))
        if cluster else "The tournament notebook wrote no cluster study in this run.",
    ])


def extensions_section(numbers: dict) -> str:
    x = numbers.get("asr_extensions")
    if not x:
        return "The extensions notebook wrote no numbers in this run."
    vad = _table(["clips", "rate (req/s)", "SJF's P50 E2EL, VAD size vs file length (%)"],
                 [[r["scenario"], f"{r['rate']:g}", _num(r["change_pct"], 1, sign=True)] for r in x["vad_sjf_change_pct"]])
    switching = _table(["policy", "P50 E2EL (ms)", "P99 E2EL (ms)"],
                       [[f"`{r['policy']}`", _num(r["p50_e2el_ms"], 0), _num(r["p99_e2el_ms"], 0)] for r in x["switching"]])
    return "Job size from speech-active time (WebRTC VAD):\n\n" + vad + "\n\nSwitching under a drifting workload:\n\n" + switching


def job_times(workdir: Path, results: str) -> list[dict]:
    """Every job Snakemake recorded for a file under ``results`` (its rule, start and end, from the
    records it keeps under ``.snakemake/metadata``, one per output file named by its base64-encoded
    path), one entry per job; [] where there are none."""
    records = {}
    for path, record in job_records(workdir):
        start, end = record.get("starttime"), record.get("endtime")
        if path.startswith(results.rstrip("/") + "/") and start is not None and end is not None:
            records.setdefault((record.get("rule"), record.get("job_hash")), []).append((start, end))
    # One record per output file: a job's outputs share its rule and hash, and their times overlap.
    jobs = []
    for (rule, _), spans in records.items():
        for start, end in sorted(spans):
            if jobs and jobs[-1]["rule"] == rule and jobs[-1]["key"] == _ and start <= jobs[-1]["end"]:
                jobs[-1]["end"] = max(jobs[-1]["end"], end)
            else:
                jobs.append({"rule": rule, "key": _, "start": start, "end": end})
    jobs = [{k: v for k, v in j.items() if k != "key"} for j in jobs]
    return sorted(jobs, key=lambda j: j["start"])


def timings(jobs: list[dict]) -> dict:
    if not jobs:
        return {}
    by_rule = {}
    for j in jobs:
        r = by_rule.setdefault(j["rule"], {"rule": j["rule"], "jobs": 0, "job_s": 0.0, "longest_s": 0.0})
        r["jobs"] += 1
        r["job_s"] += j["end"] - j["start"]
        r["longest_s"] = max(r["longest_s"], j["end"] - j["start"])
    return {"jobs": len(jobs), "span_s": max(j["end"] for j in jobs) - min(j["start"] for j in jobs),
            "job_s": sum(j["end"] - j["start"] for j in jobs),
            "rules": sorted(by_rule.values(), key=lambda r: -r["job_s"])}


def _duration(seconds: float) -> str:
    m, s = divmod(round(seconds), 60)
    return f"{m} min {s} s" if m else f"{s} s"


def timings_section(t: dict) -> str:
    if not t:
        return "Snakemake kept no record of this run's jobs."
    head = (f"{t['jobs']} jobs from the first job's start to the last one's end: **{_duration(t['span_s'])}** "
            f"({_duration(t['job_s'])} of jobs added up). From Snakemake's record of the jobs that wrote the files "
            "now in the results folder: after a resumed run, the jobs of the earlier invocations count too.\n\n")
    return head + _table(["rule", "jobs", "time, added up", "longest job"],
                         [[f"`{r['rule']}`", r["jobs"], _duration(r["job_s"]), _duration(r["longest_s"])] for r in t["rules"]])


def _commit(workdir: Path) -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=workdir, capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else "unknown"


def _machine() -> str:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else platform.processor()
    return f"{os.cpu_count()} cores ({model or 'unknown CPU'}), {platform.system()} {platform.machine()}"


def page(numbers: dict, times: dict, about: dict) -> str:
    bodies = {"Paper vs ours": papers_section(numbers), "Fidelity": fidelity_section(numbers),
              "The prefix cache": prefix_cache_section(numbers),
              "Tournament": tournament_section(numbers), "A cluster of engines": cluster_section(numbers),
              "Paper A's future work": extensions_section(numbers),
              "Timings": timings_section(times)}
    head = (f"# Results of this run\n\nGenerated {about['generated']} from commit `{about['commit']}` on "
            f"{about['machine']}, backend `{about['backend']}`, by the pipeline's `results_page` rule from the "
            "numbers each notebook wrote.\n")
    return head + "".join(f"\n## {name}\n\n{bodies[name]}\n" for name in SECTIONS)


def write(numbers_files: list[str], md: str, data: str, *, results: str, backend: str, workdir: Path = Path(".")) -> None:
    numbers = {Path(p).name.removesuffix(".numbers.json"): json.loads(Path(p).read_text()) for p in numbers_files}
    times = timings(job_times(workdir, results))
    about = {"generated": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
             "commit": _commit(workdir), "machine": _machine(), "backend": backend}
    with atomic_path(md) as tmp:
        tmp.write_text(page(numbers, times, about))
    with atomic_path(data) as tmp:
        tmp.write_text(json.dumps({**about, "notebooks": numbers, "timings": times}, indent=1) + "\n")


if "snakemake" in globals():
    sm = snakemake  # noqa: F821 (set by Snakemake's script directive)
    with open(sm.log[0], "w") as log:
        sys.stderr = log
        write(list(sm.input.numbers), sm.output.md, sm.output.json, results=os.path.dirname(sm.output.md),
              backend=sm.params.backend)
