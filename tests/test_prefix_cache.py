"""vLLM's prefix cache in the engine (schedlab.engine.prefix): hand-computed hits and evictions
on toy traces, the pool's invariants, runs without sharing data or with the cache off left as
they were, and ``sim`` == ``vllm-sim`` (vLLM's own KV cache manager) per request for every
registered scheduler on a heavily shared trace under KV pressure."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from schedlab import registry
from schedlab.engine import Arena, EngineConfig, run
from schedlab.engine.core import Engine
from schedlab.engine.prefix import ISSUED, REF
from schedlab.engine.steptime import StepTimeModel
from schedlab.errors import SchedlabError
from schedlab.metrics import summarize
from schedlab.sharing import OUTPUT_TOKEN, prompt_token_ids
from schedlab.simulate import scheduler_for, serve

STEP = StepTimeModel(intercept=0.004, n_prefill_tokens=2e-5, n_decode=1e-4, ctx_tokens=1e-7, prefill_pairs=1e-9)
T = OUTPUT_TOKEN


def toy(prompts: list[list[int]], outputs: list[int], gap_s: float = 10.0) -> pd.DataFrame:
    """Requests ``gap_s`` apart (none overlaps the next), with explicit token ids."""
    return pd.DataFrame({
        "request_id": np.arange(len(prompts)),
        "arrival_s": np.arange(len(prompts)) * gap_s,
        "prompt_tokens": [len(p) for p in prompts],
        "output_tokens": outputs,
        "token_ids": [np.asarray(p) for p in prompts],
    })


def toy_arena(capacity: int = 100, **limits) -> Arena:
    return Arena(STEP, EngineConfig(block_size=4, kv_capacity_blocks=capacity, max_num_seqs=8,
                                    max_num_batched_tokens=64, prefix_caching=True, **limits))


def cached(trace: pd.DataFrame, arena: Arena, backend: str = "sim") -> list[int]:
    if backend == "vllm-sim":
        pytest.importorskip("vllm")
    return serve(trace, "fcfs", arena, backend=backend, model="tiny-llama").requests["cached_tokens"].tolist()


BACKENDS = pytest.mark.parametrize("backend", ["sim", "vllm-sim"])


def shared_trace(n: int = 60, seed: int = 3, rate: float = 10.0, n_prefixes: int = 3) -> pd.DataFrame:
    """Heavy sharing: every prompt is one of a few long prefixes (16..1,200 tokens) plus a
    short tail; with the SLO columns every tournament entrant reads."""
    rng = np.random.default_rng(seed)
    prefixes = [rng.integers(1000, 30000, rng.integers(16, 1200)) for _ in range(n_prefixes)]
    tails = [rng.integers(1000, 30000, rng.integers(1, 300)) for _ in range(n)]
    prompts = [np.concatenate([prefixes[rng.integers(n_prefixes)], tail]) for tail in tails]
    paying = rng.random(n) < 0.3
    return pd.DataFrame({
        "request_id": np.arange(n),
        "arrival_s": np.cumsum(rng.exponential(1 / rate, n)),
        "prompt_tokens": [p.size for p in prompts],
        "output_tokens": rng.integers(1, 200, n),
        "token_ids": prompts,
        "slo_class": np.where(paying, "paying", "free"),
        "tbt_target_s": np.where(paying, 0.05, 0.2),
        "task": np.where(paying, "chat", "code"),
        "slo_ttft_s": 10.0, "slo_tpot_s": 0.05, "slo_e2e_s": np.nan,
    })


# -- hand-computed hits (vLLM's own KV manager finds the same) -------------------------------
@BACKENDS
def test_hits_are_the_longest_cached_prefix_of_full_blocks_less_one_token(backend):
    """Block size 4. r0 = 1..10 caches blocks [1-4] and [5-8] (its 10th token's block is not
    full; its output computes token 11 only). r1 shares 8 tokens: 8 cached. r2 is 1..8 exactly:
    at most (8 - 1) // 4 = 1 block, so one token is computed (the whole second block). r3
    shares the first block only; r4 differs from its first token."""
    trace = toy([list(range(1, 11)), list(range(1, 9)) + [50, 51], list(range(1, 9)),
                 list(range(1, 5)) + [99, 98, 97, 96, 95], [2, 3, 4, 5, 6]], [2, 3, 3, 3, 3])
    assert cached(trace, toy_arena(), backend) == [0, 8, 4, 4, 0]


@BACKENDS
def test_an_answer_is_cached_and_served_to_the_next_turn(backend):
    """r0 = 1..6 and 7 generated tokens: 12 of its 13 tokens are computed (the last is only
    sampled), so 3 blocks are cached, the third one all answer. The next turn repeats prompt
    and answer and adds 2 tokens: its hit is those 3 blocks, 12 tokens."""
    first = list(range(1, 7))
    trace = toy([first, first + [T] * 7 + [77, 78]], [7, 2])
    assert cached(trace, toy_arena(), backend) == [0, 12]
    # a cached prefix is not computed again: the second prefill is 3 tokens, not 15
    res = run(trace, scheduler_for("fcfs"), toy_arena(), record=True)
    assert res.step_log["prefill_tokens"].tolist()[-2] == 3


@BACKENDS
def test_eviction_takes_the_least_recently_released_block_and_a_chain_s_tail_first(backend):
    """Five blocks of 4 tokens, one request at a time. A (8 tokens) leaves its blocks A0, A1
    cached, released tail first: the free queue's cached part is [A1, A0]. B (12 tokens) takes
    the three never-used blocks: [A1, A0, B2, B1, B0]. C (4 tokens) must evict one: A1, the
    tail of A's chain. A again (9 tokens) finds A0 (4 tokens) and evicts B2 and B1 for its
    other two blocks. B again finds B0 only."""
    a, b, c = list(range(1, 9)), list(range(101, 113)), list(range(201, 205))
    trace = toy([a, b, c, a + [9], b], [1, 1, 1, 1, 1])
    assert cached(trace, toy_arena(capacity=5), backend) == [0, 0, 0, 4, 4]
    # without the cache, nothing is found
    assert cached(trace, Arena(STEP, EngineConfig(block_size=4, kv_capacity_blocks=5, max_num_seqs=8,
                                                  max_num_batched_tokens=64)), backend) == [0] * 5


@BACKENDS
def test_a_cached_block_in_use_is_shared_not_copied_and_its_hit_costs_no_free_block(backend):
    """Two requests with the same 12-token prefix run together in 5 blocks: the second finds
    the first's 3 blocks (held, so not free) and needs only the block of its own last token,
    where 4 + 4 blocks would not fit."""
    if backend == "vllm-sim":
        pytest.importorskip("vllm")
    p = list(range(1, 13))
    trace = toy([p + [20], p + [30]], [4, 4], gap_s=0.001)
    res = serve(trace, "fcfs", toy_arena(capacity=5), backend=backend, model="tiny-llama")
    assert res.requests["cached_tokens"].tolist() == [0, 12]
    assert res.requests["preemptions"].sum() == 0
    assert res.peak_kv_blocks == 5  # 3 shared + 1 + 1: counted once
    assert res.prefix_cache == {"queries": 26, "hits": 12, "preempted_queries": 0, "preempted_hits": 0}


def test_summary_counts_first_admissions_and_the_hit_rate():
    trace = toy([list(range(1, 11)), list(range(1, 9)) + [50, 51]], [2, 3])
    res = run(trace, scheduler_for("fcfs"), toy_arena())
    s = summarize(res.requests, res.gaps)
    assert (s["prefix_cache_queries"], s["cached_tokens"]) == (20, 8)
    assert s["prefix_cache_hit_rate"] == pytest.approx(0.4)


# -- invariants ------------------------------------------------------------------------------
class CheckedEngine(Engine):
    """The engine, checking the pool after every step: free blocks are the capacity less the
    distinct blocks in use (a shared block counted once), every running request holds the
    blocks of its computed tokens, and no block is referenced by more requests than hold it."""

    def _step(self, plan):
        super()._step(plan)
        self.check()

    def _stretch(self, t_stop):
        done = super()._stretch(t_stop)
        self.check()
        return done

    def check(self):
        p = self.kv
        in_use = p.in_use()
        assert self.free == p.free == self.limits.kv_capacity_blocks - in_use >= 0
        held = 0
        for r in self.running:
            assert p.held_blocks(r) == self.blocks[r] == -(-int(self.computed[r]) // self.limits.block_size)
            held += p.held_blocks(r)
        refs = p.blocks[: p.counts[ISSUED], REF]
        assert refs.min(initial=0) >= 0 and int(refs.sum()) == held  # every reference is a held block
        assert in_use <= held


@pytest.mark.parametrize("scheduler", ["fcfs", "sjf", "sarathi-spf", "slai-spf-dynamic", "rad"])
@pytest.mark.parametrize("capacity", [100, 300, 100_000])
def test_the_pool_keeps_its_invariants_and_loses_no_request(scheduler, capacity):
    trace = shared_trace(50, seed=5)
    arena = Arena(STEP, EngineConfig(kv_capacity_blocks=capacity, max_num_seqs=16, max_num_batched_tokens=512,
                                     prefix_caching=True))
    engine = CheckedEngine(trace, scheduler_for(scheduler, trace, arena), arena)
    res = engine.run()
    req = res.requests
    assert req["finish_s"].notna().all() and (req["finish_s"] >= req["first_token_s"]).all()
    assert res.peak_kv_blocks <= capacity
    hits = req["cached_tokens"].to_numpy()
    assert ((hits % 16 == 0) & (hits <= req["prompt_tokens"] - 1)).all()
    assert engine.kv.in_use() == 0 and engine.free == capacity  # all released; cached blocks are free
    again = run(trace, scheduler_for(scheduler, trace, arena), arena).requests
    pd.testing.assert_frame_equal(again, req)  # deterministic
    if capacity == 100:
        assert req["preemptions"].sum() > 0


def test_hash_ids_stand_for_the_same_tokens_wherever_they_appear():
    """Mooncake's form: two prompts that share their first hash id share its 512 tokens."""
    trace = pd.DataFrame({"request_id": [0, 1], "arrival_s": [0.0, 10.0], "prompt_tokens": [700, 600],
                          "output_tokens": [2, 2], "hash_ids": [[0, 1], [0, 2]]})
    a, b = prompt_token_ids(trace)
    assert (a[:512] == b[:512]).all() and not (a[512:600] == b[512:600]).all()
    assert a.size == 700 and b.size == 600 and a.min() >= 1000
    arena = Arena(STEP, EngineConfig(kv_capacity_blocks=1000, prefix_caching=True))
    assert run(trace, scheduler_for("fcfs"), arena).requests["cached_tokens"].tolist() == [0, 512]


