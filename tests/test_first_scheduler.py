"""docs/first-scheduler.md, run as a reader would: its files written from the page's code blocks
(each names its path on its first line), then its shell block, verbatim, in an empty folder.
pip is pointed at a folder of the test's own through its environment (``PIP_TARGET``), as the
shared virtual environment is not the test's to install into."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "first-scheduler.md"


def _blocks(text: str) -> list[tuple[str, str]]:
    return re.findall(r"```(\w+)\n(.*?)```", text, re.S)


def test_the_page_has_one_shell_block_of_under_15_lines_and_names_its_files():
    blocks = _blocks(PAGE.read_text())
    shell = [body for lang, body in blocks if lang == "bash"]
    assert len(shell) == 1 and len(shell[0].strip().splitlines()) < 15
    files = [body.splitlines()[0] for lang, body in blocks if lang in ("python", "toml")]
    assert files == ["# my-scheduler/my_scheduler.py", "# my-scheduler/pyproject.toml"]


@pytest.mark.slow
def test_the_walkthrough_runs_from_an_empty_folder_to_its_plot(tmp_path):
    blocks = _blocks(PAGE.read_text())
    for lang, body in blocks:
        if lang in ("python", "toml"):
            path = tmp_path / body.splitlines()[0].removeprefix("# ")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(body)
    (shell,) = [body for lang, body in blocks if lang == "bash"]
    site = tmp_path / "site"
    env = {**os.environ, "PIP_TARGET": str(site), "PIP_NO_DEPS": "1",
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
           "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(["bash", "-e", "-c", shell], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "shortest-total" in done.stdout and "my-scheduler (my_scheduler)" in done.stdout
    assert (tmp_path / "ttft.png").stat().st_size > 0
    runs = pd.read_parquet(tmp_path / "runs.parquet").set_index(["policy", "backend"])
    assert len(runs) == 6 and (runs["completed"] == 400).all()
    ttft = runs["p50_ttft_ms"].unstack("backend")
    assert (ttft["sim"] - ttft["vllm-sim"]).abs().max() < 1e-6  # the same decisions on both
    assert ttft.loc["shortest-total", "sim"] < ttft.loc["fcfs", "sim"]
