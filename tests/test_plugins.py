"""Schedulers from packages of their own: the example plug-in (examples/schedlab-edf), installed
for real with pip, runs everywhere a built-in does with no change under src/schedlab; a broken
plug-in is set aside with one line naming it while every built-in keeps working (a run that
calls a plug-in that misbehaves: tests/test_policy_contract.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[1]


def _env(*site: Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*map(str, site), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def _schedlab(env, *args, cwd=None):
    return subprocess.run([sys.executable, "-m", "schedlab.cli", *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=900)


@pytest.fixture(scope="module")
def edf_site(tmp_path_factory) -> Path:
    """The example plug-in, built and installed by pip into a folder of its own."""
    root = tmp_path_factory.mktemp("edf")
    source = shutil.copytree(REPO / "examples" / "schedlab-edf", root / "source")
    site = root / "site"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                           "--target", str(site), str(source)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return site


@pytest.mark.slow
def test_the_plug_in_is_listed_with_its_package(edf_site):
    done = _schedlab(_env(edf_site), "schedulers")
    assert done.returncode == 0 and done.stderr == ""
    line = next(l for l in done.stdout.splitlines() if l.startswith("edf "))
    assert "schedlab-edf (schedlab_edf)" in line and "queue" in line
    assert "edf" not in _schedlab(_env(), "schedulers").stdout.split()  # only once installed


@pytest.mark.slow
def test_the_plug_in_runs_in_simulate(edf_site, tmp_path):
    n = 40
    trace = pd.DataFrame({"request_id": np.arange(n), "arrival_s": np.arange(n) * 0.05, "prompt_tokens": 4,
                          "output_tokens": np.resize([5, 60, 20, 120], n), "audio_duration_s": np.resize([2.0, 24, 8, 30], n),
                          "language": "en"})
    trace.to_parquet(tmp_path / "trace.parquet")
    (tmp_path / "steptime.json").write_text(json.dumps(
        {"intercept": 0.002, "n_encoder": 0.03, "n_prefill_tokens": 1e-5, "n_decode": 4e-4, "ctx_tokens": 1e-8}))
    (tmp_path / "kappa.json").write_text(json.dumps({"en": {"status": "fitted", "kappa": 3.0}}))
    runs = {}
    for name in ("edf", "fcfs"):
        done = _schedlab(_env(edf_site), "simulate", "--scheduler", name, "--trace", str(tmp_path / "trace.parquet"),
                         "--steptime", str(tmp_path / "steptime.json"), "--kappa", str(tmp_path / "kappa.json"),
                         "--hardware", "A100-40GB", "--model", "whisper-large-v3", "--max-num-seqs", "4",
                         "--out-results", str(tmp_path / f"{name}.parquet"), "--out-summary", str(tmp_path / f"{name}.json"))
        assert done.returncode == 0, done.stderr
        runs[name] = pd.read_parquet(tmp_path / f"{name}.parquet")
    assert json.loads((tmp_path / "edf.json").read_text())["policy"] == "edf"
    assert runs["edf"]["finish_s"].notna().all() and len(runs["edf"]) == n
    # Deadlines follow expected output: short clips overtake long ones, so the order differs from FCFS.
    assert not np.allclose(runs["edf"]["first_scheduled_s"], runs["fcfs"]["first_scheduled_s"])


SCRIPT = textwrap.dedent('''
    import json, sys
    import numpy as np
    import matplotlib
    matplotlib.use("Agg")
    from schedlab import registry
    from schedlab.engine import Arena, EngineConfig
    from schedlab.engine.steptime import StepTimeModel
    from schedlab.report import plot_beside_paper, scheduler_order
    from schedlab.simulate import run_summary
    from schedlab.tournament.entrants import lineup
    from schedlab.tournament.play import match
    from schedlab.workload.arrivals import arrival_times
    from schedlab.workload.synthetic import random_lengths_trace

    rng = np.random.default_rng(2)
    trace = random_lengths_trace(arrival_times(25.0, rng=rng, n_requests=100), rng=rng, prompt=(16, 400), output=(4, 150))
    trace = trace.assign(slo_ttft_s=1.0, slo_tpot_s=0.1, slo_e2e_s=np.nan)  # the tournament's SLO columns
    arena = Arena(StepTimeModel(intercept=0.004, n_prefill_tokens=3e-5, n_decode=1e-4, ctx_tokens=1e-7),
                  EngineConfig(max_num_seqs=16, max_num_batched_tokens=512, block_size=16, kv_capacity_blocks=250))
    out = {}
    sim = run_summary(trace, "edf", arena, identity={})[0].requests
    vs = run_summary(trace, "edf", arena, identity={}, backend="vllm-sim", model="tiny-llama")[0].requests
    out["preemptions"] = int(sim["preemptions"].sum())
    out["vllm_sim_equal"] = bool(np.allclose(sim["finish_s"], vs["finish_s"], rtol=1e-9, atol=1e-9)
                                 and (sim["preemptions"] == vs["preemptions"]).all())
    players = lineup(["fcfs", "edf", "sarathi-fcfs"], "llm")
    rows = [match(p, trace, arena, workload="w", load=0.8) for p in players]
    out["tournament"] = [(r["policy"], r["completed"]) for r in rows]
    table = (__import__("pandas").DataFrame([dict(r, rate=r["load"]) for r in rows])
             .set_index(["rate", "policy"]))
    fig = plot_beside_paper(table, ["p50_e2el_ms"], ylabel="ms", title="t")
    out["legend"] = [t.get_text() for t in fig.legends[0].get_texts()]  # one legend beside the panels
    out["order"] = scheduler_order(["edf", "sjf", "fcfs"])
    json.dump(out, sys.stdout)
''')


@pytest.mark.slow
def test_the_plug_in_plays_everywhere_a_built_in_does(edf_site, tmp_path):
    """vllm-sim equals sim for it, it plays in the tournament, and a paper-A-style figure draws it
    (after the built-ins, in the registry's order)."""
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=_env(edf_site), timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout)
    assert out["preemptions"] > 0 and out["vllm_sim_equal"]
    assert out["tournament"] == [["fcfs", 100], ["edf", 100], ["sarathi-fcfs", 100]]
    assert out["legend"] == ["FCFS", "SARATHI-FCFS", "EDF"]
    assert out["order"] == ["fcfs", "sjf", "edf"]


