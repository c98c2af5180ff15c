"""A real `vllm serve` (vLLM's CPU build, the tiny decoder, dummy weights) with its prefix cache
on: its own prefix-cache counters (`/metrics`) and each response's cached tokens are what the
`sim` engine predicts for the same trace and limits."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("vllm")

from schedlab.backends.http_client import prefix_cache_counters, replay_http  # noqa: E402
from schedlab.backends.vllm_engine import LaunchSpec  # noqa: E402
from schedlab.backends.server_process import serve_command, server_env, start_server  # noqa: E402
from schedlab.engine import Arena, EngineConfig  # noqa: E402
from schedlab.engine.core import Engine  # noqa: E402
from schedlab.engine.steptime import StepTimeModel  # noqa: E402
from schedlab.simulate import scheduler_for  # noqa: E402
from schedlab.workload.shared import doc_qa_trace  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.serving]

ROOT = Path(__file__).resolve().parents[1]
#: 8 MiB of KV cache: 128 blocks of 32 tokens (vLLM's null block among them), a few documents'
#: worth, so the server evicts.
SPEC = LaunchSpec(model="tiny-llama", max_num_seqs=4, max_num_batched_tokens=512, kv_cache_gib=8 / 1024,
                  prefix_caching=True)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    log = tmp_path_factory.mktemp("prefix") / "server.log"
    cmd = serve_command(ROOT / "src/schedlab/assets/models/tiny-llama", SPEC)
    with start_server(cmd, log=log, env=server_env(SPEC)) as running:
        yield running


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


def test_the_servers_prefix_cache_counts_what_sim_predicts(server):
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
    before = prefix_cache_counters(server.url)
    served = replay_http(server.url, trace, model=SPEC.model, whisper=False, one_at_a_time=True).log.frame()
    after = settled_counters(server.url)

    capacity = after["num_gpu_blocks"] - 1  # vLLM's null block holds nothing
    arena = Arena(StepTimeModel(intercept=0.01, n_prefill_tokens=1e-5, n_decode=1e-4),
                  EngineConfig(max_num_seqs=SPEC.max_num_seqs, max_num_batched_tokens=SPEC.max_num_batched_tokens,
                               block_size=SPEC.block_size, kv_capacity_blocks=capacity, prefix_caching=True))
    spaced = trace.assign(arrival_s=np.arange(len(trace)) * 100.0)
    engine = Engine(spaced, scheduler_for("fcfs"), arena)
    predicted = engine.run()

    assert engine.prefix.evictions > 0  # the server had to evict too
    assert predicted.prefix_cache["hits"] > 0 and predicted.requests["cached_tokens"].eq(0).any()
    assert after["queries"] - before["queries"] == predicted.prefix_cache["queries"]
    assert after["hits"] - before["hits"] == predicted.prefix_cache["hits"]
    np.testing.assert_array_equal(served["cached_tokens"], predicted.requests["cached_tokens"])