# -- without sharing data, or with the cache off: as before ----------------------------------
def test_without_sharing_data_or_with_the_cache_off_runs_are_unchanged():
    """Under KV pressure with preemptions: caching on over a trace without sharing data, and
    a trace with sharing data and caching off, give what a plain run gives, column for column."""
    trace = shared_trace(60, seed=7)
    plain = trace.drop(columns="token_ids")
    off = Arena(STEP, EngineConfig(kv_capacity_blocks=120, max_num_batched_tokens=512))
    on = Arena(STEP, EngineConfig(kv_capacity_blocks=120, max_num_batched_tokens=512, prefix_caching=True))
    for scheduler in ("fcfs", "sarathi-fcfs"):
        base = run(plain, scheduler_for(scheduler), off)
        assert base.requests["preemptions"].sum() > 0 and base.prefix_cache is None
        for t, a in ((plain, on), (trace, off)):
            res = run(t, scheduler_for(scheduler), a)
            pd.testing.assert_frame_equal(res.requests, base.requests)
            assert res.steps == base.steps and res.prefix_cache is None
        assert (run(trace, scheduler_for(scheduler), on).requests["cached_tokens"] > 0).any()


def test_an_encoder_decoder_model_refuses_the_cache():
    trace = toy([[1, 2, 3, 4, 5]], [2])
    arena = Arena(STEP, EngineConfig(encoder_frames=1500, prefix_caching=True))
    with pytest.raises(SchedlabError, match="decoder-only"):
        run(trace, scheduler_for("fcfs"), arena)