@pytest.mark.slow
def test_the_plug_in_runs_inside_vllms_scheduler_on_a_real_engine(edf_site, tmp_path):
    """`schedlab vllm-run`: a real vLLM engine whose scheduler class runs the plug-in's queue."""
    n = 12
    trace = pd.DataFrame({"request_id": np.arange(n), "arrival_s": np.arange(n) * 0.02, "prompt_tokens": 16,
                          "output_tokens": np.resize([4, 24, 12], n)})
    trace.to_parquet(tmp_path / "trace.parquet")
    done = _schedlab(_env(edf_site), "vllm-run", "--trace", str(tmp_path / "trace.parquet"), "--scheduler", "edf",
                     "--max-num-seqs", "4", "--out-results", str(tmp_path / "r.parquet"),
                     "--out-summary", str(tmp_path / "s.json"))
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["policy"] == "edf" and summary["completed"] == n == summary["arrived"]


def _fake_plugin(site: Path, dist: str, module: str, source: str) -> None:
    """A distribution installed in ``site`` (its metadata written as pip writes it) whose entry
    point names ``module``."""
    info = site / f"{dist}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[schedlab.schedulers]\n{module} = {module}\n")
    (site / f"{module}.py").write_text(textwrap.dedent(source))


BROKEN = {
    "clash": ("clash-plugin", """
        from schedlab.policies.fcfs import FCFS
        from schedlab.registry import QUEUE, register
        register("fcfs", kind=QUEUE)(type("Mine", (FCFS,), {}))
        """, "plug-in 'clash' (clash-plugin, clash) failed to load: rejected: the name 'fcfs' is taken"),
    "shapeless": ("shapeless-plugin", """
        from schedlab.registry import QUEUE, register
        @register("shapeless", kind=QUEUE)
        class Shapeless:
            def push(self, job): pass
        """, "plug-in 'shapeless' (shapeless-plugin, shapeless) failed to load: rejected: "),
    "unimportable": ("unimportable-plugin", """
        import a_module_nobody_has
        """, "plug-in 'unimportable' (unimportable-plugin, unimportable) failed to load: ModuleNotFoundError"),
}


