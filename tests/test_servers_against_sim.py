"""Two real `vllm serve` processes (vLLM's CPU build, the tiny decoder, dummy weights, the
prefix cache on), started once and shared by this module's tests, against what `sim` predicts
for the same requests and limits:

- a server's own prefix-cache counters (`/metrics`) and each response's cached tokens;
- a trace replayed across both by the HTTP client with the very router code a simulated cluster
  runs: for the deterministic routers each request goes to the server the simulation sends it
  to, and every request completes.

A server takes half a minute to start on two cores, so the tests share two. vLLM's development
endpoints are on, and each test empties the servers' prefix caches first
(`POST /reset_prefix_cache`): it finds them as if new."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import httpx
import numpy as np
import pandas as pd
import pytest

pytest.importorskip("vllm")

from schedlab import registry  # noqa: E402
from schedlab.backends.served.client import replay_http  # noqa: E402
from schedlab.backends.served.prometheus import kv_metrics, prefix_cache_counters  # noqa: E402
from schedlab.backends.served.server import serve_command, server_env, start_server  # noqa: E402
from schedlab.backends.vllm.engine import LaunchSpec, cpu_kv_capacity_blocks  # noqa: E402
from schedlab.cluster.served import replay_routed  # noqa: E402
from schedlab.cluster import run_cluster  # noqa: E402
from schedlab.engine import Arena, EngineConfig  # noqa: E402
from schedlab.engine.core import Engine  # noqa: E402
from schedlab.engine.steptime import StepTimeModel  # noqa: E402
from schedlab.errors import SchedlabError  # noqa: E402
from schedlab.registry import register_router  # noqa: E402
from schedlab.routers import Router  # noqa: E402
from schedlab.simulate import scheduler_for  # noqa: E402
from schedlab.workload.shared_prefixes import doc_qa_trace  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.serving]

ROOT = Path(__file__).resolve().parents[1]
#: 8 MiB of KV cache: 128 blocks of 32 tokens (vLLM's null block among them), a few documents'
#: worth, so a server evicts.
SPEC = LaunchSpec(model="tiny-llama", max_num_seqs=4, max_num_batched_tokens=512, kv_cache_gib=8 / 1024,
                  prefix_caching=True)
LIMITS = EngineConfig(max_num_seqs=SPEC.max_num_seqs, max_num_batched_tokens=SPEC.max_num_batched_tokens,
                      block_size=SPEC.block_size, kv_capacity_blocks=cpu_kv_capacity_blocks(SPEC), prefix_caching=True)


@pytest.fixture(scope="module")
def started(tmp_path_factory):
    """Two servers, started together, shared by this module's tests."""
    folder = tmp_path_factory.mktemp("servers")
    cmd = serve_command(ROOT / "src/schedlab/assets/models/tiny-llama", SPEC)
    env = {**server_env(SPEC), "VLLM_SERVER_DEV_MODE": "1"}
    with ExitStack() as stack, ThreadPoolExecutor(2) as pool:
        starting = [pool.submit(start_server, cmd, log=folder / f"server{k}.log", env=env) for k in range(2)]
        yield [stack.enter_context(f.result()) for f in starting]


@pytest.fixture
def servers(started):
    """The two servers, their prefix caches emptied (no request is running between tests)."""
    for server in started:
        httpx.post(f"{server.url}/reset_prefix_cache", timeout=30).raise_for_status()
    return started


@pytest.mark.parametrize("router", ["round-robin", "prefix-affinity"])
def test_a_replay_across_real_servers_routes_each_request_as_the_simulated_cluster(servers, router):
    """Eight documents asked three times each, in random order. The client sends each request
    when the one before it has ended, and the simulation spaces them 100 s apart: neither ever
    routes with a request outstanding, so prefix-affinity's load bound never binds and its
    choice is the ring's on both sides."""
    trace = doc_qa_trace(np.arange(200, 600), np.array([4]), 24, 1.0, seed=3, questions_per_doc=3)
    arena = Arena(StepTimeModel(intercept=0.01, n_prefill_tokens=1e-5, n_decode=1e-4), LIMITS)
    simulated = run_cluster(trace.assign(arrival_s=np.arange(len(trace)) * 100.0), "fcfs", [arena, arena],
                            router).requests["replica"].to_numpy()
    result, served = replay_routed([s.url for s in servers], trace.assign(arrival_s=0.0), router, model=SPEC.model,
                                   limits=LIMITS, one_at_a_time=True)
    assert served.tolist() == simulated.tolist()
    assert set(served.tolist()) == {0, 1}
    frame = result.log.frame()
    assert frame["finish_s"].notna().all()
    if router == "round-robin":  # a burst, sent at once, is routed in the trace's order all the same
        burst, turns = replay_routed([s.url for s in servers], trace.assign(arrival_s=0.0), router, model=SPEC.model,
                                     limits=LIMITS)
        assert turns.tolist() == simulated.tolist() and burst.log.frame()["finish_s"].notna().all()
    if router == "prefix-affinity":  # every question of a document on the server that holds it
        assert trace.assign(server=served).groupby("prefix_id")["server"].nunique().max() == 1
        assert frame["cached_tokens"].sum() > 0


