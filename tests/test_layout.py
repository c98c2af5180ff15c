"""The layout's rules: generic packages import no paper's package, the papers' packages are
independent of each other, and the layers from the command line down to the registry hold
(import-linter's contracts in pyproject.toml)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_hold():
    exe = Path(sys.executable).parent / "lint-imports"
    if not exe.exists() and shutil.which("lint-imports") is None:
        pytest.fail("lint-imports (import-linter, the `test` extra) is not installed")
    done = subprocess.run([str(exe) if exe.exists() else "lint-imports", "--no-cache"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "Contracts: 3 kept, 0 broken." in done.stdout
