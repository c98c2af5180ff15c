"""Workload kinds from one registry: `schedlab workload` makes a valid trace of every registered
kind from its pools' data (a synthetic data mirror here), at a rate and a size, each request held
to a model's context (refused in one line, clipped with its sharing data, or dropped); a kind
from a package of its own, installed with pip, runs through the command line, the tournament and
the pipeline's plan with no file of schedlab changed."""

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

from schedlab import registry
from schedlab.cli import main
from schedlab.latency.catalogue import model_arch
from schedlab.sharing import HASH_BLOCK_TOKENS, cut_prompts
from schedlab.validation import read_steptime, read_trace
from schedlab.workload.arrivals import arrival_times
from schedlab.workload.openchat import openchat_trace

from test_pipeline import _synthetic_mirror, workflow_copy

REPO = Path(__file__).resolve().parents[1]
#: The kinds schedlab itself registers (a plug-in's would join them).
BUILT_IN = ["librispeech", "uniform", "openchat", "azure-code", "azure-conv", "mooncake", "multi-turn", "mixed",
            "documents"]


@pytest.fixture(scope="module")
def synthetic_mirror(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("mirror")
    _synthetic_mirror(folder)
    return folder


@pytest.fixture
def data(synthetic_mirror, tmp_path, monkeypatch) -> Path:
    """The synthetic mirror and an empty cache; the test's folder as the working one."""
    monkeypatch.setenv("SCHEDLAB_DATA_MIRROR", str(synthetic_mirror))
    monkeypatch.setenv("SCHEDLAB_DATA_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _run(capsys, *argv) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_the_registry_holds_every_kind_the_pipeline_uses_and_their_pools():
    assert set(BUILT_IN) <= set(registry.workload_names())
    assert registry.workload_names(registry.ASR) == ["librispeech", "uniform"]
    for entry in registry.workload_entries():
        for pool in entry.pools:
            registry.pool_entry(pool)  # every pool a kind names is registered
    assert "timestamp_s" in registry.pool_entry("mooncake").columns and "hash_ids" in registry.pool_entry("mooncake").columns


@pytest.mark.parametrize("kind", BUILT_IN)
def test_every_kind_makes_a_valid_trace_at_each_rate_and_the_same_one_again(capsys, data, kind):
    modality = registry.workload_entry(kind).modality
    model = "whisper-tiny" if modality == registry.ASR else "mistral-7b"
    argv = ["workload", "--kind", kind, "--rate", "4", "inf", "--n-requests", "40", "--model", model, "--too-long",
            "drop", "--out", "a.parquet", "b.parquet"]
    rc, _, err = _run(capsys, *argv)
    assert rc == 0 and err == "", err
    first = Path("a.parquet").read_bytes()
    context = model_arch(model).max_target_positions
    timed, backlog = (read_trace(f, context=context) for f in ("a.parquet", "b.parquet"))
    assert 0 < len(timed) <= 40 and timed["request_id"].tolist() == list(range(len(timed)))
    assert timed["arrival_s"].iloc[-1] > 0 and (backlog["arrival_s"] == 0).all()
    assert _run(capsys, *argv)[0] == 0 and Path("a.parquet").read_bytes() == first  # the seed makes the trace


def test_a_kind_timed_by_the_rate_is_sized_by_a_duration_as_its_paper_draws_it(capsys, data):
    """openchat at 2 req/s for 30 s is paper C's trace of the same seed (its own streams)."""
    rc, _, err = _run(capsys, "workload", "--kind", "openchat", "--rate", "2", "--duration-s", "30", "--seed", "5",
                      "--param", "share=0.25", "--out", "c.parquet")
    assert rc == 0, err
    pool = registry.pool_entry("openchat").load()
    pd.testing.assert_frame_equal(pd.read_parquet("c.parquet"), openchat_trace(pool, 2.0, 30.0, 0.25, 5))
    rc, _, err = _run(capsys, "workload", "--kind", "uniform", "--rate", "3", "--n-requests", "30", "--burstiness",
                      "0.5", "--param", "clips_per_duration=4", "--out", "u.parquet")
    assert rc == 0, err
    uniform = pd.read_parquet("u.parquet")
    np.testing.assert_array_equal(uniform["arrival_s"], arrival_times(3.0, rng=np.random.default_rng([0, 0]),
                                                                      n_requests=30, burstiness=0.5))


def test_the_context_refuses_clips_or_drops_what_it_cannot_hold(capsys, data):
    """Mooncake's prompts (900 to 6,000 tokens here) against tiny-llama's 2,048."""
    base = ["workload", "--kind", "mooncake", "--rate", "2", "--n-requests", "60"]
    assert _run(capsys, *base, "--out", "whole.parquet")[0] == 0
    whole = pd.read_parquet("whole.parquet")
    total = whole["prompt_tokens"] + whole["output_tokens"]
    over = total > 2048
    assert 0 < over.sum() < 60
    rc, _, err = _run(capsys, *base, "--model", "tiny-llama", "--out", "refused.parquet")
    assert rc == 2 and err.count("\n") == 1 and not Path("refused.parquet").exists()
    assert (f"workload kind 'mooncake': {over.sum()} of 60 requests hold more tokens than tiny-llama's context of "
            f"2,048 (the longest {total.max():,}): --too-long clip") in err
    assert _run(capsys, *base, "--model", "tiny-llama", "--too-long", "clip", "--out", "clipped.parquet")[0] == 0
    clipped = read_trace("clipped.parquet", context=2048)  # hash ids cover exactly the cut prompts
    pd.testing.assert_frame_equal(clipped[~over], whole[~over])
    assert (clipped.loc[over, "prompt_tokens"] + clipped.loc[over, "output_tokens"] == 2048).all()
    assert (clipped.loc[over, "output_tokens"] == whole.loc[over, "output_tokens"]).all()  # outputs here fit
    assert _run(capsys, *base, "--model", "tiny-llama", "--too-long", "drop", "--out", "dropped.parquet")[0] == 0
    dropped = read_trace("dropped.parquet", context=2048)
    assert dropped["request_id"].tolist() == list(range(int((~over).sum())))
    assert dropped["prompt_tokens"].tolist() == whole.loc[~over, "prompt_tokens"].tolist()


def test_cut_prompts_cuts_each_form_of_sharing_data_with_the_prompt():
    trace = pd.DataFrame({"prompt_tokens": [1200, 100], "output_tokens": [5, 5]})
    hashed = cut_prompts(trace.assign(hash_ids=[[1, 2, 3], [4]]), [513, 600])
    assert hashed["prompt_tokens"].tolist() == [513, 100] and [list(h) for h in hashed["hash_ids"]] == [[1, 2], [4]]
    assert -(-513 // HASH_BLOCK_TOKENS) == 2
    tokens = cut_prompts(trace.assign(prompt_tokens=[4, 2], token_ids=[[7, 8, 9, 10], [1, 2]]), [2, 2])
    assert [list(t) for t in tokens["token_ids"]] == [[7, 8], [1, 2]]
    prefixed = cut_prompts(trace.assign(prefix_id=[0, 0], prefix_tokens=[1000, 60]), [900, 100])
    assert prefixed["prefix_tokens"].tolist() == [900, 60] and prefixed["prompt_tokens"].tolist() == [900, 100]


@pytest.mark.parametrize("argv, message", [
    (["--kind", "nope", "--n-requests", "5"], "unknown workload kind 'nope'; known: azure-code, azure-conv, documents, librispeech"),
    (["--kind", "openchat", "--n-requests", "5", "--param", "shar=0.2"],
     "--param: workload kind 'openchat' has no parameter 'shar' (its parameters: share)"),
    (["--kind", "openchat", "--n-requests", "5", "--param", "share=2"], "--param: key 'share'"),
    (["--kind", "librispeech", "--n-requests", "5", "--clips-per-duration", "4"],
     "--clips-per-duration: workload kind 'librispeech' has no parameter 'clips_per_duration' (it takes none)"),
    (["--kind", "azure-code", "--duration-s", "30"], "times its own requests: give it a number of requests"),
    (["--kind", "azure-code", "--n-requests", "5", "--burstiness", "0.5"], "--burstiness: workload kind 'azure-code'"),
    (["--kind", "openchat", "--n-requests", "5", "--pool", "short=a.parquet"], "draws from openchat, not from short"),
    (["--kind", "openchat", "--n-requests", "5", "--model", "gpt-9"], "unknown model 'gpt-9'"),
])
def test_bad_kinds_parameters_and_sizes_are_one_line_before_any_work(capsys, data, argv, message):
    pd.DataFrame({"prompt_tokens": [5], "output_tokens": [5]}).to_parquet("a.parquet")
    rc, _, err = _run(capsys, "workload", *argv, "--rate", "2", "--out", "t.parquet")
    assert rc == 2 and err.count("\n") == 1 and message in err, err
    assert not Path("t.parquet").exists()


def test_the_listing_names_every_kind_its_pools_parameters_and_package(capsys):
    rc, out, _ = _run(capsys, "workloads")
    assert rc == 0
    kinds, pools = out.split("\n\n")
    lines = {line.split()[0]: line for line in kinds.splitlines()}
    assert "share=0.5" in lines["openchat"] and "schedlab (schedlab.workload.openchat)" in lines["openchat"]
    assert "short,long" in lines["mixed"] and "its own" in lines["mixed"]
    assert "prompt_tokens,output_tokens,timestamp_s,hash_ids" in pools  # the mooncake pool's columns


# -- a kind from a package of its own ----------------------------------------------------------
TOY = '''\
"""A toy workload kind and the pool it draws from, a toy step-time source, a toy router and a
toy backend."""
import pandas as pd

from schedlab.registry import QUEUE, register_backend, register_pool, register_router, register_source, register_workload
from schedlab.routers.base import Router


def toy_fcfs(trace, scheduler, arena, *, warmup_s, sample_s, **_):
    """schedlab's engine running FCFS, whatever scheduler it is given."""
    from schedlab.simulate import serve

    return serve(trace, "fcfs", arena, warmup_s=warmup_s, sample_s=sample_s)


register_backend("toy-fcfs", kinds=(QUEUE,), run=toy_fcfs)


@register_source("toy-flat", summary="every step 20 ms, whatever it holds")
def toy_flat(*, hardware, model, **_):
    if hardware == "broken":
        return "not a table"
    # prefill-only steps of one and two prompts of 128-512 tokens, decode-only steps of 1-32
    # sequences, and mixed steps (which paper D's grid leaves out)
    steps = pd.DataFrame({"n_encoder": 0, "n_prefill_tokens": [0, 512, 0, 256, 0, 128, 64, 0, 256, 512, 256],
                          "n_decode": [1, 0, 8, 4, 2, 16, 3, 32, 0, 0, 0],
                          "ctx_tokens": [10, 0, 80, 40, 30, 500, 20, 896, 0, 0, 0],
                          "prefill_pairs": [0, 512 * 513 // 2, 0, 256 * 257 // 2, 0, 128 * 129 // 2, 64 * 65 // 2, 0,
                                            256 * 257 // 2, 256 * 257, 128 * 129]})
    return steps.assign(source="toy-flat", hardware=hardware, model=model, time_s=0.02)


@register_router("toy-first", summary="every request to the first replica that can serve it")
class ToyFirst(Router):
    name = "toy-first"
    reads_state = False

    def route(self, i, candidates):
        return int(candidates[0])


@register_pool("toy-lengths", columns=("prompt_tokens", "output_tokens"))
def toy_lengths():
    """Three requests' lengths."""
    return pd.DataFrame({"prompt_tokens": [10, 20, 30], "output_tokens": [1, 2, 3]})


@register_workload("toy", pools=("toy-lengths",))
def toy(draw, scale: int = 1, fail: bool = False):
    """The pool's requests in turn, prompts times scale, at the arrivals drawn."""
    if fail:
        raise ValueError("asked to fail")
    pool, arrivals = draw.pools["toy-lengths"], draw.arrivals()
    rows = pool.iloc[[i % len(pool) for i in range(len(arrivals))]]
    return pd.DataFrame({"request_id": range(len(arrivals)), "arrival_s": arrivals,
                         "prompt_tokens": rows["prompt_tokens"].to_numpy() * scale,
                         "output_tokens": rows["output_tokens"].to_numpy()})
'''
PYPROJECT = '''\
[project]
name = "toy-workload"
version = "0.1.0"

[tool.setuptools]
py-modules = ["toy_workload"]

[project.entry-points."schedlab.schedulers"]
toy = "toy_workload"
'''


@pytest.fixture(scope="module")
def toy_site(tmp_path_factory) -> Path:
    """The toy package, built and installed by pip into a folder of its own."""
    root = tmp_path_factory.mktemp("toy")
    (root / "source").mkdir()
    (root / "source" / "toy_workload.py").write_text(TOY)
    (root / "source" / "pyproject.toml").write_text(PYPROJECT)
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                           "--target", str(root / "site"), str(root / "source")], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    return root / "site"


def _schedlab(site: Path, *args, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "schedlab.cli", *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=600)


@pytest.mark.slow
def test_a_plug_in_kind_runs_through_the_command_line_and_the_tournament(toy_site, tmp_path):
    listed = _schedlab(toy_site, "workloads", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    toy = next(line for line in listed.stdout.splitlines() if line.startswith("toy "))
    assert "toy-lengths" in toy and "scale=1, fail=False" in toy and "toy-workload (toy_workload)" in toy
    assert any(line.startswith("toy-lengths ") for line in listed.stdout.splitlines())
    done = _schedlab(toy_site, "workload", "--kind", "toy", "--rate", "4", "--n-requests", "7", "--param", "scale=2",
                     "--out", "toy.parquet", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    trace = read_trace(tmp_path / "toy.parquet")
    assert trace["prompt_tokens"].tolist() == [20, 40, 60, 20, 40, 60, 20]
    np.testing.assert_array_equal(trace["arrival_s"], arrival_times(4.0, rng=np.random.default_rng([0, 0]),
                                                                    n_requests=7))
    bad = _schedlab(toy_site, "workload", "--kind", "toy", "--rate", "4", "--n-requests", "7", "--param", "scale=x",
                    "--out", "bad.parquet", cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "key 'scale'" in bad.stderr
    failed = _schedlab(toy_site, "workload", "--kind", "toy", "--rate", "4", "--n-requests", "7", "--param",
                       "fail=true", "--out", "bad.parquet", cwd=tmp_path)
    assert failed.returncode == 2 and failed.stderr.count("\n") == 1, failed.stderr
    assert ("workload kind 'toy' (toy-workload, toy_workload) failed in toy: ValueError: asked to fail"
            in failed.stderr)
    assert not (tmp_path / "bad.parquet").exists()
    pool = _schedlab(toy_site, "tournament", "pool", "--kind", "toy-lengths", "--out", "pool.parquet", cwd=tmp_path)
    assert pool.returncode == 0, pool.stderr
    (tmp_path / "st.json").write_text(json.dumps({"intercept": 0.01, "n_prefill_tokens": 1e-5, "n_decode": 1e-4}))
    arena = json.dumps({"steptime": "st.json", "hardware": "A100-40GB", "model": "tiny-llama"})
    spec = json.dumps({"kind": "toy", "n_requests": 30, "scale": 3, "slo": {"e2e_s": 1.0}})
    played = _schedlab(toy_site, "tournament", "play", "--workload", "toy", "--spec", spec, "--arena", arena,
                       "--pool", "toy-lengths=pool.parquet", "--loads", "0.5", "--entrants", "fcfs", "sjf",
                       "--out", "m.parquet", cwd=tmp_path)
    assert played.returncode == 0, played.stderr
    matches = pd.read_parquet(tmp_path / "m.parquet")
    assert matches["policy"].tolist() == ["fcfs", "sjf"] and (matches["completed"] == 30).all()

    # the package's step-time source, through the listing and `schedlab steptime`, into a cluster
    # run behind its router
    sources = _schedlab(toy_site, "sources", cwd=tmp_path)
    assert sources.returncode == 0 and any(line.startswith("toy-flat ") and "toy-workload (toy_workload)" in line
                                           for line in sources.stdout.splitlines()), sources.stdout
    st = _schedlab(toy_site, "steptime", "--source", "toy-flat", "--hardware", "H100-SXM", "--model", "tiny-llama",
                   "--out", "flat.json", cwd=tmp_path)
    assert st.returncode == 0, st.stderr
    flat = read_steptime(tmp_path / "flat.json")
    assert flat.intercept == pytest.approx(0.02) and flat.n_decode == pytest.approx(0.0, abs=1e-12)
    broken = _schedlab(toy_site, "steptime", "--source", "toy-flat", "--hardware", "broken", "--model", "tiny-llama",
                       "--out", "bad.json", cwd=tmp_path)
    assert broken.returncode == 2 and broken.stderr.count("\n") == 1 and "not a profile table" in broken.stderr
    assert not (tmp_path / "bad.json").exists()
    ran = _schedlab(toy_site, "cluster", "--trace", "toy.parquet", "--replicas", "2", "--router", "toy-first",
                    "--policy", "fcfs", "--steptime", "flat.json", "--hardware", "H100-SXM", "--model", "tiny-llama",
                    "--out-results", "c.parquet", "--out-summary", "c.json", "--out-replicas", "r.parquet",
                    cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    replicas = pd.read_parquet(tmp_path / "c.parquet")
    assert len(replicas) == 7 and (replicas["replica"] == 0).all()  # the toy router sends every request to 0

    # the package's backend, through the listing and `schedlab simulate`
    backends = _schedlab(toy_site, "backends", cwd=tmp_path)
    assert backends.returncode == 0 and any(line.startswith("toy-fcfs ") and "toy-workload (toy_workload)" in line
                                            and "schedlab's engine running FCFS" in line
                                            for line in backends.stdout.splitlines()), backends.stdout
    for backend, policy in (("toy-fcfs", "sjf"), ("sim", "fcfs")):
        done = _schedlab(toy_site, "simulate", "--backend", backend, "--policy", policy, "--trace", "toy.parquet",
                         "--steptime", "flat.json", "--hardware", "H100-SXM", "--model", "tiny-llama",
                         "--out-results", f"{backend}.parquet", "--out-summary", f"{backend}.json", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "toy-fcfs.json").read_text())["backend"] == "toy-fcfs"
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "toy-fcfs.parquet"), pd.read_parquet(tmp_path / "sim.parquet"))
    real = _schedlab(toy_site, "simulate", "--backend", "vllm", "--policy", "fcfs", "--trace", "toy.parquet",
                     "--steptime", "flat.json", "--hardware", "H100-SXM", "--model", "tiny-llama",
                     "--out-results", "v.parquet", "--out-summary", "v.json", cwd=tmp_path)
    assert real.returncode == 2 and real.stderr.count("\n") == 1, real.stderr
    assert "backend 'vllm' is a real engine on the wall clock; choose sim, vllm-sim, transformers-sim, toy-fcfs" in real.stderr
    assert not (tmp_path / "v.parquet").exists()


@pytest.mark.slow
def test_a_plug_in_source_is_one_of_the_papers_sources(toy_site, tmp_path):
    """The papers' own --source options take a registered plug-in source: its table fitted (paper
    B), as it is (paper C), its prefill-only and decode-only steps on the predictor's grid (paper
    D); a name no source holds is refused with the registered ones, the plug-in's among them."""
    engine = ("--hardware", "H100-SXM", "--model", "tiny-llama")
    done = _schedlab(toy_site, "ewsjf", "steptime", "--source", "toy-flat", *engine, "--out", "b.json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    fitted = read_steptime(tmp_path / "b.json")
    assert fitted.intercept == pytest.approx(0.02) and fitted.n_decode == pytest.approx(0.0, abs=1e-12)
    done = _schedlab(toy_site, "slai", "profile", "--source", "toy-flat", *engine, "--out", "c.parquet", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    table = pd.read_parquet(tmp_path / "c.parquet")
    assert len(table) == 11 and set(table["source"]) == {"toy-flat"} and (table["time_s"] == 0.02).all()
    done = _schedlab(toy_site, "slosa", "profile", "--source", "toy-flat", *engine, "--out", "d.parquet", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    grid = pd.read_parquet(tmp_path / "d.parquet")
    rows = sorted(zip(grid["phase"], grid["batch"], grid["length"]))
    assert rows == [("decode", 1, 10), ("decode", 2, 15), ("decode", 8, 10), ("decode", 32, 28),
                    ("prefill", 1, 256), ("prefill", 1, 512), ("prefill", 2, 128), ("prefill", 2, 256)]  # no mixed steps
    assert set(grid["source"]) == {"toy-flat"} and (grid["time_s"] == 0.02).all()
    for command in (("ewsjf", "steptime"), ("slai", "profile"), ("slosa", "profile")):
        bad = _schedlab(toy_site, *command, "--source", "toy-flot", *engine, "--out", "bad.json", cwd=tmp_path)
        assert bad.returncode == 2 and "invalid choice: 'toy-flot'" in bad.stderr and "'toy-flat'" in bad.stderr
        assert "'roofline'" in bad.stderr, bad.stderr


@pytest.mark.slow
def test_the_plug_ins_kind_source_and_router_run_in_the_tiny_pipeline(toy_site, tmp_path):
    """The tiny pipeline with the toy package installed and named in its config: the tournament
    plays the toy kind (its pool made by the pipeline), the cluster study routes it with the toy
    router, and paper D's predictor is fitted on the toy source's table; a predictor that is no
    registered source is one line."""
    import yaml

    work, env = workflow_copy(tmp_path)
    env["PYTHONPATH"] = os.pathsep.join([str(toy_site), env.get("PYTHONPATH", "")])
    config = yaml.safe_load((REPO / ".test" / "config.yaml").read_text())
    tournament = config["tournament"]
    tournament["workloads"] = {"toy": {"kind": "toy", "n_requests": 30, "scale": 2, "slo": {"e2e_s": 1.0}}}
    tournament["entrants"] = ["fcfs", "sjf"]
    tournament["cluster"] = {"workloads": ["toy"], "replicas": [2], "routers": ["toy-first"], "entrants": ["fcfs"],
                             "loads": [0.9]}
    config["slosa"]["predictor"] = "toy-flat"
    (work / "c.yaml").write_text(yaml.safe_dump(config))
    snakemake = shutil.which("snakemake", path=env["PATH"])
    targets = ["results/tournament/runs/toy.parquet", "results/tournament/cluster/toy.parquet", "results/slosa/fit/toy-flat.json"]
    ran = subprocess.run([snakemake, "--cores", "2", "--configfile", "c.yaml", "--", *targets], cwd=work, env=env,
                         capture_output=True, text=True, timeout=1200)
    assert ran.returncode == 0, (ran.stdout + ran.stderr)[-3000:]
    matches = pd.read_parquet(work / targets[0])
    assert set(matches["policy"]) == {"fcfs", "sjf"} and (matches["completed"] == 30).all()
    routed = pd.read_parquet(work / targets[1])
    assert set(routed["router"]) == {"toy-first"} and (routed["completed"] == 30).all()
    fit = json.loads((work / targets[2]).read_text())
    assert fit["meta"]["source"] == "toy-flat" and fit["prefill"]["d"] == pytest.approx(0.02), fit  # the flat 20 ms
    config["slosa"]["predictor"] = "toy-flot"
    (work / "c.yaml").write_text(yaml.safe_dump(config))
    plan = subprocess.run([snakemake, "-n", "--cores", "1", "--configfile", "c.yaml"], cwd=work, env=env,
                          capture_output=True, text=True, timeout=600)
    assert plan.returncode == 2
    line = next((x for x in plan.stderr.splitlines() if "slosa.predictor" in x), plan.stderr[-2000:])
    assert ("config: slosa.predictor 'toy-flot' is neither the paper's reference nor a registered step-time "
            "source (reference, ") in line, line
    assert {"toy-flat", "roofline", "torch", "vllm"} <= set(line.split("(", 1)[1].rstrip(")").split(", ")), line


@pytest.mark.slow
def test_a_plug_in_kind_enters_the_pipelines_plan_and_a_bad_one_is_one_line(toy_site, tmp_path):
    import yaml

    config = yaml.safe_load((REPO / "config.yaml").read_text())
    config["results"] = str(tmp_path / "results")
    config["tournament"]["workloads"]["toy"] = {"kind": "toy", "n_requests": 30, "scale": 2}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(toy_site), os.environ.get("PYTHONPATH", "")])}
    snakemake = shutil.which("snakemake", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    plan = subprocess.run([snakemake, "-n", "--cores", "1", "--configfile", str(tmp_path / "c.yaml"), "--",
                           f"{tmp_path}/results/tournament/runs/toy.parquet"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    assert plan.returncode == 0, (plan.stdout + plan.stderr)[-3000:]
    assert "kind=toy-lengths" in plan.stdout, plan.stdout[-3000:]  # its pool, made by `tournament pool`
    config["tournament"]["workloads"]["toy"] = {"kind": "toy", "n_requests": 30, "scael": 2}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config))
    plan = subprocess.run([snakemake, "-n", "--cores", "1", "--configfile", str(tmp_path / "c.yaml")], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=600)
    assert plan.returncode == 2
    assert ("config: tournament: tournament workload 'toy': workload kind 'toy' has no parameter 'scael' "
            "(its parameters: scale, fail)") in plan.stderr, plan.stderr[-2000:]