@pytest.mark.slow
def test_a_broken_plug_in_is_set_aside_in_one_line_and_built_ins_keep_working(tmp_path):
    site = tmp_path / "site"
    for module, (dist, source, _) in BROKEN.items():
        _fake_plugin(site, dist, module, source)
    listed = _schedlab(_env(site), "schedulers")  # the listing, and a non-zero exit
    assert listed.returncode == 2 and "fcfs" in listed.stdout and "shapeless" not in listed.stdout.split()
    errors = listed.stderr.strip().splitlines()
    assert len(errors) == len(BROKEN)
    for _, _, reason in BROKEN.values():
        assert any(reason in line and "Traceback" not in line for line in errors), (reason, errors)
    assert "lacks peek, pop, remove" in next(l for l in errors if "shapeless" in l)
    # A built-in still runs; the broken plug-in's own name fails with its reason, in one line, and
    # so does the built-in name a plug-in tried to take.
    run = subprocess.run([sys.executable, "-c", "from schedlab import registry; print(registry.make('sjf').name)"],
                         capture_output=True, text=True, env=_env(site))
    assert run.stdout.strip() == "sjf"
    claimed = subprocess.run([sys.executable, "-c", "from schedlab import registry; registry.make('fcfs')"],
                             capture_output=True, text=True, env=_env(site))
    assert "scheduler 'fcfs' is claimed by a rejected plug-in: plug-in 'clash' (clash-plugin, clash)" in claimed.stderr
    asked = subprocess.run([sys.executable, "-c", "from schedlab import registry; registry.make('shapeless')"],
                           capture_output=True, text=True, env=_env(site))
    assert "plug-in 'shapeless' (shapeless-plugin, shapeless) failed to load" in asked.stderr


@pytest.mark.parametrize("first", ["", "import schedlab.backends.transformers, schedlab.backends.vllm; "],
                         ids=["fresh", "engines imported first"])
def test_backends_are_listed_in_one_order_by_clock_and_kind_without_their_engines_libraries(first):
    """The backends' table, whatever a process imported first: every backend, those on a virtual
    clock (what `schedlab simulate` runs), those that run batch builders too (the pipeline's
    `backend`), and both; listing it imports neither vLLM nor transformers."""
    code = (first + "import json, sys; from schedlab import registry as r; print(json.dumps([r.backend_names(), "
            "r.backend_names(simulated=True), r.backend_names(r.BATCH), r.backend_names(r.BATCH, simulated=True), "
            "sorted({'vllm', 'transformers', 'torch'} & set(sys.modules))]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == [["sim", "vllm-sim", "vllm", "transformers-sim", "transformers"],
                                       ["sim", "vllm-sim", "transformers-sim"], ["sim", "vllm-sim", "vllm"],
                                       ["sim", "vllm-sim"], []]


@pytest.mark.parametrize("backend, kind, message", [
    ("nope", None, "unknown backend 'nope'; known: sim, vllm-sim, transformers-sim"),
    ("vllm", None, "backend 'vllm' is a real engine on the wall clock; choose sim, vllm-sim, transformers-sim"),
    ("transformers-sim", "batch", "backend 'transformers-sim' runs no batch scheduler; choose sim, vllm-sim"),
])
def test_a_backend_that_cannot_simulate_is_one_line(backend, kind, message):
    from schedlab import registry
    from schedlab.errors import SchedlabError

    with pytest.raises(SchedlabError) as err:
        registry.backend_entry(backend, kind=kind, simulated=True)
    assert str(err.value) == message
