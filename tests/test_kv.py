"""The engine's KV blocks behind one interface (schedlab.engine.kv): the implementation chosen
once from the limits and the trace, the paged allocator's count equal to the blocks the requests
hold after every step under preemption, and the engine reaching its blocks only through the
interface, with the prefix cache and without."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from schedlab.engine import Arena, EngineConfig, run
from schedlab.engine import core
from schedlab.engine.core import Engine
from schedlab.engine.kv import BlockManager, PagedBlocks, PrefixBlocks
from schedlab.engine.steptime import StepTimeModel
from schedlab.simulate import scheduler_for

STEP = StepTimeModel(intercept=0.004, n_prefill_tokens=2e-5, n_decode=1e-4, ctx_tokens=1e-7, prefill_pairs=1e-9)

#: The members of the interface, as the protocol declares them.
PROTOCOL = {n for n in vars(BlockManager) if not n.startswith("_")} | set(BlockManager.__annotations__)
#: What vLLM's scheduling pass does on the prefix cache as it plans (the planner of a queue
#: policy): allocate and cache, release, look up, touch (``private`` and ``held_once`` skip the
#: lookup of a request whose blocks no other request names).
POOL = {"take", "admit", "release", "private", "held_once"}


def llm_trace(n: int = 120, seed: int = 1, sharing: bool = False) -> pd.DataFrame:
    """Poisson arrivals; with ``sharing``, every prompt opens with one of three documents."""
    rng = np.random.default_rng(seed)
    trace = pd.DataFrame({"request_id": np.arange(n), "arrival_s": np.cumsum(rng.exponential(0.05, n)),
                          "prompt_tokens": rng.integers(20, 400, n), "output_tokens": rng.integers(1, 120, n)})
    if sharing:
        trace["prefix_id"] = rng.integers(0, 3, n)
        trace["prefix_tokens"] = np.minimum(trace["prompt_tokens"], 256)
    return trace


def arena(capacity: int, caching: bool) -> Arena:
    return Arena(STEP, EngineConfig(block_size=16, kv_capacity_blocks=capacity, max_num_seqs=16,
                                    max_num_batched_tokens=512, prefix_caching=caching))


@pytest.mark.parametrize(("caching", "sharing", "kind"), [(False, False, PagedBlocks), (False, True, PagedBlocks),
                                                        (True, False, PagedBlocks), (True, True, PrefixBlocks)])
def test_the_prefix_cache_is_chosen_with_caching_on_and_sharing_data_else_the_paged_count(caching, sharing, kind):
    trace = llm_trace(sharing=sharing)
    engine = Engine(trace, scheduler_for("fcfs"), arena(200, caching))
    assert type(engine.kv) is kind and isinstance(engine.kv, BlockManager)
    assert engine.prefix_caching is kind.caching and engine.free == engine.kv.free == 200
    result = engine.run()
    assert (result.prefix_cache is not None) is (kind is PrefixBlocks)


class CountedEngine(Engine):
    """After every step and stretch, the paged count is the capacity less the blocks held."""

    def _step(self, plan):
        super()._step(plan)
        self.check()

    def _run_stretch(self, dts, ends):
        super()._run_stretch(dts, ends)
        self.check()

    def check(self):
        held = int(self.blocks.sum())
        assert self.free == self.kv.free == self.limits.kv_capacity_blocks - held >= 0
        assert not self.blocks[self.computed == 0].any()  # waiting and finished requests hold nothing


@pytest.mark.parametrize("scheduler", ["fcfs", "sjf", "sarathi-spf", "slai-spf-dynamic", "rad", "request-level"])
def test_the_paged_count_is_the_blocks_the_requests_hold_after_every_step(scheduler):
    trace, capacity = llm_trace(200, seed=4), 60
    engine = CountedEngine(trace, scheduler_for(scheduler, trace, arena(capacity, False)), arena(capacity, False))
    result = engine.run()
    assert result.requests["finish_s"].notna().all() and 0 < result.peak_kv_blocks <= capacity
    assert result.requests["preemptions"].sum() > 0 or scheduler == "request-level"
    assert engine.free == capacity and not engine.blocks.any()  # every block let go at the end


class Through:
    """A block manager seen only through attribute access: forwards to the real one and
    records what the engine and its schedulers ask of it."""

    def __init__(self, inner) -> None:
        self.inner, self.asked = inner, set()

    def __getattr__(self, name):
        self.asked.add(name)
        return getattr(self.inner, name)


@pytest.mark.parametrize("scheduler", ["fcfs", "sjf-uncached", "sarathi-spf"])
@pytest.mark.parametrize("caching", [False, True])
def test_the_engine_reaches_its_blocks_only_through_the_interface(caching, scheduler, monkeypatch):
    """Queue policies (vLLM's scheduling pass on the pool) and a batch builder (a plan carried
    out afterwards), with the cache and without: a stand-in that only forwards gives the same
    run, and is asked for the protocol's members (and, with the cache, the pool's own calls)."""
    trace, a = llm_trace(150, seed=2, sharing=True), arena(80, caching)
    plain = run(trace, scheduler_for(scheduler, trace, a), a)
    made = []

    def through(*args):
        made.append(Through(real(*args)))
        return made[-1]

    real = core.block_manager
    monkeypatch.setattr(core, "block_manager", through)
    seen = run(trace, scheduler_for(scheduler, trace, a), a)
    pd.testing.assert_frame_equal(seen.requests, plain.requests)
    assert seen.prefix_cache == plain.prefix_cache and seen.steps == plain.steps
    assert plain.requests["preemptions"].sum() > 0
    asked = made[0].asked
    assert asked <= PROTOCOL | (POOL if caching else set())
    assert {"carry_out", "scheduled", "finish", "free", "stats"} <= asked
    if caching:
        assert plain.prefix_cache["hits"] > 0
