"""Batch builders inside vLLM's v1 scheduler (``--scheduler-cls``), by step plans.

``SchedlabPlanScheduler`` runs any schedlab scheduler of the step-plan protocol (a batch
builder: request-level, prefill priority, Sarathi-Serve, RAD of :mod:`schedlab.builders`; paper
C's SLAI and Algorithm 2 of :mod:`schedlab.slai`) on vLLM's own ``Scheduler``. Each step the builder reads a :class:`VllmView` of vLLM's
state (the same fields it reads on schedlab's engine) and returns a plan; vLLM then carries it
out with its own KV cache manager:

- the plan's preemptions go through vLLM's ``_preempt_request`` (recompute);
- running requests the plan leaves out wait this step (``next_decode_eligible_step``, the hook
  vLLM keeps for decode cadences), so SLAI's deferred decodes stay running and keep their KV;
- the waiting queue holds exactly the plan's admissions, in order, and the step's token budget
  is the plan's total, so vLLM's running pass and admission give each request its planned
  tokens (at most one chunk is cut short, and it comes last, as the planner builds it).

When vLLM does something else (its KV manager refuses an allocation and it preempts on its
own, or it schedules other token counts) the step is logged and recorded in ``divergences``,
and the builder plans the next step from vLLM's real state: never a silent divergence.

With vLLM's prefix cache on, the view answers the builder's lookups from vLLM's KV manager (a
waiting request's cached prefix, a running request's blocks no other request holds), as the
pool stood when the step began; vLLM then looks each admission up again at its turn, and
schedules ``min(known - cached, budget left)`` of its tokens: schedlab's engine carries a
builder's plan out the same way (:meth:`schedlab.engine.kv.PrefixBlocks.carry_out`). An admission
vLLM's KV manager refuses waits again at the front of the builder's queue, in its order.

Options come through ``--additional-config '{"schedlab": {"scheduler": "slai-spf-dynamic"}}'``
(batch builders of :mod:`schedlab.registry`; ``"step_log": "<path>"`` logs every step as the
policy scheduler does, :mod:`schedlab.backends.steps.log`); requests carry ``slo_class``,
``tbt_target_s`` (and ``ttft_target_s``) in ``vllm_xargs`` (:mod:`schedlab.validation.hints`).
"""

from __future__ import annotations

import time
from typing import Callable, Iterable, Iterator

import numpy as np
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.request_queue import RequestQueue
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import Request

from schedlab.backends import server_logger
from schedlab.backends.steps.log import StepRecorder
from schedlab.backends.vllm.scheduler import step_composition
from schedlab.engine.arena import EngineConfig
from schedlab.engine.view import EngineView
from schedlab.errors import SchedlabError
from schedlab import registry
from schedlab.compat.vllm import preempt, step_as_planned
from schedlab.validation.hints import checked_slo_hint, plan_options

logger = server_logger(__name__)


class VllmView(EngineView):
    """vLLM's scheduler state as a schedlab scheduler reads an engine, by request index (the
    order requests were added): ``seq`` (known tokens), ``computed``, ``blocks``, ``prompt``,
    ``total``, ``running`` (admission order), ``free`` blocks, the clock ``now``, each request's
    last token time, TBT target and class, and the running mean step time."""

    def __init__(self, block_size: int, capacity_blocks: int, max_num_seqs: int, kv_manager=None) -> None:
        self.limits = EngineConfig(max_num_seqs=max_num_seqs, block_size=block_size,
                                   kv_capacity_blocks=capacity_blocks)
        self.kv = kv_manager  # vLLM's KV manager when its prefix cache is on
        self.prefix_caching = kv_manager is not None
        self.enc_blocks = 0
        self.requests: list[Request] = []
        self.index: dict[str, int] = {}
        self.running: list[int] = []
        self._run_arr: np.ndarray | None = None
        self.free = capacity_blocks
        self.now = 0.0
        self.busy, self.steps = 0.0, 0
        self.n = 0
        size = 64
        self.prompt, self.total, self.seq, self.computed, self.blocks = (np.zeros(size, np.int64) for _ in range(5))
        self.last_tok = np.full(size, np.nan)
        self.target = np.full(size, np.inf)
        self.slo_class = np.full(size, "all", dtype=object)

    def add(self, request: Request, slo_class: str, tbt_target_s: float) -> int:
        i = self.n
        if i == self.prompt.size:
            grow = lambda a, fill: np.concatenate((a, np.full(a.size, fill, a.dtype)))  # noqa: E731
            self.prompt, self.total, self.seq, self.computed, self.blocks = (
                grow(a, 0) for a in (self.prompt, self.total, self.seq, self.computed, self.blocks))
            self.last_tok, self.target = grow(self.last_tok, np.nan), grow(self.target, np.inf)
            self.slo_class = grow(self.slo_class, "all")
        self.requests.append(request)
        self.index[request.request_id] = i
        self.prompt[i] = request.num_prompt_tokens
        self.total[i] = request.num_prompt_tokens + request.max_tokens
        self.seq[i] = request.num_tokens
        self.target[i], self.slo_class[i] = tbt_target_s, slo_class
        self.n += 1
        return i

    def sync(self, i: int) -> None:
        """Request ``i``'s token counts and KV blocks from vLLM."""
        r = self.requests[i]
        self.seq[i] = r.num_tokens_with_spec + r.num_output_placeholders
        self.computed[i] = r.num_computed_tokens
        self.blocks[i] = self.blocks_for(r.num_computed_tokens) if r.num_computed_tokens else 0

    def set_running(self, running: list[int]) -> None:
        self.running = running
        self._run_arr = None

    def cached_prefix(self, i: int) -> tuple[int, int]:
        blocks, n_hit, _ = self.kv.get_computed_blocks(self.requests[i])  # a lookup: nothing changes
        return n_hit, sum(b.ref_cnt == 0 for group in blocks.blocks for b in group)

    def exclusive_blocks(self, v: int) -> int:
        held = self.kv.get_blocks(self.requests[v].request_id).blocks
        return sum(b.ref_cnt == 1 for group in held for b in group)


