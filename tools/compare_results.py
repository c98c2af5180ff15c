"""Compare the simulation outputs of two result trees (two runs of the pipeline).

    python tools/compare_results.py BEFORE/results AFTER/results

Every run summary (``runs/sim/**/*.json``, ``runs/vllm-sim/**/*.json``) and per-request table
(``runs/**/*.parquet`` of those backends), and every study table a simulation writes (paper B,
C and D's studies, the tournament, paper A's extensions), is compared value for value. What a
run measures about the machine it ran on (wall time, scheduler overhead) is left out. Prints one
line per file that differs (the keys or columns, and the largest difference), then a count;
exits 1 when a file differs or is in one tree only.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

#: Patterns, under a results folder, of the files a simulation writes.
PATTERNS = ("runs/sim/**/*.json", "runs/sim/**/*.parquet", "runs/vllm-sim/**/*.json", "runs/vllm-sim/**/*.parquet",
            "ewsjf/study/*.parquet", "slai/sweep/**/*.parquet", "slai/capacity/*.parquet", "slai/params.parquet",
            "slosa/study/*.parquet", "tournament/runs/*.parquet", "extensions/**/*.parquet")
#: What a run measures about the machine it ran on, not about the simulation.
MACHINE = ("wall_s", "sched_overhead_us_per_req", "time_ms", "trial_wall_s", "elapsed_s")


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for pattern in PATTERNS for p in root.glob(pattern) if p.is_file()}


def _frame(path: Path) -> pd.DataFrame:
    if path.suffix == ".json":
        return pd.DataFrame([json.loads(path.read_text())])
    return pd.read_parquet(path)


def differences(a: Path, b: Path) -> str:
    """"" when the two files hold the same values (machine measurements left out); else what
    differs."""
    x, y = _frame(a), _frame(b)
    x = x.drop(columns=[c for c in x.columns if c in MACHINE])
    y = y.drop(columns=[c for c in y.columns if c in MACHINE])
    if list(x.columns) != list(y.columns):
        return f"columns: only before {sorted(set(x.columns) - set(y.columns))}, only after {sorted(set(y.columns) - set(x.columns))}"
    if len(x) != len(y):
        return f"rows: {len(x)} before, {len(y)} after"
    changed = []
    for col in x.columns:
        u, v = x[col], y[col]
        if u.equals(v):
            continue
        if pd.api.types.is_numeric_dtype(u) and pd.api.types.is_numeric_dtype(v):
            diff = np.nanmax(np.abs(u.to_numpy(float) - v.to_numpy(float))) if len(u) else 0.0
            changed.append(f"{col} (largest difference {diff:.3g})")
        else:
            changed.append(col)
    return ", ".join(changed)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    before, after = (Path(p) for p in argv)
    a, b = _files(before), _files(after)
    differ = 0
    for name in sorted(a | b):
        if name not in b or name not in a:
            print(f"{name}: only {'before' if name in a else 'after'}")
            differ += 1
            continue
        why = differences(before / name, after / name)
        if why:
            print(f"{name}: {why}")
            differ += 1
    print(f"{len(a & b)} files in both, {differ} differ or are in one tree only")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
