"""schedlab's queue policies inside transformers' continuous batching (``transformers serve``'s
engine), and the record every scheduler class keeps of the steps it schedules.

:class:`PolicyScheduler` is a scheduler class of transformers' engine: its running requests
are transformers' (FIFO: decoding requests, then split prefills; or prefill-first), its waiting
requests a registered queue policy's, offered one at a time as transformers' scheduling pass
reaches them (:class:`~schedlab.builders.transformers_batching.PolicyWaiting`, the same protocol
the ``sim`` builder uses). Budgets, KV allocation, the safety margin and soft resets stay
transformers' own. Works with transformers 5.17 and 5.19: it only builds the candidates that
the base class's ``_process_candidates`` schedules.

:class:`Recorder` keeps, for any scheduler class (:func:`recorded`): each step's composition
as schedlab's engine counts it (:data:`~schedlab.backends.steps.log.RAW_COLUMNS`), when each
request was added and first scheduled, and how often it was soft-reset (preempted).
:func:`scheduler_factory` makes the callable transformers' engine builds its scheduler with
(``SCHEDULER_MAPPING``, :func:`installed`).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import chain

from transformers.generation.continuous_batching.requests import RequestStatus
from transformers.generation.continuous_batching.scheduler import (
    SCHEDULER_MAPPING,
    FIFOScheduler,
    PrefillFirstScheduler,
    Scheduler,
)

from schedlab.builders.transformers_batching import FIFO, PREFILL_FIRST, SAFETY_MARGIN, PolicyWaiting, check_order
from schedlab.policies.base import Job, Policy

#: The name schedlab's scheduler classes are built under in transformers' ``SCHEDULER_MAPPING``.
SCHEDULER_TYPE = "schedlab"
#: transformers' own scheduler class of each order.
NATIVE = {FIFO: FIFOScheduler, PREFILL_FIRST: PrefillFirstScheduler}


def composition(batch) -> tuple[int, int, int, int, int]:
    """A scheduled batch (transformers' ``FutureRequestState`` list, before its forward pass
    moves the requests' positions) as schedlab's engine counts a step: encoder inputs (none),
    prefill tokens, decodes (one token of a request whose generated sequence is otherwise in
    the cache) and their summed context, and the prefill chunks' attention pairs."""
    n_pre = n_dec = ctx = pairs = 0
    for fs in batch:
        state, n = fs.state, fs.query_length
        past = state.position_offset
        known = len(state.initial_tokens) + len(state.generated_tokens)
        prompt = state._true_initial_tokens or len(state.initial_tokens)
        if n == 1 and known > prompt and past + 1 == known:
            n_dec += 1
            ctx += known
        else:
            n_pre += n
            pairs += n * past + n * (n + 1) // 2
    return 0, n_pre, n_dec, ctx, pairs


@dataclass
class Recorder:
    """What the scheduler saw, on ``clock`` (seconds): one row per scheduled step (its time,
    composition, requests scheduled, running and waiting; ``t_update`` and ``busy_after``
    are filled by :meth:`updated`), and per request id the time it was first added and first
    scheduled and its soft resets."""

    clock: Callable[[], float]
    steps: list[list] = field(default_factory=list)
    added: dict[str, float] = field(default_factory=dict)
    first_scheduled: dict[str, float] = field(default_factory=dict)
    resets: dict[str, int] = field(default_factory=dict)

    def add(self, request_id: str) -> None:
        if request_id in self.added:
            self.resets[request_id] = self.resets.get(request_id, 0) + 1
        else:
            self.added[request_id] = self.clock()

    def step(self, t: float, batch, was_waiting: set[str], n_running: int, n_waiting: int) -> None:
        for fs in batch:
            if fs.state.request_id in was_waiting:
                self.first_scheduled.setdefault(fs.state.request_id, t)
        self.steps.append([t, float("nan"), *composition(batch), len(batch), n_running, n_waiting, True])

    def updated(self, busy_after: bool) -> None:
        """The last scheduled step's outputs are handled (transformers' ``update_batch``)."""
        if self.steps and math.isnan(self.steps[-1][1]):  # not updated yet
            self.steps[-1][1] = self.clock()
            self.steps[-1][-1] = busy_after


class _Recording:
    """A scheduler class that reports to ``recorder`` every request added and step scheduled."""

    recorder: Recorder

    def add_waiting_request(self, state) -> None:
        super().add_waiting_request(state)
        self.recorder.add(state.request_id)

    def schedule_batch(self, token_budget: int, cache_budget: int):
        t = self.recorder.clock()
        was_waiting = set(self.waiting_requests)
        out = super().schedule_batch(token_budget, cache_budget)
        if out[0]:
            self.recorder.step(t, out[0], was_waiting, len(self.active_requests), len(self.waiting_requests))
        return out


class PolicyScheduler(Scheduler):
    """transformers' scheduler around ``policy``: running requests in ``order``'s priority,
    then the waiting ones in the policy's order (see the module docstring). ``job(request_id)``
    gives a request's ``(request_id, arrival_s, size, prompt_tokens)`` for its :class:`Job`;
    ``now()`` the clock the policy reads."""

    def __init__(self, cache, safety_margin: float | None, max_requests_per_batch: int, *, policy: Policy,
                 order: str, job: Callable[[str], tuple], now: Callable[[], float]) -> None:
        self.policy, self.order, self.job, self.now = policy, order, job, now
        self.waiting_jobs = PolicyWaiting(policy)
        self.jobs: dict[str, Job] = {}
        super().__init__(cache, SAFETY_MARGIN[order] if safety_margin is None else safety_margin,
                         max_requests_per_batch)

    def add_waiting_request(self, state) -> None:
        super().add_waiting_request(state)
        job = self.jobs.get(state.request_id)
        if job is None:
            job = self.jobs[state.request_id] = Job(*self.job(state.request_id), ref=state)
        job.ref = state  # a soft-reset request comes back as a new state
        self.policy.push(job)

    def schedule_batch(self, token_budget: int, cache_budget: int):
        decoding, prefilling = [], []
        for state in self.active_requests.values():
            if state.status == RequestStatus.DECODING:
                decoding.append(state)
            elif state.status == RequestStatus.PREFILLING:
                prefilling.append(state)
        running = decoding + prefilling if self.order == FIFO else prefilling + decoding
        now = self.now()
        waiting = self.waiting_requests
        if self.block_new_requests:
            candidates = ()
        else:
            alive = (lambda job: waiting.get(job.ref.request_id) is job.ref)  # cancelled ones are dropped
            candidates = (job.ref for job in self.waiting_jobs.candidates(now, alive))
        removed: set[str] = set()
        batch, failed, fast_path, n_q, n_kv = self._process_candidates(chain(running, candidates), token_budget,
                                                                       cache_budget, removed)
        self.waiting_jobs.restore(now, lambda job: job.ref.request_id in waiting)
        self._cleanup_waiting_queue(removed)
        if not batch and failed:
            return None, fast_path, 0, 0
        return batch, fast_path, n_q, n_kv


def recorded(cls: type) -> type:
    """``cls`` reporting to a :class:`Recorder` (its instances' ``recorder``)."""
    return type(f"Recorded{cls.__name__}", (_Recording, cls), {})


def scheduler_factory(order: str, recorder: Recorder, policy: Policy | None = None,
                      job: Callable[[str], tuple] | None = None) -> Callable:
    """The callable transformers' engine builds its scheduler with (``cache``,
    ``safety_margin``, ``max_requests_per_batch``): its own class of ``order``, or
    :class:`PolicyScheduler` around ``policy``, reporting to ``recorder``."""
    check_order(order)

    def make(cache, safety_margin, max_requests_per_batch):
        if policy is None:
            sched = recorded(NATIVE[order])(cache, safety_margin, max_requests_per_batch)
        else:
            sched = recorded(PolicyScheduler)(cache, safety_margin, max_requests_per_batch, policy=policy,
                                              order=order, job=job, now=recorder.clock)
        sched.recorder = recorder
        return sched

    return make


@contextlib.contextmanager
def installed(factory: Callable):
    """``factory`` as transformers' scheduler type :data:`SCHEDULER_TYPE` while the engine
    builds its batch processor."""
    SCHEDULER_MAPPING[SCHEDULER_TYPE] = factory
    try:
        yield SCHEDULER_TYPE
    finally:
        SCHEDULER_MAPPING.pop(SCHEDULER_TYPE, None)