class PlanQueue(RequestQueue):
    """vLLM's waiting queue over the builder's: arrivals and vLLM's own preemptions go to the
    builder; during a step it yields exactly the plan's admissions."""

    def __init__(self, owner: "PlanMixin") -> None:
        self.owner = owner
        self.admit: list[Request] = []
        self.in_step = False

    def add_request(self, request: Request) -> None:
        self.owner._arrive(request)

    def prepend_request(self, request: Request) -> None:
        self.owner._requeued(request)

    def prepend_requests(self, requests: Iterable[Request]) -> None:
        for request in requests:
            self.prepend_request(request)

    def peek_request(self) -> Request:
        if not self.admit:
            raise IndexError("peek from an empty queue")
        return self.admit[0]

    def pop_request(self) -> Request:
        return self.admit.pop(0)

    def remove_request(self, request: Request) -> None:
        self.remove_requests([request])

    def remove_requests(self, requests: Iterable[Request]) -> None:
        for request in requests:
            self.owner._drop(request)

    def __len__(self) -> int:
        return len(self.admit) if self.in_step else self.owner.builder.n_waiting()

    def __bool__(self) -> bool:
        return len(self) > 0

    def __iter__(self) -> Iterator[Request]:
        view = self.owner.view
        waiting = set(range(view.n)) - set(view.running) - self.owner._done
        return (view.requests[i] for i in sorted(waiting))


