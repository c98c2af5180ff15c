"""schedlab policies inside vLLM's v1 scheduler (``--scheduler-cls``).

``SchedlabScheduler`` is vLLM's own ``Scheduler`` with two changes: its waiting queue is a
schedlab policy, and under memory pressure it preempts the policy's victim. Options come
through ``--additional-config '{"schedlab": {"policy": "sjf", "kappa": {"en": 2.96}}}'``;
requests carry ``audio_duration_s`` (and ``language``; ``speech_duration_s``, a VAD's
speech-active time, takes precedence when sent) in ``SamplingParams.extra_args``
(``vllm_xargs`` on the OpenAI endpoints), checked once per request
(:mod:`schedlab.validation.hints`). Without a duration, or with a bad hint (logged once), a
job's size is its max_tokens.

The victim rule uses vLLM's priority path: with ``SchedulingPolicy.PRIORITY`` vLLM preempts
``max(running, key=(priority, arrival_time))``, so before each step the running requests are
ranked by the policy's ``victim_key``. Policies without a key keep vLLM's default (the newest).
A policy that preempts at step boundaries (``Policy.preempt``) is asked first, as each
``schedule()`` starts, and the requests it names go through vLLM's own preemption.

A job reads its request's state from vLLM's ``Request`` (:class:`VllmState`): tokens generated
and computed, preemptions, its KV blocks from vLLM's KV manager, the time of its first token
(kept as each step's output is taken in), and the fields of its ``vllm_xargs``
(:mod:`schedlab.validation.request_fields`, and its ``slo_class``).

With ``"step_log": "<path>"`` in the same section, every step that runs the model is logged
(its composition and wall-clock time stamps), and every finished request (when it reached the
scheduler, was first scheduled and finished; :mod:`schedlab.backends.steps.log`).
"""

from __future__ import annotations

import time
from functools import partial
from typing import Callable, Iterable, Iterator

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.request_queue import RequestQueue, SchedulingPolicy
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import Request, RequestStatus

from schedlab.backends import server_logger
from schedlab.backends.steps.log import StepRecorder
from schedlab.errors import SchedlabError
from schedlab.estimate import size_estimate
from schedlab import registry
from schedlab.compat.vllm import job_of, keep_job, kept, preempt
from schedlab.policies import Job, Policy
from schedlab.policies.base import RequestState
from schedlab.policies.contract import CheckedQueue
from schedlab.validation.hints import checked_hint, checked_slo_hint, server_options
from schedlab.validation.request_fields import RequestFields, checked_fields

logger = server_logger(__name__)


def step_composition(sched, out) -> tuple[int, int, int, int, int]:
    """``(n_encoder, n_prefill_tokens, n_decode, ctx_tokens, prefill_pairs)`` of a step just
    scheduled, as schedlab's engine counts them (:func:`schedlab.engine.kernels.apply`).

    A decode is one token that completes a request's known tokens after its first output;
    ``schedule()`` has already advanced ``num_computed_tokens``, so a decode's context is it,
    and a chunk of ``k`` tokens started at ``num_computed_tokens - k``.
    """
    n_pre = n_dec = ctx = pairs = 0
    for rid, k in out.num_scheduled_tokens.items():
        r = sched.requests[rid]
        if k == 1 and r.num_output_tokens >= 1 and r.num_computed_tokens == r.num_tokens:
            n_dec += 1
            ctx += r.num_computed_tokens
        else:
            n_pre += k
            pairs += k * (r.num_computed_tokens - k) + k * (k + 1) // 2
    n_enc = sum(len(v) for v in out.scheduled_encoder_inputs.values())
    return n_enc, n_pre, n_dec, ctx, pairs


def _uncached(kv_cache_manager, request: Request) -> int:
    """A waiting request's known tokens less the prefix vLLM's KV manager would find cached
    (a lookup: nothing changes)."""
    return request.num_tokens - kv_cache_manager.get_computed_blocks(request)[1]


