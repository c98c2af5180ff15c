"""Continuous batching with a waiting-queue policy: vLLM v1's scheduler.

Each step first preempts the running requests the policy names at the step boundary, if it
names any (:meth:`~schedlab.policies.base.Policy.preempt`, as vLLM's scheduler class does
before its pass), then serves the running requests in admission order, each given what it needs
(one decode token, the next prefill chunk, or recompute after preemption) within the token
budget, preempting the policy's victims while KV blocks run short; if that preempted nothing
it then admits waiting requests in the policy's order while the sequence, token, encoder and
KV budgets allow. Papers A, B and D's policies (:class:`~schedlab.policies.base.Policy`) plug
in here, called through :class:`~schedlab.policies.contract.CheckedQueue` (every answer
checked); ``sim`` and ``vllm-sim`` give identical per-request times for them.
"""

from __future__ import annotations

import time
from functools import partial

import numpy as np

from schedlab.engine import kernels
from schedlab.engine.plan import Planner, StepPlan
from schedlab.engine.requests import EngineState
from schedlab.engine.scheduler import NOT_STEADY, UNTIL_ARRIVAL, UNTIL_COMPLETION, Scheduler
from schedlab import registry
from schedlab.policies.base import Job, Policy
from schedlab.policies.contract import CheckedQueue


def _uncached(engine, i: int) -> int:
    """Waiting request ``i``'s known tokens less the prefix its admission would find cached."""
    return int(engine.seq[i]) - engine.cached_prefix(i)[0]


class ContinuousBatching(Scheduler):
    """vLLM v1's scheduler around ``policy``, with the engine's limits as its budgets."""

    #: This planner's calls are vLLM's scheduling pass (running requests, then admissions).
    interleaved_kv = True

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.name = policy.name
        self.overhead_s = 0.0
        self.queue = CheckedQueue(policy, self._owner)

    def describe(self) -> str:
        return registry.describe(self.policy)

    def bind(self, engine) -> None:
        super().bind(engine)
        e = engine
        self._rid = e.trace["request_id"].to_numpy(np.int64)
        self._reads_cache = e.prefix_caching and self.policy.reads_cache
        self._state = EngineState(e)
        # each request's Job, made when it arrives: a run of 100,000 requests would otherwise
        # spend a noticeable share of its time making them up front, and a replica of a cluster
        # makes only those of the requests routed to it
        self.jobs: dict[int, Job] = {}

    def _owner(self, job: Job) -> Job | None:
        """The job this scheduler made for the request ``job.ref`` names (None: no request)."""
        return self.jobs.get(job.ref)

    def arrive(self, i: int) -> None:
        e = self.engine
        job = self.jobs[i] = Job(int(self._rid[i]), float(e.arrival[i]), float(e.sizes[i]), int(e.prompt[i]), i,
                                 state=self._state)
        if self._reads_cache:  # it asks what an admission would compute now
            job.uncached = partial(_uncached, e, i)
        self.queue.push(job)  # timed by the engine

    def requeue(self, i: int) -> None:
        t0 = time.perf_counter()
        self._state.preempting.add(i)
        self.queue.push(self.jobs[i])
        self.overhead_s += time.perf_counter() - t0

    def n_waiting(self) -> int:
        return len(self.queue)

    def victim(self, running: list[int]) -> int:
        return self.queue.victim([self.jobs[x] for x in running], self.engine.now).ref

    def steady(self) -> int:
        if self.queue.preempts:  # it may preempt at any step boundary
            return NOT_STEADY
        run, n_dec, _, _, _ = self.engine.running_totals()
        lim = self.engine.limits
        if run.size == 0 or run.size > lim.max_num_batched_tokens or n_dec != run.size:
            return NOT_STEADY
        full = run.size >= lim.max_num_seqs
        if len(self.queue) and not full:
            return NOT_STEADY
        return UNTIL_COMPLETION if full else UNTIL_ARRIVAL

    def _boundary_victims(self) -> list[int]:
        """The running requests the policy preempts at this step boundary."""
        e = self.engine
        if not e.running:
            return []
        t0 = time.perf_counter()
        chosen = self.queue.preempt([self.jobs[i] for i in e.running], e.now, e.limits.max_num_seqs - len(e.running))
        self.overhead_s += time.perf_counter() - t0
        return [job.ref for job in chosen]

    def schedule(self) -> StepPlan:
        e, lim = self.engine, self.engine.limits
        self._state.preempting.clear()  # the last step is carried out
        run, _, _, want, grow = e.running_totals()
        plan = Planner(e, self, lim.max_num_batched_tokens)
        victims = self._boundary_victims() if self.queue.preempts else ()
        for v in victims:
            plan.preempt(v, at_boundary=True)
        if victims:
            # the running requests left, one by one, as vLLM's pass serves them
            for r in list(plan.alive):
                if plan.budget <= 0:
                    break
                if r not in plan.preempted and not plan.take(r, min(int(e.seq[r] - e.computed[r]), plan.budget)):
                    break
        elif want <= plan.budget and grow <= plan.free:
            # every running request gets all it needs: nothing to decide, nothing preempted
            plan.take_many(run, e.wants[: run.size], grow, want)
        else:
            # the leading requests that need no preemption at once, then one by one from the
            # first whose blocks run short (the same pass, request by request)
            k, tokens, blocks, n_tokens = kernels.serve_in_order(run, e.seq, e.computed, e.blocks, e.enc_blocks,
                                                                 lim.block_size, plan.free, plan.budget)
            plan.take_many(run[:k], tokens, blocks, n_tokens)
            for r in e.running[k:]:
                if plan.budget <= 0:
                    break
                if r not in plan.preempted and not plan.take(r, min(int(e.seq[r] - e.computed[r]), plan.budget)):
                    break
        policy, now, clock = self.queue, e.now, time.perf_counter
        # As in vLLM, a step whose pass preempted does not look at the waiting queue at all (a
        # policy's peek may change its state: a new EWSJF batch, a new slo-sa decision).
        while not plan.preempted_in_pass and len(policy) and plan.budget > 0 and plan.n_running < lim.max_num_seqs:
            t0 = clock()
            job = policy.peek(now)
            spent = clock() - t0
            if not plan.can_admit(job.ref):
                self.overhead_s += spent
                break
            t0 = clock()
            policy.pop(now)
            self.overhead_s += spent + clock() - t0
            plan.admit(job.ref, min(int(e.seq[job.ref]), plan.budget))
        return plan.plan()