class PlanMixin:
    """The step-plan hooks, shared by the synchronous and the asynchronous scheduler."""

    #: Clock of the builder's view (token times, SLAI's deadlines); the virtual-clock driver
    #: replaces it.
    clock: Callable[[], float] = staticmethod(time.time)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        opts = plan_options(self.vllm_config.additional_config)
        entry = registry.entry(opts.scheduler, registry.BATCH)
        self.name = opts.scheduler
        capacity = self.kv_cache_manager.block_pool.get_num_free_blocks()
        self.view = VllmView(self.cache_config.block_size, capacity, self.max_num_running_reqs,
                             self.kv_cache_manager if self.cache_config.enable_prefix_caching else None)
        # A builder that needs the whole trace in advance is handed over by an in-process
        # driver (vllm-sim) before the first request; a served engine refuses its requests.
        self.builder = None
        self._unset = (f"scheduler {opts.scheduler!r} needs the run's {' and '.join(entry.needs)}: "
                       "it runs on sim and vllm-sim only")
        if not entry.needs:
            self.use_builder(entry.make())
        self.waiting = PlanQueue(self)
        self._done: set[int] = set()
        self._planned_preemption = False
        self._step_started: float | None = None
        #: Steps where vLLM did not carry the plan out exactly: (step, planned, scheduled).
        self.divergences: list[tuple[int, dict, dict]] = []
        self.step_log = StepRecorder(opts.step_log) if opts.step_log else None

    def use_builder(self, builder) -> None:
        """Plan with ``builder`` (before any request is added)."""
        self.builder = builder
        builder.bind(self.view)

    def _kv_free(self) -> int:
        """Free KV blocks, as vLLM's block pool counts them."""
        return self.kv_cache_manager.block_pool.get_num_free_blocks()

    # -- the queue's callbacks ---------------------------------------------------------------
    def _arrive(self, request: Request) -> None:
        if self.builder is None:
            raise SchedlabError(self._unset)
        params = request.sampling_params
        try:
            hint = checked_slo_hint(params.extra_args if params else None)
        except SchedlabError as e:
            logger.warning("request %s: %s; served in class 'all' with no target", request.request_id, e)
            hint = checked_slo_hint(None)
        target = hint.tbt_target_s if hint.tbt_target_s is not None else np.inf
        self.builder.arrive(self.view.add(request, hint.slo_class, target))

    def _requeued(self, request: Request) -> None:
        i = self.view.index[request.request_id]
        self.view.sync(i)
        if not self._planned_preemption:  # vLLM preempted on its own: the builder learns it here
            logger.warning("%s: vLLM preempted request %s outside the plan", self.name, request.request_id)
            self.view.set_running([r for r in self.view.running if r != i])
            self.builder.requeue(i)

    def _drop(self, request: Request) -> None:
        i = self.view.index.get(request.request_id)
        if i is not None and i not in self.view.running and i not in self._done:
            self.builder.drop(i)
            self._done.add(i)

    def add_request(self, request: Request) -> None:
        super().add_request(request)
        if self.step_log is not None:
            self.step_log.added(request.request_id)

    # -- one step ----------------------------------------------------------------------------
    def schedule(self, *args, **kwargs):
        wall = time.time()
        view = self.view
        view.now = self.clock()
        gone = [i for i in view.running if view.requests[i].is_finished()]  # aborted between steps
        if gone:
            self._done.update(gone)
            view.set_running([i for i in view.running if i not in self._done])
        for i in view.running:
            view.sync(i)
        view.free = self._kv_free()
        plan = self.builder.schedule()
        while plan.preempted:
            self._preempt(plan.preempted)
            if plan.n_scheduled:
                break
            plan = self.builder.schedule()  # a plan that only preempted: plan again at once
        requests = view.requests
        planned = {requests[i].request_id: int(t) for i, t in zip(plan.requests.tolist(), plan.tokens.tolist())}
        chosen = set(planned)
        held = [requests[i] for i in view.running if requests[i].request_id not in chosen]
        self.waiting.admit = [requests[i] for i in plan.admitted]
        self.waiting.in_step = True
        try:
            with step_as_planned(self, sum(planned.values()), held):
                out = super().schedule(*args, **kwargs)
        finally:
            self.waiting.in_step = False
        started = [i for i in plan.admitted if requests[i].status.name == "RUNNING"]
        view.set_running([i for i in view.running if requests[i].status.name == "RUNNING"] + started)
        refused = [i for i in plan.admitted if i not in started]
        for i in reversed(refused):  # back to the front of the builder's queue, in order
            self.builder.requeue(i)
        if view.prefix_caching:
            # an admission's tokens follow vLLM's own lookup at its turn (the plan saw the pool
            # as the step began): the plan is what vLLM was asked for, less those chunks' sizes
            for i in started:
                rid = requests[i].request_id
                if rid in out.num_scheduled_tokens and rid in planned:
                    planned[rid] = out.num_scheduled_tokens[rid]
            for i in refused:
                planned.pop(requests[i].request_id, None)
        if dict(out.num_scheduled_tokens) != planned:
            self.divergences.append((self.current_step, planned, dict(out.num_scheduled_tokens)))
            logger.warning("%s: step %d ran %s instead of the plan %s", self.name, self.current_step,
                           dict(out.num_scheduled_tokens), planned)
        self._step_started = view.now
        self.last_output = out
        self.last_composition = step_composition(self, out)
        if self.step_log is not None:  # the queues as the step starts, as the policy scheduler logs them
            self.step_log.scheduled(out, wall, self.last_composition, len(self.running), len(self.waiting))
        return out

    def _preempt(self, victims: list[int]) -> None:
        """The plan's preemptions, through vLLM's own routine."""
        view, gone = self.view, set(victims)
        self._planned_preemption = True
        try:
            for i in victims:
                request = view.requests[i]
                self.running.remove(request)
                preempt(self, request)
        finally:
            self._planned_preemption = False
        view.set_running([i for i in view.running if i not in gone])
        view.free = self._kv_free()

    def update_from_output(self, scheduler_output, model_runner_output):
        before = {i: self.view.requests[i].num_output_tokens for i in self.view.running}
        result = super().update_from_output(scheduler_output, model_runner_output)
        view, now = self.view, self.clock()
        if self._step_started is not None and scheduler_output.total_num_scheduled_tokens:
            view.busy += now - self._step_started
            view.steps += 1
        self._step_started = None
        for i, count in before.items():
            r = view.requests[i]
            view.sync(i)
            if r.num_output_tokens > count:
                view.last_tok[i] = now
            if r.is_finished():
                self._done.add(i)
                view.blocks[i] = 0
        view.set_running([i for i in view.running if i not in self._done])
        if self.step_log is not None:
            self.step_log.updated(scheduler_output, result, self.has_unfinished_requests())
        return result

    def shutdown(self) -> None:
        if self.step_log is not None:
            self.step_log.flush()
        super().shutdown()


class SchedlabPlanScheduler(PlanMixin, Scheduler):
    """For engines with synchronous scheduling (vLLM's CPU build; ``--no-async-scheduling``)."""


class SchedlabPlanAsyncScheduler(PlanMixin, AsyncScheduler):
    """For engines with asynchronous scheduling (vLLM's default on GPU): the builder plans a
    step while the previous one runs, seeing its tokens as vLLM's output placeholders."""