class PolicyQueue(RequestQueue):
    """vLLM's ``RequestQueue`` over a schedlab policy, called through
    :class:`~schedlab.policies.contract.CheckedQueue` (``queue``: every answer checked; a job's
    handle is the vLLM request it was made for).

    ``pop_request`` returns what the last ``peek_request`` showed (evaluated at the same clock
    reading), so time-dependent policies such as HRRN keep vLLM's peek/pop contract.
    """

    def __init__(self, policy: Policy, job_of: Callable[[Request], Job], clock: Callable[[], float]):
        self.policy, self.job_of, self.clock = policy, job_of, clock
        self.queue = CheckedQueue(policy, _owner)
        self._peeked_at: float | None = None

    def add_request(self, request: Request) -> None:
        self._peeked_at = None
        self.queue.push(self.job_of(request))

    def peek_request(self) -> Request:
        if not self.queue:
            raise IndexError("peek from an empty queue")
        self._peeked_at = self.clock()
        return self.queue.peek(self._peeked_at).ref

    def pop_request(self) -> Request:
        now = self.clock() if self._peeked_at is None else self._peeked_at
        self._peeked_at = None
        return self.queue.pop(now).ref

    def prepend_request(self, request: Request) -> None:
        self.add_request(request)

    def prepend_requests(self, requests: Iterable[Request]) -> None:
        for request in requests:
            self.add_request(request)

    def remove_request(self, request: Request) -> None:
        self.remove_requests([request])

    def remove_requests(self, requests: Iterable[Request]) -> None:
        self._peeked_at = None
        drop = {id(r) for r in requests}
        for job in [j for j in self.queue if id(j.ref) in drop]:
            self.queue.remove(job)

    def __bool__(self) -> bool:
        return bool(self.queue)

    def __len__(self) -> int:
        return len(self.queue)

    def __iter__(self) -> Iterator[Request]:
        return (job.ref for job in self.queue)


def _owner(job: Job) -> Job | None:
    """The job made for the request ``job.ref`` names (:func:`job_of`; None for another handle)."""
    return job_of(job.ref)


class VllmState(RequestState):
    """vLLM's requests as a policy reads them through its jobs (handle: the ``Request``)."""

    def __init__(self, scheduler) -> None:
        self.scheduler = scheduler

    def generated_tokens(self, request: Request) -> int:
        return request.num_output_tokens

    def computed_tokens(self, request: Request) -> int:
        return request.num_computed_tokens

    def preemptions(self, request: Request) -> int:
        return request.num_preemptions

    def kv_blocks(self, request: Request) -> int:
        if request.status != RequestStatus.RUNNING:  # popped, its admission's blocks are taken before it runs
            return 0
        return sum(len(group) for group in self.scheduler.kv_cache_manager.get_blocks(request.request_id).blocks)

    def first_token_s(self, request: Request) -> float:
        found = kept(request, "first_token_s")
        return float("nan") if found is None else found

    def finished(self, request: Request) -> bool:
        return request.is_finished()

    def slo_class(self, request: Request) -> str:
        return kept(request, "slo_class", _slo_class)

    def tenant(self, request: Request) -> str:
        return kept(request, "fields", _fields).tenant

    def deadline_s(self, request: Request) -> float:
        target = kept(request, "fields", _fields).e2e_target_s
        return float("inf") if target is None else request.arrival_time + target

    def predicted_tokens(self, request: Request) -> float:
        predicted = kept(request, "fields", _fields).predicted_output_tokens
        return float("nan") if predicted is None else predicted


def _xargs(request: Request):
    return request.sampling_params.extra_args if request.sampling_params else None


def _slo_class(request: Request) -> str:
    """The request's SLO class from its hints (``all`` without one, or with a bad one)."""
    try:
        return checked_slo_hint(_xargs(request)).slo_class
    except SchedlabError:
        return "all"


def _fields(request: Request) -> RequestFields:
    """The request's policy-readable fields; a bad one is logged and the request keeps none."""
    try:
        return checked_fields(_xargs(request))
    except SchedlabError as e:
        logger.warning("request %s: %s; it carries no tenant, deadline or predicted length", request.request_id, e)
        return RequestFields()


class _Unset(Policy):
    """The waiting queue of a server whose policy needs what only an in-process driver gives
    it (the whole trace): every request is refused with that reason."""

    def __init__(self, name: str, needs: tuple[str, ...]) -> None:
        self.reason = f"scheduler {name!r} needs the run's {' and '.join(needs)}: it runs on sim and vllm-sim only"

    def push(self, job) -> None:
        raise SchedlabError(self.reason)

    def peek(self, now):
        raise SchedlabError(self.reason)

    pop = peek

    def remove(self, job) -> None:
        pass

    def __iter__(self):
        return iter(())

    def __len__(self) -> int:
        return 0


