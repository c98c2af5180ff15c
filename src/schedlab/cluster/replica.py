"""One replica of a cluster: schedlab's engine, run piecewise by the cluster's event loop.

A :class:`Replica` is an :class:`~schedlab.engine.core.Engine` whose requests come from the
router one at a time instead of from a trace it owns. Per-request state (known and computed
tokens, KV blocks held, the timing log) lives in arrays by trace position that every replica
of the cluster shares: a request is only ever on one replica, so each writes its own rows.
Each replica keeps its own clock, running requests, free KV blocks (its prefix cache, when
it has one), scheduler, front end and token-gap histogram.

:meth:`Replica.advance` is the engine's run loop (:meth:`Engine.run`) taken one stretch at a
time: it runs the replica's steps until its clock reaches the next routing time, when the
router must see it, or until it has nothing to do before a request is routed to it. Its
arrivals, stretches of fixed decode steps and empty plans follow the engine's loop rule for
rule, so a one-replica cluster is the single engine, byte for byte (tested).

While requests remain to be routed, a stretch of decode steps (fixed until the next arrival, or
until a completion) waits rather than run at once (``deferred``): a routing time sees it as its
steps begun by then leave it.
Nothing a router reads of the replica changes before its last step, whose completion ends it (or
whose KV blocks do), but the KV blocks: for a router that reads them (``shows_kv``) they are
shown as those steps leave them. A stretch that the next arrival would stop is cut, when a
request is routed here, at the first step ending at or after that request's arrival at the
scheduler, exactly as the single engine cuts it; every stretch is run once a routing time passes
the start of its last step. Each replica's steps are then the single engine's on its share, byte
for byte, and what a router reads is the single engine's state at the routing time (tested).

Only a router that reads the replicas' state needs this loop: one that does not routes every
request up front, and each replica is then a single engine on its share (see :mod:`.run`).
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections import deque
from dataclasses import dataclass

import numpy as np

from schedlab.engine import kernels
from schedlab.engine.arena import Arena
from schedlab.engine.core import Engine
from schedlab.engine.requests import Requests
from schedlab.engine.scheduler import UNTIL_ARRIVAL, Scheduler
from schedlab.errors import SchedlabError


@dataclass(slots=True)
class Held:
    """A stretch of decode steps that a replica has not run yet: how many steps, their durations
    and end times (also as a list, to search), the free KV blocks at its start, and whether the
    next request routed here stops it."""

    steps: int
    dts: np.ndarray
    ends: np.ndarray
    end_list: list[float]
    free: int
    open: bool


class Replica(Engine):
    """Replica ``index`` of a cluster: ``scheduler`` in ``arena`` over the shared ``requests``."""

    def __init__(self, index: int, requests: Requests, scheduler: Scheduler, arena: Arena, *,
                 shows_kv: bool = False) -> None:
        self._setup(requests, scheduler, arena, requests.log.sharing())
        self.index = index
        # a stretch of decode steps not run yet; and whether the router reads KV blocks, which
        # are then shown as the steps begun before each routing time leave them (nothing else a
        # router reads changes before its last step)
        self.deferred: Held | None = None
        self.shows_kv = shows_kv
        # the latest routing time up to which advance() has nothing to do (-inf: unknown)
        self.wake = -np.inf
        self.visible = np.full(requests.n, np.inf)  # when each request routed here reaches the scheduler
        # the cluster's own state: requests routed here that the scheduler has not seen yet,
        # the front end's queue, the load the router reads, and whether the scheduler waits
        # for an arrival to plan anything
        self.pending: deque[int] = deque()
        self._front_free = -np.inf
        self.outstanding = 0
        self.outstanding_tokens = 0
        self.blocked = False
        self.arrive_s = 0.0
        scheduler.bind(self)

    # -- what the router reads ----------------------------------------------------------------
    @property
    def n_waiting(self) -> int:
        return self.scheduler.n_waiting() + len(self.pending)

    @property
    def n_running(self) -> int:
        return len(self.running)

    # -- the event loop's calls -------------------------------------------------------------
    def _front_end(self, t: float) -> float:
        """When a request that reaches this replica at ``t`` (the latest so far) reaches its
        scheduler: :meth:`StepTimeModel.visible_times` one request at a time."""
        st = self.step_time
        if not st.frontend_service_s:
            return t + st.frontend_s
        self._front_free = (t if t > self._front_free else self._front_free) + float(st.frontend_service_s)
        return self._front_free + st.frontend_s

    def take(self, i: int) -> None:
        """Request ``i`` is routed here (at its arrival time)."""
        v = self._front_end(float(self.arrival[i]))
        self.visible[i] = v
        self.pending.append(i)
        self.outstanding += 1
        self.outstanding_tokens += int(self.prompt[i]) + int(self.sizes[i])
        self.wake = -np.inf
        if self.deferred is not None and self.deferred.open:
            self._stop_at(v)
        if self.blocked:  # the engine's empty-plan rule: the clock moves to the next arrival
            self.now = max(self.now, v)
            self.blocked = False

    def advance(self, until: float) -> None:
        """Run until the clock reaches ``until`` (the next routing time; ``inf``: none left),
        or until nothing can happen before a request is routed here (see the module docstring)."""
        sched, visible, pending = self.scheduler, self.visible, self.pending
        while not self.blocked and self.now < until:
            if self.deferred is not None:
                begun = bisect_left(self.deferred.end_list, until) + 1  # its steps begun before ``until``
                if begun < self.deferred.steps:  # its last step has not begun
                    self._show(begun)
                    return
                self._run_deferred()
                continue
            if pending and visible[pending[0]] <= self.now:
                t0 = time.perf_counter()
                while pending and visible[pending[0]] <= self.now:
                    sched.arrive(pending.popleft())
                self.arrive_s += time.perf_counter() - t0
            if not self.running and not sched.n_waiting():
                if not pending:
                    self.wake = np.inf  # idle until a request is routed here
                    return
                self.now = float(visible[pending[0]])
                continue
            mode = sched.steady()
            if mode:
                # an arrival stops it: the next one routed here, if any is yet
                t_join = float(visible[pending[0]]) if mode == UNTIL_ARRIVAL and pending else np.inf
                if until == np.inf:
                    if self._stretch(t_join):
                        continue
                else:
                    k, dt0, slope = self._stretch_steps(t_join)
                    if k >= 2:  # fewer: the single engine plans a step, wherever the next arrival
                        dts, ends = kernels.lockstep_times(self.now, dt0, slope, k)
                        self.deferred = Held(k, dts, ends, ends.tolist(), self.free,
                                             mode == UNTIL_ARRIVAL and not pending)
                        continue
            plan = sched.schedule()
            if plan.empty:
                if pending:
                    self.now = max(self.now, float(visible[pending[0]]))
                elif until < np.inf:
                    self.blocked = True  # until a request is routed here (see take)
                else:
                    raise SchedlabError(f"{sched.name} on replica {self.index}: engine stalled, with requests left "
                                        "and nothing to schedule")
                continue
            self._step(plan)
        self.wake = np.inf if self.blocked else self.now

    def _show(self, begun: int) -> None:
        """The router's view during the deferred stretch, of which ``begun`` steps (fewer than
        all) have begun: its KV blocks as those steps leave them, when the router reads them;
        nothing else it reads changes before the last step."""
        held = self.deferred
        if self.shows_kv:
            run = self.running_totals()[0]
            self.free = held.free - kernels.new_blocks(run, self.computed, self.blocks, self.enc_blocks,
                                                       self.limits.block_size, begun)
            self.wake = held.end_list[begun - 1]  # when its next step begins
        else:
            self.wake = held.end_list[held.steps - 2]  # when its last step begins

    def _stop_at(self, t_join: float) -> None:
        """A request routed here reaches the scheduler at ``t_join``: the deferred stretch stops
        at the first step ending at or after it (the stretch's end times are :meth:`_stretch`'s,
        summed the same way), as the single engine's would; if that leaves fewer than two steps,
        the single engine would have planned a step instead, and so will this replica."""
        held = self.deferred
        held.steps = min(held.steps, bisect_left(held.end_list, t_join) + 1)
        held.open = False
        if held.steps < 2:
            self.free = held.free
            self.deferred = None

    def _run_deferred(self) -> None:
        held, self.deferred = self.deferred, None
        self.free = held.free
        # the first steps of those timed when it was held: each end is summed in step order, so
        # the same as if only these had been timed
        self._run_stretch(held.dts[:held.steps], held.ends[:held.steps])

    def _retire(self, candidates: np.ndarray) -> np.ndarray:
        finished = super()._retire(candidates)
        self.outstanding -= finished.size
        self.outstanding_tokens -= int(self.prompt[finished].sum() + self.sizes[finished].sum())
        return finished