# -- sim == vllm-sim -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pressured():
    """A shared trace and a pool of 300 blocks, short enough for evictions and preemptions."""
    return shared_trace(60, seed=3), Arena(STEP, EngineConfig(kv_capacity_blocks=300, max_num_seqs=16,
                                                              max_num_batched_tokens=512, prefix_caching=True))


@pytest.mark.slow
@pytest.mark.parametrize("name", [e.name for e in registry.entries() if registry.LLM in e.modalities])
def test_vllm_sim_equals_sim_with_the_prefix_cache(name, pressured):
    """Per request: scheduling, first-token and finish times, cached tokens and preemptions;
    and vLLM's own prefix-cache counters (first admissions and re-admissions) equal the
    engine's."""
    pytest.importorskip("vllm")
    trace, arena = pressured
    engine = Engine(trace, scheduler_for(name, trace, arena), arena)
    sim = engine.run()
    vs = serve(trace, name, arena, backend="vllm-sim", model="mistral-7b")
    for col in ("first_scheduled_s", "first_token_s", "finish_s"):
        np.testing.assert_allclose(vs.requests[col], sim.requests[col], rtol=1e-9, atol=1e-9, err_msg=col)
    for col in ("cached_tokens", "preemptions"):
        np.testing.assert_array_equal(vs.requests[col], sim.requests[col], err_msg=col)
    assert vs.prefix_cache == sim.prefix_cache
    assert sim.prefix_cache["hits"] > 0.5 * sim.prefix_cache["queries"]
    assert engine.kv.evictions > 0  # the pool ran short of never-used blocks and evicted cached ones
    if name != "request-level":  # a batch runs to completion: it never outgrows the pool
        assert sim.requests["preemptions"].sum() > 0 and sim.prefix_cache["preempted_hits"] > 0


