"""Append the last run's headline numbers to the history of runs (`make record-run`).

One row per run in docs/runs.csv, from `<results>/results.json` (the `results_page` rule's data):
when and where it ran, the pipeline's time, each paper's counts of predicted numbers (within 15 %
of our median, the paper's value inside our seed band) and of changes inside our band, and `sim`'s largest
error against the served decoder engine up to 80 % of its highest throughput (the held-out fit
of the engine's own steps) beside the largest span of the engine's own clean repeats there. The
documentation's results page shows the distribution over the recorded runs.

    python workflow/scripts/record_run.py [results/results.json] [docs/runs.csv]
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

from schedlab.counting import counts

#: The history's columns, in order.
COLUMNS = ("generated", "commit", "machine", "backend", "pipeline_s", "jobs",
           *(f"{p}_{c}" for p in "ABCD" for c in ("predicted", "predicted_within", "predicted_in_band", "changes",
                                                  "changes_in_band")),
           "p50_e2el_error_pct", "p90_e2el_error_pct", "throughput_error_pct", "engine_repeat_span_pct")
PAPERS = {"A": "asr_duration", "B": "ewsjf", "C": "slai", "D": "slosa"}
METRICS = {"p50_e2el_error_pct": "p50_e2el_ms", "p90_e2el_error_pct": "p90_e2el_ms", "throughput_error_pct": "throughput_rps"}
#: The fit whose errors the history keeps: each rate simulated with a fit of the others' steps.
FIT = "own steps, rate held out"


def row(results: dict) -> dict:
    """The history's row of one run's ``results.json``."""
    out = {k: results.get(k, "") for k in ("generated", "commit", "machine", "backend")}
    timings = results.get("timings") or {}
    out |= {"pipeline_s": round(timings["span_s"]) if timings else "", "jobs": timings.get("jobs", "")}
    for paper, name in PAPERS.items():
        rows = (results["notebooks"].get(name) or {}).get("paper_vs_ours")
        c = counts(rows) if rows else None
        out |= {f"{paper}_predicted": c["predicted"][2] if c else "", f"{paper}_predicted_within": c["predicted"][0] if c else "",
                f"{paper}_predicted_in_band": c["predicted"][1] if c else "", f"{paper}_changes": c["changes"][1] if c else "",
                f"{paper}_changes_in_band": c["changes"][0] if c else ""}
    cells = [r for r in (results["notebooks"].get("calibration") or {}).get("engine") or []
             if r["fit"] == FIT and r["below_80"]]
    for column, metric in METRICS.items():
        errors = [abs(r[f"{metric}_error_pct"]) for r in cells if r[f"{metric}_error_pct"] is not None]
        out[column] = round(max(errors), 2) if errors else ""
    spans = [(r[f"{m}_max"] - r[f"{m}_min"]) / r[f"{m}_engine"] * 100 for r in cells for m in ("p50_e2el_ms", "p90_e2el_ms")
             if r[f"{m}_engine"]]
    out["engine_repeat_span_pct"] = round(max(spans), 1) if spans else ""
    return out


def append(results_json: Path, history: Path) -> dict:
    """Append ``results_json``'s row to ``history`` (made with its header if missing); returns it."""
    new = row(json.loads(results_json.read_text()))
    fresh = not history.exists() or not history.read_text().strip()
    with history.open("a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        if fresh:
            writer.writeheader()
        writer.writerow(new)
    return new


if __name__ == "__main__":
    args = sys.argv[1:]
    source = Path(args[0] if args else "results/results.json")
    target = Path(args[1] if len(args) > 1 else "docs/runs.csv")
    if not source.exists():
        sys.exit(f"record_run: {source} does not exist: run the pipeline first (make reproduce)")
    print(append(source, target))