class SchedlabMixin:
    """The policy hooks, shared by the synchronous and the asynchronous scheduler."""

    #: Clock of the policy's waiting times; the virtual-clock driver replaces it.
    clock: Callable[[], float] = staticmethod(time.time)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        opts = server_options(self.vllm_config.additional_config)
        entry = registry.entry(opts.policy, registry.QUEUE)
        self.kappa: dict[str, float] = dict(opts.kappa)
        self.allow_client_priority = opts.allow_client_priority
        self._next_id = 0
        self._step_now: float | None = None
        self.step_log = StepRecorder(opts.step_log) if opts.step_log else None
        self._state = VllmState(self)
        # A policy that needs the whole trace in advance is handed over by an in-process
        # driver (vllm-sim) before the first request; a served engine cannot run it.
        self.use_policy(entry.make() if not entry.needs else _Unset(opts.policy, entry.needs))

    def use_policy(self, policy: Policy) -> None:
        """Run ``policy`` as the waiting queue (before any request is added)."""
        self.schedlab_policy = policy
        self.waiting = PolicyQueue(policy, self._job, self._policy_clock)
        if policy.ranks_victims:
            self.policy = SchedulingPolicy.PRIORITY

    def _job(self, request: Request) -> Job:
        """The request's job, made once (ids in order of first sight) and kept on the request."""
        job = job_of(request)
        if job is None:
            job = keep_job(request, Job(self._next_id, request.arrival_time, self._size(request),
                                        request.num_prompt_tokens, request, state=self._state))
            if self.cache_config.enable_prefix_caching and self.schedlab_policy.reads_cache:
                job.uncached = partial(_uncached, self.kv_cache_manager, request)
            self._next_id += 1
        return job

    def _size(self, request: Request) -> float:
        """The job size from the request's hints; a bad hint is logged (once: the job is kept)
        and the size falls back to max_tokens, so no client can break a step."""
        params = request.sampling_params
        try:
            hint = checked_hint(params.extra_args if params else None, allow_priority=self.allow_client_priority)
        except SchedlabError as e:
            logger.warning("request %s: %s; sized by its max_tokens", request.request_id, e)
            hint = {}
        return size_estimate(hint, self.kappa, request.max_tokens)

    def _policy_clock(self) -> float:
        """One clock reading per ``schedule()`` call, as on the sim engine (EWSJF starts a new
        batch when the reading moves); the live clock between steps."""
        return self.clock() if self._step_now is None else self._step_now

    def add_request(self, request: Request) -> None:
        super().add_request(request)
        if self.step_log is not None:
            self.step_log.added(request.request_id)

    def schedule(self, *args, **kwargs):
        wall = time.time()
        self._step_now = now = self.clock()
        try:
            queue = self.waiting.queue
            if queue.preempts and self.running:
                chosen = queue.preempt([self._job(r) for r in self.running], now,
                                       self.max_num_running_reqs - len(self.running))
                for job in chosen:  # through vLLM's own preemption: back to the waiting queue
                    self.running.remove(job.ref)
                    preempt(self, job.ref)
            if self.schedlab_policy.ranks_victims and self.running:
                key = self.waiting.queue.victim_key
                ranked = sorted(self.running, key=lambda r: key(self._job(r), now))
                for rank, request in enumerate(ranked):
                    request.priority = rank
            # Read by in-process drivers (vllm-sim, engine replay, profiling).
            self.last_output = super().schedule(*args, **kwargs)
        finally:
            self._step_now = None
        self.last_composition = step_composition(self, self.last_output)
        if self.step_log is not None:
            self.step_log.scheduled(self.last_output, wall, self.last_composition, len(self.running), len(self.waiting))
        return self.last_output

    def update_from_output(self, scheduler_output, model_runner_output):
        # the requests of the step that had no output yet (a finished one leaves self.requests)
        first = [r for r in map(self.requests.get, scheduler_output.num_scheduled_tokens)
                 if r is not None and not r.num_output_tokens]
        outputs = super().update_from_output(scheduler_output, model_runner_output)
        now = self.clock()
        for request in first:
            if request.num_output_tokens:
                kept(request, "first_token_s", lambda _: now)
        if self.step_log is not None:
            self.step_log.updated(scheduler_output, outputs, self.has_unfinished_requests())
        return outputs

    def shutdown(self) -> None:
        if self.step_log is not None:
            self.step_log.flush()
        super().shutdown()


class SchedlabScheduler(SchedlabMixin, Scheduler):
    """For engines with synchronous scheduling (vLLM's CPU build; ``--no-async-scheduling``)."""


class SchedlabAsyncScheduler(SchedlabMixin, AsyncScheduler):
    """For engines with asynchronous scheduling (vLLM's default on GPU)."""