def test_least_kv_in_front_of_real_servers_reads_each_servers_kv_blocks_from_its_metrics(servers):
    """least-kv reads each server's KV blocks from its /metrics (its capacity once, the share in
    use before each request is routed) and routes as the simulated cluster does. Each request is
    sent when the one before it has ended, so every server reads as idle (vLLM counts the cached
    blocks no request holds as free) and each choice is the tie's, server 0: on two cores, a
    server streaming at full speed answered /metrics seconds late (docs/cluster.md), so a test
    that routes beside running requests would test the machine's timing instead."""
    urls = [s.url for s in servers]
    assert [kv_metrics(httpx.get(f"{url}/metrics").text) for url in urls] == [
        {"usage": 0.0, "blocks": LIMITS.kv_capacity_blocks, "block_size": LIMITS.block_size}] * 2
    trace = pd.DataFrame({"request_id": [0, 1, 2], "arrival_s": 0.0, "prompt_tokens": [400, 100, 40],
                          "output_tokens": [60, 40, 10]})
    result, served = replay_routed(urls, trace, "least-kv", model=SPEC.model, limits=LIMITS, one_at_a_time=True)
    assert result.frame()["finish_s"].notna().all()
    arena = Arena(StepTimeModel(intercept=0.02, n_prefill_tokens=1e-5, n_decode=1e-4), LIMITS)
    spaced = trace.assign(arrival_s=np.arange(len(trace)) * 100.0)
    assert served.tolist() == run_cluster(spaced, "fcfs", [arena, arena], "least-kv").requests["replica"].tolist() == [0] * 3


def test_a_router_that_reads_kv_blocks_without_saying_so_is_refused_in_front_of_real_servers(servers, monkeypatch):
    class Fullest(Router):
        name = "fullest-undeclared"

        def route(self, i, candidates):
            return int(candidates[np.argmax([r.kv_frac for r in self.cluster.replicas])])

    registry.router_entries()  # the registry loaded, then this test's router added to a copy of it
    monkeypatch.setattr(registry, "_routers", dict(registry._routers))
    register_router("fullest-undeclared", summary="a test's router")(Fullest)
    trace = doc_qa_trace(np.arange(200, 300), np.array([4]), 2, 1.0, seed=3)
    with pytest.raises(SchedlabError, match="reads_kv = True"):
        replay_routed([s.url for s in servers], trace, "fullest-undeclared", model=SPEC.model, limits=LIMITS)


