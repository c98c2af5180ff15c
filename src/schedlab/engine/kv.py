"""The engine's KV blocks behind one interface, as vLLM keeps them behind its ``KVCacheManager``.

A :class:`BlockManager` owns the free-block count of one run and is told, by arrays of
requests where the engine works on arrays, what each step does to the KV blocks: a plan is
carried out (:meth:`~BlockManager.carry_out`), requests are preempted, admitted requests start
(with their cached prefix computed, where there is one), the step's new blocks are written
(:meth:`~BlockManager.scheduled`, or :meth:`~BlockManager.advance` and
:meth:`~BlockManager.advanced` for a stretch of decode steps), finished requests let their
blocks go. Schedulers read it through the engine: a waiting request's cached prefix
(:meth:`~BlockManager.lookup`, vLLM's ``get_computed_blocks``) and what preempting a running
request frees (:meth:`~BlockManager.exclusive`).

Two implementations, chosen once when the engine is built (:func:`block_manager`):

- :class:`PagedBlocks`, the paged allocator: blocks are a count. Nothing is cached; each
  request holds its own blocks (the engine's ``blocks``), and the count moves by the blocks
  the engine adds and lets go.
- :class:`PrefixBlocks`, vLLM's prefix cache (:class:`~schedlab.engine.prefix.PrefixCache`),
  for runs with prefix caching on a trace that says which prompts share tokens: free blocks
  count the evictable cached ones, admitted requests start with their cached prefix, and a
  scheduler whose planner is vLLM's own scheduling pass allocates, caches and releases as it
  plans (:meth:`~schedlab.engine.prefix.PrefixCache.take`, ``admit``, ``release``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np
import pandas as pd

from schedlab.engine.plan import StepPlan
from schedlab.engine.prefix import PrefixCache, uses_prefix_cache

if TYPE_CHECKING:
    from schedlab.engine.arena import EngineConfig
    from schedlab.engine.core import Engine
    from schedlab.engine.log import RequestLog


@runtime_checkable
class BlockManager(Protocol):
    """The KV blocks of one run, by trace position (see the module docstring)."""

    #: Whether a lookup can find cached blocks (then ``free`` counts evictable cached blocks).
    caching: bool

    @property
    def free(self) -> int:
        """Free blocks (vLLM's ``get_num_free_blocks``)."""

    def lookup(self, i: int, known: int) -> tuple[int, int]:
        """Blocks of waiting request ``i``'s longest cached prefix (of its ``known`` tokens) and
        how many of them are free."""

    def exclusive(self, v: int) -> int:
        """Blocks of running request ``v`` no other request references."""

    def carry_out(self, engine: Engine, plan: StepPlan) -> StepPlan:
        """The plan the engine carries out this step (a plan made on the pool as it stood,
        carried out on it in vLLM's order)."""

    def preempted(self, requests: list[int]) -> None:
        """Running ``requests`` are preempted (recompute), before the engine drops their blocks."""

    def start(self, engine: Engine, cached: dict[int, int]) -> None:
        """Admitted requests start with their ``cached`` tokens computed."""

    def scheduled(self, plan: StepPlan, added: int) -> int:
        """The step's scheduled tokens are written, adding ``added`` blocks to those the
        requests held; returns the free blocks after the step's allocations."""

    def advance(self, run: np.ndarray, k: int) -> None:
        """``k`` decode steps of every request of ``run`` are about to be written."""

    def advanced(self, added: int) -> int:
        """Those decode steps are written, adding ``added`` blocks; returns the free blocks."""

    def finish(self, requests: np.ndarray, n_blocks: int) -> None:
        """Finished ``requests`` let go of their blocks (``n_blocks`` between them), in order."""

    def stats(self, log: RequestLog, prompt: np.ndarray, mine: np.ndarray | None) -> dict | None:
        """The cache's lookups and hits over the requests admitted (of ``mine``, a mask by
        trace position), as :attr:`~schedlab.engine.core.RunResult.prefix_cache` holds them;
        None without a cache."""


def block_manager(trace: pd.DataFrame, limits: EngineConfig, computed: np.ndarray, blocks: np.ndarray) -> BlockManager:
    """The run's KV blocks: vLLM's prefix cache when caching is on and the trace carries
    sharing data (:func:`~schedlab.engine.prefix.uses_prefix_cache`), else the paged allocator.
    ``computed`` and ``blocks`` are the engine's per-request arrays."""
    if uses_prefix_cache(trace, limits.prefix_caching, limits.encoder_frames):
        return PrefixBlocks(trace, limits, computed)
    return PagedBlocks(limits.kv_capacity_blocks, blocks)


class PagedBlocks:
    """The paged allocator: ``free`` is a count, moved by the blocks requests take and let go."""

    caching = False

    def __init__(self, capacity: int, blocks: np.ndarray) -> None:
        self.free = capacity
        self.blocks = blocks

    def lookup(self, i: int, known: int) -> tuple[int, int]:
        return 0, 0

    def exclusive(self, v: int) -> int:
        return int(self.blocks[v])

    def carry_out(self, engine: Engine, plan: StepPlan) -> StepPlan:
        return plan

    def preempted(self, requests: list[int]) -> None:
        blocks = self.blocks
        for v in requests:
            self.free += int(blocks[v])

    def start(self, engine: Engine, cached: dict[int, int]) -> None:
        """Nothing is cached: admitted requests start from nothing."""

    def scheduled(self, plan: StepPlan, added: int) -> int:
        self.free -= added
        return self.free

    def advance(self, run: np.ndarray, k: int) -> None:
        """A count needs nothing before the steps: :meth:`advanced` counts what they add."""

    def advanced(self, added: int) -> int:
        self.free -= added
        return self.free

    def finish(self, requests: np.ndarray, n_blocks: int) -> None:
        self.free += n_blocks

    def stats(self, log: RequestLog, prompt: np.ndarray, mine: np.ndarray | None) -> None:
        return None


class PrefixBlocks(PrefixCache):
    """vLLM's prefix cache as the engine's blocks. A step's changes are gathered in vLLM's
    order and carried out in one compiled call before the pool is next read (see
    :class:`PrefixCache`); re-admissions of preempted requests count their lookups apart, as
    vLLM's ``preempted_queries``/``_hits`` do."""

    caching = True

    def __init__(self, trace: pd.DataFrame, limits: EngineConfig, computed: np.ndarray) -> None:
        super().__init__(trace, limits.block_size, limits.kv_capacity_blocks, computed)
        self.readmitted = [0, 0]  # tokens looked up and found at re-admissions after preemption

    def carry_out(self, engine: Engine, plan: StepPlan) -> StepPlan:
        """A batch builder's plan, made on the pool as the step began, carried out as vLLM
        carries a plan out (:mod:`schedlab.backends.vllm.plan`): the preemptions, then the
        running requests' tokens in running order, then the admissions in the plan's order,
        each looked up at its turn (earlier admissions' blocks are cached by then, running
        requests' allocations may have evicted blocks), scheduling ``min(known - cached,
        budget left)`` tokens of the plan's total, while the whole sequence fits and the
        running cap allows. Admissions that do not start wait again, at the front, in their
        order. A plan that vLLM's scheduling pass made on the pool itself is carried out as is."""
        if plan.kv_applied:
            return plan
        bs, seq = self.bs, engine.seq
        if plan.preempted:
            self.release(np.asarray(plan.preempted, np.int64))
        planned = dict(zip(plan.requests.tolist(), plan.tokens.tolist()))
        budget = sum(planned.values())
        gone = set(plan.preempted)
        run = np.fromiter((r for r in engine.running if r not in gone and r in planned), np.int64)
        run_tokens = np.fromiter((planned[r] for r in run.tolist()), np.int64, run.size)
        if run.size:
            self.take(run, run_tokens)
        budget -= int(run_tokens.sum())
        n_running = len(engine.running) - len(gone)
        started, tokens, cached = [], [], {}
        for i in plan.admitted:
            if budget <= 0 or n_running >= engine.limits.max_num_seqs:
                break
            known = int(seq[i])
            n_hit, n_free = self.lookup(i, known)
            if int(engine.blocks_for(known)) - n_hit + n_free > self.free:
                break
            n = min(known - n_hit * bs, budget)
            self.admit(i, n_hit, n)
            started.append(i)
            tokens.append(n)
            cached[i] = n_hit * bs
            budget -= n
            n_running += 1
        for i in reversed(plan.admitted[len(started):]):
            engine.scheduler.requeue(i)
        parts = [(run, run_tokens), (np.asarray(started, np.int64), np.asarray(tokens, np.int64))]
        return StepPlan(parts, started, plan.preempted, 0, cached, True, self.free)

    def preempted(self, requests: list[int]) -> None:
        """Released as the plan was made, or carried out (:meth:`carry_out`)."""

    def start(self, engine: Engine, cached: dict[int, int]) -> None:
        """A first admission's hit is the request's ``cached_tokens``; a re-admission's counts
        apart."""
        bs, seq, log = self.bs, engine.seq, engine.log
        for i, hit in cached.items():
            if log.preemptions[i]:
                self.readmitted[0] += int(seq[i])
                self.readmitted[1] += hit
            elif not hit:
                continue  # nothing found: it starts from nothing, as it stands
            else:
                log.cached[i] = hit
            engine.computed[i] = hit
            engine.blocks[i] = hit // bs

    def scheduled(self, plan: StepPlan, added: int) -> int:
        """The plan's free blocks (the pool counts shared blocks once); its allocations wait
        for the next read, with the releases that follow them."""
        self.done()
        return plan.free

    def advanced(self, added: int) -> int:
        self.done()
        return self._free - added

    def finish(self, requests: np.ndarray, n_blocks: int) -> None:
        """Released in running order (the order of the step's parts: running requests, then
        admissions), as vLLM frees the requests of a step's output."""
        self.release(requests)

    def stats(self, log: RequestLog, prompt: np.ndarray, mine: np.ndarray | None) -> dict:
        """First admissions' lookups and hits (vLLM's ``prefix_cache_queries``/``_hits``), and
        re-admissions' apart."""
        admitted = ~np.isnan(log.first_sched)
        if mine is not None:
            admitted &= mine
        return {"queries": int(prompt[admitted].sum()), "hits": int(log.cached[admitted].sum()),
                "preempted_queries": self.readmitted[0], "preempted_hits": self.readmitted[1]}