# -- the sharing data's three forms ----------------------------------------------------------
def _same_partition(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two namings put the same blocks together."""
    return bool((pd.Series(b).groupby(a).nunique() == 1).all() and (pd.Series(a).groupby(b).nunique() == 1).all())


@pytest.mark.parametrize("block_size", [4, 16, 32])
def test_names_read_off_the_sharing_data_are_the_token_hashes(block_size):
    """Blocks named from prefix ids or Mooncake's hash ids (no hashing) fall together exactly
    as the chained hashes of their tokens do, prompts that are all shared prefix included."""
    from schedlab.engine.prefix import _hashed, block_names
    from schedlab.workload.shared_prefixes import doc_qa_trace

    docs = doc_qa_trace(np.arange(20, 300), np.arange(1, 40), 300, 5.0, 0, questions_per_doc=6)
    docs.loc[::7, "prefix_tokens"] = docs.loc[::7, "prompt_tokens"]
    rng = np.random.default_rng(2)
    chains = [[0, *range(100 * k + 1, 100 * k + 1 + rng.integers(0, 4))] for k in range(6)]
    rows = [chains[rng.integers(6)][: rng.integers(1, 5)] for _ in range(200)]
    prompt = [512 * (len(r) - 1) + int(rng.integers(1, 513)) for r in rows]
    mooncake = pd.DataFrame({"request_id": np.arange(200), "arrival_s": 0.0, "prompt_tokens": prompt,
                             "output_tokens": rng.integers(1, 100, 200), "hash_ids": rows})
    for trace in (docs, mooncake):
        names, offsets, n = block_names(trace, block_size)
        total = (trace["prompt_tokens"] + trace["output_tokens"]).to_numpy()
        hashed, n_hashed = _hashed(trace, block_size, total, offsets)
        assert names.max() < n and np.unique(names).size == n_hashed and _same_partition(names, hashed)
        assert n_hashed < names.size  # some blocks are shared


@pytest.fixture(scope="module")
def workloads(request):
    """The three workloads with sharing, small: document QA (prefix ids), conversations
    (token ids, earlier answers included) and a window of Mooncake (hash ids)."""
    from schedlab.workload.shared_prefixes import doc_qa_trace, multi_turn_trace

    docs = doc_qa_trace(np.arange(200, 1500), np.arange(1, 60), 60, 8.0, 0, questions_per_doc=5)
    turns = multi_turn_trace(pd.DataFrame({"output_tokens": np.arange(5, 200)}), 60, 8.0, 0, think_s=2.0)
    out = {"doc-qa": docs, "multi-turn": turns}
    if SHARED.is_dir():
        import os

        os.environ.setdefault("SCHEDLAB_DATA_MIRROR", str(SHARED))
        from schedlab.data.llm_traces import mooncake_requests
        from schedlab.workload.shared_prefixes import mooncake_trace

        pool = mooncake_requests()
        pool = pool[pool["prompt_tokens"] < 3000].reset_index(drop=True)
        out["mooncake"] = mooncake_trace(pool, 4.0, 60, start=2000)
    return out


SHARED = __import__("pathlib").Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.mark.slow
@pytest.mark.parametrize("workload", ["doc-qa", "multi-turn", "mooncake"])
@pytest.mark.parametrize("name", ["fcfs", "sjf", "sjf-uncached", "ewsjf-uncached", "sarathi-spf", "slai-spf-dynamic"])
def test_vllm_sim_equals_sim_on_the_sharing_workloads(workload, name, workloads):
    pytest.importorskip("vllm")
    if workload not in workloads:
        pytest.skip("offline data mirror not present")
    trace = workloads[workload]
    # a pool of twice the longest request: evictions, and preemptions under the heavier loads
    longest = int((trace["prompt_tokens"] + trace["output_tokens"]).max()) // 16 + 1
    arena = Arena(STEP, EngineConfig(kv_capacity_blocks=2 * longest, max_num_seqs=16, max_num_batched_tokens=512,
                                     prefix_caching=True))
    sim = serve(trace, name, arena)
    vs = serve(trace, name, arena, backend="vllm-sim", model="mistral-7b")
    for col in ("first_token_s", "finish_s"):
        np.testing.assert_allclose(vs.requests[col], sim.requests[col], rtol=1e-9, atol=1e-9, err_msg=col)
    np.testing.assert_array_equal(vs.requests["cached_tokens"], sim.requests["cached_tokens"])
    assert vs.prefix_cache == sim.prefix_cache and sim.prefix_cache["hits"] > 0


# -- schedulers that see the cache -----------------------------------------------------------
@BACKENDS
@pytest.mark.parametrize("caching", [True, False])
def test_sjf_uncached_serves_the_request_with_less_left_to_compute(backend, caching):
    """One request at a time. While r0 (a 400-token document and a question) runs, r1 (the same
    document, another question: 420 tokens, 384 of them cached in 16-token blocks, 36 to
    compute) and r2 (100 tokens of its own) wait. SJF by prompt length takes r2 first; by the
    tokens left to compute, r1. Without a cache both take r2 first."""
    doc = list(range(1000, 1400))
    trace = toy([doc + [1, 2, 3], doc + list(range(5000, 5020)), list(range(7000, 7100))], [30, 5, 5], gap_s=0.0)
    trace["arrival_s"] = [0.0, 0.001, 0.002]
    arena = Arena(STEP, EngineConfig(block_size=16, kv_capacity_blocks=1000, max_num_seqs=1,
                                     max_num_batched_tokens=512, prefix_caching=caching))
    if backend == "vllm-sim":
        pytest.importorskip("vllm")
    order = {}
    for name in ("sjf-prompt", "sjf-uncached"):
        res = serve(trace, name, arena, backend=backend, model="tiny-llama").requests
        order[name] = res.sort_values("first_scheduled_s")["request_id"].tolist()
    assert order["sjf-prompt"] == [0, 2, 1]
    assert order["sjf-uncached"] == ([0, 1, 2] if caching else [0, 2, 1])