def test_the_cluster_replay_command_routes_across_real_servers_and_summarises_each(servers, tmp_path):
    """`schedlab cluster-replay`: the routed replay from the command line, in the simulated
    cluster's contracts: each request on the server the simulation sends it to, and the summary
    over both servers is the per-server summaries added up."""
    trace = doc_qa_trace(np.arange(200, 600), np.array([4]), 12, 1.0, seed=5, questions_per_doc=3)
    trace.assign(arrival_s=0.0).to_parquet(tmp_path / "trace.parquet")
    arena = Arena(StepTimeModel(intercept=0.01, n_prefill_tokens=1e-5, n_decode=1e-4), LIMITS)
    simulated = run_cluster(trace.assign(arrival_s=np.arange(len(trace)) * 100.0), "fcfs", [arena, arena],
                            "prefix-affinity").requests["replica"].to_numpy()
    out = {name: tmp_path / name for name in ("results.parquet", "summary.json", "replicas.parquet")}
    proc = subprocess.run(
        [sys.executable, "-m", "schedlab.cli", "cluster-replay", "--servers", *[s.url for s in servers],
         "--trace", str(tmp_path / "trace.parquet"), "--router", "prefix-affinity", "--model", SPEC.model,
         "--block-size", str(SPEC.block_size), "--scheduler", "fcfs", "--one-at-a-time",
         "--out-results", str(out["results.parquet"]), "--out-summary", str(out["summary.json"]),
         "--out-replicas", str(out["replicas.parquet"])],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = pd.read_parquet(out["results.parquet"])
    assert results["replica"].tolist() == simulated.tolist() and results["finish_s"].notna().all()
    summary = json.loads(out["summary.json"].read_text())
    replicas = pd.read_parquet(out["replicas.parquet"])
    assert summary["completed"] == len(trace) and summary["replicas"] == 2 and summary["router"] == "prefix-affinity"
    assert (summary["backend"], summary["via"], summary["policy"]) == ("vllm", "server", "fcfs")
    assert replicas["replica"].tolist() == [0, 1]
    assert replicas["completed"].tolist() == np.bincount(results["replica"], minlength=2).tolist()
    assert replicas["cached_tokens"].sum() == summary["cached_tokens"] == results["cached_tokens"].sum() > 0
    assert np.isfinite(replicas["p50_itl_ms"]).all() and np.isfinite(summary["p99_itl_ms"])
    # a model the servers do not serve: one line, before any request is sent, nothing written
    for path in out.values():
        path.unlink()
    good = proc.args
    argv = good[:good.index("--model") + 1] + ["other"] + good[good.index("--model") + 2:]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert f"serves {SPEC.model}, not 'other'" in proc.stderr
    assert not any(path.exists() for path in out.values())
    # nor one whose KV blocks are of another size than --block-size
    argv = good[:good.index("--block-size") + 1] + ["16"] + good[good.index("--block-size") + 2:]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert f"has KV blocks of {SPEC.block_size} tokens, not 16" in proc.stderr
    assert not any(path.exists() for path in out.values())


def settled_counters(url: str, timeout_s: float = 10.0) -> dict:
    """The server's counters once two readings 0.5 s apart agree (its API process records a
    step's statistics as it handles that step's outputs)."""
    last, t0 = prefix_cache_counters(url), time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        time.sleep(0.5)
        now = prefix_cache_counters(url)
        if now == last:
            return now
        last = now
    return last


def test_the_servers_prefix_cache_counts_what_sim_predicts(servers):
    """Eight documents of 250..1,000 tokens, each asked three times, in random order: the
    server's 127 blocks hold a few documents, so later questions find their document cached,
    partly evicted, or gone.

    Hits depend on the order in which the cache sees requests, not on timing, once no two
    requests overlap: the client sends each request when the one before it has ended, and
    the engine frees a request's blocks before its last tokens leave (a step's outputs are
    handled after its frees). sim replays the same requests far apart (100 s), so none
    overlaps there either. Generated tokens differ (the server's are the dummy model's, sim's
    all one token), and no prompt holds an earlier answer, so no hit depends on them; the
    answers' blocks still take cache space alike on both sides."""
    trace = doc_qa_trace(np.arange(250, 1001), np.array([3]), 24, 1.0, seed=5, questions_per_doc=3)
    trace["arrival_s"] = 0.0
    server = servers[0]
    before = prefix_cache_counters(server.url)
    served = replay_http(server.url, trace, model=SPEC.model, whisper=False, one_at_a_time=True).log.frame()
    after = settled_counters(server.url)

    assert after["num_gpu_blocks"] - 1 == LIMITS.kv_capacity_blocks  # vLLM's null block holds nothing
    arena = Arena(StepTimeModel(intercept=0.01, n_prefill_tokens=1e-5, n_decode=1e-4), LIMITS)
    spaced = trace.assign(arrival_s=np.arange(len(trace)) * 100.0)
    engine = Engine(spaced, scheduler_for("fcfs"), arena)
    predicted = engine.run()

    assert engine.kv.evictions > 0  # the server had to evict too
    assert predicted.prefix_cache["hits"] > 0 and predicted.requests["cached_tokens"].eq(0).any()
    assert after["queries"] - before["queries"] == predicted.prefix_cache["queries"]
    assert after["hits"] - before["hits"] == predicted.prefix_cache["hits"]
    np.testing.assert_array_equal(served["cached_tokens"], predicted.requests["cached_tokens"])
