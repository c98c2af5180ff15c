"""The layout's rules: generic packages import no paper's package, the papers' packages are
independent of each other, and the layers from the command line down to the errors hold, with
every module and package in one of them (import-linter's contracts in pyproject.toml)."""

import re
import shutil
import subprocess
import sys
import tomllib
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


def test_every_module_and_package_is_in_the_layers_without_exceptions():
    """A module left out of the layers contract, or an import it lists as an exception
    (``ignore_imports``), could run back up the layers unchecked."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    assert not [c["name"] for c in contracts if c.get("ignore_imports")]
    (layers,) = [c["layers"] for c in contracts if c["type"] == "layers"]
    named = [m.strip() for layer in layers for m in re.split(r"[|:]", layer)]
    src = ROOT / "src" / "schedlab"
    present = {f"schedlab.{p.stem}" for p in src.glob("*.py") if p.stem != "__init__"}
    present |= {f"schedlab.{p.parent.name}" for p in src.glob("*/__init__.py")}
    assert len(named) == len(set(named))
    assert set(named) == present

