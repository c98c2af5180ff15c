"""A step plan, the decision a scheduler returns, and the planner schedulers build it with.

A :class:`StepPlan` is data, as vLLM's ``SchedulerOutput`` is: the requests scheduled this
step with the tokens each computes (a decode is one token of a request whose sequence is
otherwise computed; anything else is a prefill chunk, or recompute after a preemption), the
waiting requests it admits, the running requests it preempts, and the encoder inputs it runs.

A :class:`Planner` keeps the step's KV accounting on the scheduler's side, against the
engine's state, which it never changes: ``take`` gives a running request tokens, preempting
the scheduler's victims (recompute) while the KV blocks those tokens need run short, as vLLM
v1's running pass does; ``admit`` starts a waiting request when its whole current sequence
fits in the free blocks and a running slot is left (only its first chunk's blocks are
allocated, as vLLM's KV manager allocates what the scheduled tokens need), within the encoder
budget, and only in a step that preempted nothing. The engine then carries the plan out.

With a prefix cache (:mod:`schedlab.engine.prefix`), a waiting request's cached prefix counts:
it needs the blocks of its sequence beyond its hit, plus the free hit blocks its admission
takes out of the free queue, and computes from its hit on (at most ``known - cached`` tokens).
A scheduler whose planner calls are vLLM's own scheduling pass, call for call
(:attr:`~schedlab.engine.scheduler.Scheduler.interleaved_kv`: continuous batching) changes the
engine's block pool as it plans, in the order vLLM's KV manager does: each ``take``
allocates and caches, each ``preempt`` releases, each ``admit`` looks up, touches, allocates
and caches (the pool gathers the changes and carries them out before it is next read). Any other scheduler (a batch builder) plans on the pool as the step began (a
preemption then frees the blocks no other request holds) and the engine carries its plan out
afterwards in vLLM's order.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from schedlab.engine import kernels

_EMPTY = np.zeros(0, dtype=np.int64)


def _cat(arrays: list[np.ndarray]) -> np.ndarray:
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays) if arrays else _EMPTY


@dataclass(slots=True)
class StepPlan:
    """``parts``: ``(requests, tokens)`` array pairs, the requests scheduled and the tokens
    each computes (the arrays are valid until the step is carried out). With a prefix cache,
    ``cached`` holds each admitted request's cached tokens (where it starts computing), and
    ``kv_applied`` says the block pool holds the plan's changes (``free`` blocks are left once
    its allocations are made)."""

    parts: list[tuple[np.ndarray, np.ndarray]]
    admitted: list[int]
    preempted: list[int]
    n_encoder: int
    cached: dict[int, int] = field(default_factory=dict)
    kv_applied: bool = False
    free: int = -1

    @property
    def requests(self) -> np.ndarray:
        return _cat([r for r, _ in self.parts])

    @property
    def tokens(self) -> np.ndarray:
        return _cat([t for _, t in self.parts])

    @property
    def n_scheduled(self) -> int:
        return sum(r.size for r, _ in self.parts)

    @property
    def empty(self) -> bool:
        """Nothing to compute and nothing preempted: the engine would make no progress."""
        if self.preempted:
            return False
        for r, _ in self.parts:
            if r.size:
                return False
        return True


class Planner:
    """One step's plan under construction; ``budget`` is the step's token budget."""

    __slots__ = ("engine", "scheduler", "free", "budget", "enc_left", "_bulk", "_tokens", "_grown", "admitted",
                 "preempted", "_alive", "caching", "live", "cached", "_hit", "_at_boundary")

    def __init__(self, engine, scheduler, budget: int) -> None:
        self.engine, self.scheduler = engine, scheduler
        self.free = engine.free
        self.budget = budget
        self.enc_left = engine.limits.encoder_per_step if engine.enc_blocks else 1 << 30
        self._bulk: list[tuple[np.ndarray, np.ndarray]] = []
        self._tokens: dict[int, int] = {}
        self._grown: dict[int, int] = {}
        self.admitted: list[int] = []
        self.preempted: list[int] = []
        self._at_boundary = 0  # of them, how many the step boundary preempted, before its pass
        self._alive: list[int] | None = None
        self.caching = bool(getattr(engine, "prefix_caching", False))
        self.live = self.caching and bool(getattr(scheduler, "interleaved_kv", False))
        self.cached: dict[int, int] = {}
        self._hit: tuple[int, int, int] | None = None  # (request, cached tokens, free hit blocks)

    @property
    def n_running(self) -> int:
        """Requests running once this plan is carried out."""
        return len(self.engine.running) - len(self.preempted) + len(self.admitted)

    def take_many(self, requests: np.ndarray, tokens: np.ndarray | None = None, blocks: int | None = None,
                  n_tokens: int | None = None) -> None:
        """Running ``requests`` compute ``tokens`` each (default one): at once when their new
        KV blocks fit, else one by one with :meth:`take`. A caller that counted the new blocks
        and the tokens in all passes them as ``blocks`` and ``n_tokens``."""
        if requests.size == 0:
            return
        e = self.engine
        if tokens is None:
            tokens = np.ones(requests.size, np.int64)
        if blocks is None:
            blocks = kernels.growth(requests, tokens, e.computed, e.blocks, e.enc_blocks, e.limits.block_size)
        if blocks <= self.free and not self.preempted:
            self._hit = None
            self._bulk.append((requests, tokens))
            if self.live:
                e.kv_take(requests, tokens)
            self.free -= blocks
            self.budget -= int(tokens.sum()) if n_tokens is None else n_tokens
            return
        for i, n in zip(requests.tolist(), tokens.tolist()):
            self.take(i, n)

    def take(self, i: int, n: int) -> bool:
        """Running request ``i`` computes ``n`` tokens, preempting victims while their KV
        blocks run short; False when ``i`` is (or gets) preempted."""
        if i in self.preempted:
            return False
        e = self.engine
        need = max(0, int(e.blocks_for(int(e.computed[i]) + n)) - int(e.blocks[i]))
        while need > self.free:
            v = self.scheduler.victim(self.alive)
            self.preempt(v)
            if v == i:
                return False
        if self.live:
            self._hit = None
            e.kv_take(np.array([i], np.int64), np.array([n], np.int64))
        self.free -= need
        self._grown[i] = need
        self._tokens[i] = n
        self.budget -= n
        return True

    @property
    def alive(self) -> list[int]:
        """The running requests not preempted in this step, in admission order."""
        if self._alive is None:
            self._alive = [r for r in self.engine.running if r not in self.preempted]
        return self._alive

    @property
    def preempted_in_pass(self) -> bool:
        """Whether serving the running requests preempted one (then nothing is admitted)."""
        return len(self.preempted) > self._at_boundary

    def preempt(self, v: int, at_boundary: bool = False) -> None:
        """Preempt running request ``v`` (recompute): its blocks and planned tokens return.
        ``at_boundary``: the policy named it before the step's pass (it does not keep the
        step from admitting)."""
        e = self.engine
        self._at_boundary += at_boundary
        self.alive.remove(v)
        grown = 0
        if v in self._tokens:
            self.budget += self._tokens.pop(v)
            grown = self._grown.pop(v)
        else:
            for k, (reqs, toks) in enumerate(self._bulk):
                at = np.flatnonzero(reqs == v)
                if at.size:
                    n = int(toks[at[0]])
                    self.budget += n
                    grown = int(e.blocks_for(int(e.computed[v]) + n)) - int(e.blocks[v])
                    self._bulk[k] = (np.delete(reqs, at[0]), np.delete(toks, at[0]))
                    break
        if self.live:
            self._hit = None
            self.free = e.kv_release(v)
        elif self.caching:
            self.free += grown + e.exclusive_blocks(v)  # blocks shared with others stay in use
        else:
            self.free += grown + int(e.blocks[v])
        self.preempted.append(v)
        self.scheduler.requeue(v)

    def can_admit(self, i: int) -> bool:
        """Whether waiting request ``i`` may start this step: nothing preempted, a running slot
        left (``max_num_seqs``), encoder budget left and its whole sequence's KV free."""
        e = self.engine
        if self.preempted_in_pass or self.n_running >= e.limits.max_num_seqs or self.enc_left <= 0:
            return False
        need = int(e.blocks_for(int(e.seq[i])))
        if self.caching:
            hit, n_free = self._lookup(i)
            need += n_free - hit // e.limits.block_size
        return need <= self.free

    def _lookup(self, i: int) -> tuple[int, int]:
        """Waiting request ``i``'s cached tokens and free hit blocks, on the pool as it is now
        (kept until the next change)."""
        if self._hit is None or self._hit[0] != i:
            if self.live and self.engine.kv.private[i] and not self.engine.kv.held_once[i]:
                self._hit = (i, 0, 0)  # its first admission, and no other request names its blocks
            else:
                self._hit = (i, *self.engine.cached_prefix(i))
        return self._hit[1], self._hit[2]

    def admit(self, i: int, n: int) -> None:
        """Start waiting request ``i`` (checked with :meth:`can_admit`) with ``n`` tokens (with
        a prefix cache, at most the tokens beyond its cached prefix)."""
        e = self.engine
        if self.caching:
            hit, n_free = self._lookup(i)
            self._hit = None
            n = min(n, int(e.seq[i]) - hit)
            if self.live:
                if hit or e.kv.held_once[i]:  # a first admission that finds nothing starts as it stands
                    self.cached[i] = hit
                e.kv_admit(i, hit, n)
            else:
                self.cached[i] = hit
            self.free -= int(e.blocks_for(hit + n)) - hit // e.limits.block_size + n_free
        else:
            self.free -= int(e.blocks_for(n))
        self._tokens[i] = n
        self.budget -= n
        self.admitted.append(i)
        self.enc_left -= 1

    def plan(self) -> StepPlan:
        parts = self._bulk
        if self._tokens:
            k = len(self._tokens)
            parts.append((np.fromiter(self._tokens, np.int64, k), np.fromiter(self._tokens.values(), np.int64, k)))
        n_enc = len(self.admitted) if self.engine.enc_blocks else 0
        return StepPlan(parts, self.admitted, self.preempted, n_enc, self.cached, self.live, self.free)
