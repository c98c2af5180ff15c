"""schedlab's vLLM plug-in: a `vllm serve` with schedlab's scheduler class and a bad
`--additional-config` ends as it starts, in one line, before any engine is built."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from schedlab.backends.vllm.plugin import check_options
from schedlab.errors import SchedlabError

ROOT = Path(__file__).resolve().parents[1]
ENTRY_POINT = "schedlab.backends.vllm.plugin:register"
POLICY = "schedlab.backends.vllm.scheduler.SchedlabScheduler"
PLAN = "schedlab.backends.vllm.plan.SchedlabPlanScheduler"

BAD = {
    "unknown policy": (POLICY, {"schedlab": {"policy": "lifo"}}, "unknown queue scheduler 'lifo'"),
    "misspelt key": (POLICY, {"schedlab": {"polcy": "sjf"}}, "polcy"),
    "negative kappa": (POLICY, {"schedlab": {"policy": "sjf", "kappa": {"en": -3}}}, "kappa.en"),
    "kappa of 1e308": (POLICY, {"schedlab": {"policy": "sjf", "kappa": {"en": 1e308}}}, "kappa.en"),
    "priorities as text": (POLICY, {"schedlab": {"allow_client_priority": "yes"}}, "allow_client_priority"),
    "unknown step-plan scheduler": (PLAN, {"schedlab": {"scheduler": "nope"}}, "unknown batch scheduler 'nope'"),
    "step-plan without a scheduler": (PLAN, {"schedlab": {}}, "scheduler"),
}


@pytest.mark.parametrize("cls, options, named", BAD.values(), ids=BAD.keys())
def test_bad_options_are_one_line(cls, options, named):
    with pytest.raises(SchedlabError) as err:
        check_options(cls, options)
    assert "\n" not in str(err.value) and named in str(err.value)


def test_good_options_and_other_schedulers_pass():
    check_options(POLICY, {"schedlab": {"policy": "sjf", "kappa": {"en": 3.0}, "allow_client_priority": True}})
    check_options(PLAN, {"schedlab": {"scheduler": "slai-spf-dynamic"}})
    check_options("vllm.v1.core.sched.scheduler.Scheduler", {"schedlab": {"policy": "lifo"}})  # not schedlab's


def test_the_package_declares_the_plugin_to_vllm():
    """`make install` installs the entry point vLLM loads its general plug-ins from."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["entry-points"]["vllm.general_plugins"] == {"schedlab": ENTRY_POINT}


@pytest.fixture
def plugin_installed(tmp_path) -> dict:
    """An environment in which vLLM finds the plug-in through its entry point, as after `make
    install`, whatever the installed copy's age: the entry point's metadata on PYTHONPATH."""
    info = tmp_path / "site" / "schedlab_plugin-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: schedlab-plugin\nVersion: 0\n")
    (info / "entry_points.txt").write_text(f"[vllm.general_plugins]\nschedlab = {ENTRY_POINT}\n")
    path = os.pathsep.join(p for p in (str(ROOT / "src"), str(tmp_path / "site"), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path, "VLLM_CPU_KVCACHE_SPACE": "1"}


@pytest.mark.slow
def test_vllm_serve_with_a_bad_schedlab_section_ends_before_any_engine(plugin_installed, tmp_path):
    """The README's server line with a bad `schedlab` section: exit status 2 and one line as
    vLLM builds its configuration, before its engine core starts (once: about 20 s and three
    tracebacks later)."""
    pytest.importorskip("vllm")
    cls, options, named = BAD["unknown policy"]
    proc = subprocess.run(
        ["vllm", "serve", str(ROOT / "src" / "schedlab" / "assets" / "models" / "tiny-llama"), "--scheduler-cls", cls,
         "--additional-config", json.dumps(options), "--load-format", "dummy", "--kv-cache-memory-bytes", str(2**30),
         "--max-num-seqs", "4", "--max-model-len", "2048", "--block-size", "32", "--skip-tokenizer-init",
         "--enforce-eager", "--port", "0"],
        env=plugin_installed, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("schedlab: error: ")]
    assert len(errors) == 1 and named in errors[0], proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "EngineCore" not in proc.stderr + proc.stdout


@pytest.mark.slow
def test_in_process_engines_get_the_error_raised(plugin_installed):
    """Inside a program (an in-process engine), a bad section raises SchedlabError instead of
    ending the program."""
    pytest.importorskip("vllm")
    code = ("from schedlab.backends.vllm.plugin import register; register(); "
            "from vllm.engine.arg_utils import EngineArgs; from schedlab.errors import SchedlabError\n"
            f"args = EngineArgs(model={str(ROOT / 'src/schedlab/assets/models/tiny-llama')!r}, skip_tokenizer_init=True, "
            f"scheduler_cls={POLICY!r}, additional_config={{'schedlab': {{'policy': 'lifo'}}}})\n"
            "try:\n    args.create_engine_config()\nexcept SchedlabError as e:\n    print('raised:', e)\n")
    proc = subprocess.run([sys.executable, "-c", code], env=plugin_installed, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and "raised: unknown queue scheduler 'lifo'" in proc.stdout, proc.stderr[-3000:]
