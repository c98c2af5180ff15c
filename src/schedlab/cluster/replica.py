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
rule, so a one-replica cluster is the single engine, byte for byte (tested). A stretch that
the scheduler declared fixed until the next arrival stops at the next request's arrival at
this replica's front end, as if it were routed here; one declared fixed until a completion
runs whole, as it does on a single engine (arrivals do not change it). A stretch cut at an
arrival routed elsewhere sums its step times in two pieces, which can move the times in their
last bits. Only a router that reads the replicas' state needs this loop: one that does not routes
every request up front, and each replica is then a single engine on its share (see :mod:`.run`).
"""

from __future__ import annotations

import time
from collections import deque

import numpy as np

from schedlab.engine.arena import Arena
from schedlab.engine.core import Engine
from schedlab.engine.requests import Requests
from schedlab.engine.scheduler import UNTIL_ARRIVAL, Scheduler
from schedlab.errors import SchedlabError


class Replica(Engine):
    """Replica ``index`` of a cluster: ``scheduler`` in ``arena`` over the shared ``requests``."""

    def __init__(self, index: int, requests: Requests, scheduler: Scheduler, arena: Arena) -> None:
        self._setup(requests, scheduler, arena, requests.log.sharing())
        self.index = index
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
    def _front_end(self, t: float, commit: bool) -> float:
        """When a request that reaches this replica at ``t`` (the latest so far) reaches its
        scheduler: :meth:`StepTimeModel.visible_times` one request at a time."""
        st = self.step_time
        if not st.frontend_service_s:
            return t + st.frontend_s
        start = t if t > self._front_free else self._front_free
        done = start + float(st.frontend_service_s)
        if commit:
            self._front_free = done
        return done + st.frontend_s

    def take(self, i: int) -> None:
        """Request ``i`` is routed here (at its arrival time)."""
        v = self._front_end(float(self.arrival[i]), commit=True)
        self.visible[i] = v
        self.pending.append(i)
        self.outstanding += 1
        self.outstanding_tokens += int(self.prompt[i]) + int(self.sizes[i])
        if self.blocked:  # the engine's empty-plan rule: the clock moves to the next arrival
            self.now = max(self.now, v)
            self.blocked = False

    def _next_visible(self, until: float) -> float:
        """When the next request reaches this replica's scheduler: the next routed here, or
        else the one routed at ``until`` if it came here."""
        if self.pending:
            return float(self.visible[self.pending[0]])
        return self._front_end(until, commit=False) if until < np.inf else np.inf

    def advance(self, until: float) -> None:
        """Run until the clock reaches ``until`` (the next routing time; ``inf``: none left),
        or until nothing can happen before a request is routed here (see the module docstring)."""
        sched, visible, pending = self.scheduler, self.visible, self.pending
        while not self.blocked and self.now < until:
            t0 = time.perf_counter()
            while pending and visible[pending[0]] <= self.now:
                sched.arrive(pending.popleft())
            self.arrive_s += time.perf_counter() - t0
            if not self.running and not sched.n_waiting():
                if not pending:
                    return  # idle until a request is routed here
                self.now = float(visible[pending[0]])
                continue
            mode = sched.steady()
            if mode:
                t_join = self._next_visible(until) if mode == UNTIL_ARRIVAL else np.inf
                if self._stretch(t_join):
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

    def _retire(self, candidates: np.ndarray) -> None:
        finished = candidates[self.seq[candidates] >= self.total[candidates]]  # as Engine._retire finds them
        self.outstanding -= finished.size
        self.outstanding_tokens -= int(self.prompt[finished].sum() + self.sizes[finished].sum())
        super()._retire(candidates)
