"""The engine: request state, paged KV, recompute preemption, the clock, and the run loop.

Per-request state lives in numpy arrays by trace position: ``seq`` (prompt + tokens
generated), ``computed`` (tokens whose KV is written) and ``blocks`` (KV blocks held,
Whisper's cross-attention included). A request needs ``seq - computed`` tokens before its
next token, so prefill chunks, decodes and recompute after preemption are one rule. Each
step the scheduler returns a plan (:mod:`.plan`); the engine preempts what it names, admits
what it starts, writes the scheduled tokens' KV, advances the clock by the step-time model
applied to the step's composition (encoder inputs, prefill tokens and their attention pairs,
decodes and their context), and emits one token for every request whose known tokens are
all computed. Requests become visible to the scheduler ``frontend_s`` after they arrive.

When the scheduler declares the coming steps fixed (:meth:`Scheduler.steady`) and every
running request decodes, the engine runs them in closed form up to the next completion,
arrival (if it matters), timeline sample or KV-block shortage.

The KV blocks are a :class:`~schedlab.engine.kv.BlockManager`, chosen when the engine is built:
a count (the paged allocator) or, with prefix caching on and a trace that says which prompts
share tokens, vLLM's block pool, where ``free`` counts the evictable cached blocks too, an
admitted request starts with its cached prefix computed, and blocks are taken, cached,
released and evicted in vLLM's order. The engine tells it what each step does and reads back
the free blocks (``free``, which the schedulers read).

The loop guards its progress: a plan that computes nothing and preempts nothing moves the
clock to the next arrival, and with none left the run fails as stalled.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from schedlab import progress
from schedlab.engine import kernels
from schedlab.engine.arena import Arena, EngineConfig
from schedlab.engine.gaps import GapHistogram
from schedlab.engine.plan import StepPlan
from schedlab.engine.kv import block_manager
from schedlab.engine.scheduler import UNTIL_ARRIVAL, Scheduler
from schedlab.engine.view import EngineView
from schedlab.errors import SchedlabError
from schedlab.engine.log import RequestLog
from schedlab.engine.requests import Requests

TIMELINE_COLUMNS = ("t_s", "kv_frac", "waiting", "running")
STEP_LOG_COLUMNS = ("start_s", "dt_s", "prefill_tokens", "n_decode", "n_chunks", "n_running", "kv_blocks")


@dataclass
class RunResult:
    """One run: the per-request table, the measured token gaps (all, and per request class),
    and engine figures. ``timeline`` samples KV use and queue lengths every ``sample_s``;
    ``step_log`` and ``token_times`` are kept when the run was recorded. ``prefix_cache``
    (runs with a prefix cache) counts the tokens looked up and found at admissions: first
    admissions (what vLLM's ``prefix_cache_queries``/``_hits`` counters count) and the
    re-admissions of preempted requests."""

    requests: pd.DataFrame
    gaps: GapHistogram
    class_gaps: dict[str, GapHistogram]
    steps: int
    busy_s: float
    peak_kv_blocks: int
    kv_capacity_blocks: int
    sched_overhead_s: float
    wall_s: float
    timeline: pd.DataFrame | None = None
    step_log: pd.DataFrame | None = None
    token_times: list | None = field(default=None, repr=False)
    prefix_cache: dict | None = None

    @property
    def peak_kv_frac(self) -> float:
        return self.peak_kv_blocks / self.kv_capacity_blocks


def check_servable(trace: pd.DataFrame, limits: EngineConfig, max_tokens: int | None = None) -> None:
    """The engine's own guard (the boundary's full checks are :mod:`schedlab.validation`'s):
    fail clearly on a trace no engine can serve, whose clock could not advance (arrivals not
    finite, non-negative and sorted), with a token count below 1, or with a request that cannot
    fit in the KV cache (or the model's context, when ``max_tokens`` is given) on its own."""
    arrival = trace["arrival_s"].to_numpy(float)
    if not np.all(np.isfinite(arrival)) or np.any(arrival < 0):
        raise SchedlabError("arrival_s must be finite and >= 0")
    if np.any(np.diff(arrival) < 0):
        raise SchedlabError("trace is not sorted by arrival_s")
    prompt = trace["prompt_tokens"].to_numpy(np.int64)
    tokens = prompt + trace["output_tokens"].to_numpy(np.int64)
    if np.any(trace["output_tokens"].to_numpy(np.int64) < 1) or np.any(prompt < 1):
        raise SchedlabError("every request needs prompt_tokens >= 1 and output_tokens >= 1")
    if max_tokens is not None and tokens.size and tokens.max() > max_tokens:
        raise SchedlabError(f"a request of {int(tokens.max())} tokens exceeds the model's context of {max_tokens}")
    worst = limits.encoder_blocks + -(-tokens // limits.block_size)
    if worst.size and worst.max() > limits.kv_capacity_blocks:
        raise SchedlabError(
            f"a request needs {int(worst.max())} KV blocks but the engine holds {limits.kv_capacity_blocks}"
        )


class Engine(EngineView):
    """One run of one scheduler over one trace (sorted by arrival) in one arena."""

    def __init__(self, trace: pd.DataFrame, scheduler: Scheduler, arena: Arena, *, warmup_s: float = 0.0,
                 sample_s: float | None = None, record: bool = False) -> None:
        check_servable(trace, arena.limits, arena.max_tokens)
        requests = Requests(trace, warmup_s)
        self._setup(requests, scheduler, arena, requests.log, sample_s, record)
        self.visible = self.step_time.visible_times(self.arrival)
        scheduler.bind(self)

    def _setup(self, requests: Requests, scheduler: Scheduler, arena: Arena, log: RequestLog,
               sample_s: float | None = None, record: bool = False) -> None:
        """The state of a run of ``scheduler`` in ``arena`` over ``requests``, logging to ``log``
        (all but when each request reaches the scheduler and the scheduler's binding, which
        come after)."""
        self.trace, self.scheduler, self.arena = requests.trace, scheduler, arena
        self.limits, self.step_time = arena.limits, arena.step_time
        self.n = requests.n
        self.arrival, self.prompt, self.total = requests.arrival, requests.prompt, requests.total
        self.target, self.slo_class = requests.target, requests.slo_class
        self.seq, self.computed, self.blocks = requests.seq, requests.computed, requests.blocks
        self.sizes = requests.sizes(arena)
        self.enc_blocks = self.limits.encoder_blocks
        self.running: list[int] = []
        self._run_arr: np.ndarray | None = None
        self._totals: tuple | None = None  # running_totals() until the state next changes
        self._emits = np.empty(max(self.n, 1), np.int64)
        self.wants = np.empty(max(self.n, 1), np.int64)  # per running request, for the kernels
        self.kv = block_manager(self.trace, self.limits, self.computed, self.blocks)
        self.prefix_caching = self.kv.caching
        self.free = self.kv.free
        self.peak = 0
        self.now = self.busy = 0.0
        self.steps = self.done = 0
        self.log = log
        self.sample_s, self.record = sample_s, record
        self.token_times = [[] for _ in range(self.n)] if record else None
        self._step_log: list[tuple] = []

    @property
    def last_tok(self) -> np.ndarray:
        return self.log.last_tok

    # -- the KV blocks, as schedulers read them (see the module docstring) ---------------------
    def cached_prefix(self, i: int) -> tuple[int, int]:
        n_hit, n_free = self.kv.lookup(i, int(self.seq[i]))
        return n_hit * self.limits.block_size, n_free

    def exclusive_blocks(self, v: int) -> int:
        return self.kv.exclusive(v)

    # vLLM's scheduling pass on the prefix cache, call for call (the planner of a scheduler with
    # ``interleaved_kv``, with prefix caching on)
    def kv_take(self, requests: np.ndarray, tokens: np.ndarray) -> None:
        """Running ``requests`` compute ``tokens`` more each, in this order: their blocks are
        allocated and cached, before whatever comes next."""
        self.kv.take(requests, tokens)

    def kv_release(self, v: int) -> int:
        """Running request ``v`` is preempted: its blocks are released; returns the free blocks."""
        self.kv.release(np.array([v], np.int64))
        return self.kv.free

    def kv_admit(self, i: int, cached: int, n: int) -> None:
        """Waiting request ``i`` starts with its ``cached`` tokens and computes ``n``: its
        cached blocks are touched, the rest allocated and cached, before whatever comes next."""
        self.kv.admit(i, cached // self.limits.block_size, n)

    def running_totals(self) -> tuple:
        """The running requests (admission order), their decode rows and summed context, the
        tokens they want this step (written to ``wants``) and the KV blocks serving them all
        would add (:func:`kernels.running_totals`); computed once per state of the engine
        (a scheduler asks in ``steady`` and again in ``schedule``, the engine in a stretch)."""
        if self._totals is None:
            run = self.running_array()
            self._totals = (run, *kernels.running_totals(run, self.seq, self.computed, self.blocks, self.prompt,
                                                          self.enc_blocks, self.limits.block_size, self.wants))
        return self._totals

    # -- the run ------------------------------------------------------------------------------
    def run(self) -> RunResult:
        wall0 = time.perf_counter()
        sched, n = self.scheduler, self.n
        visible = self.visible.tolist() + [np.inf]  # Python floats (the same values), read once a step
        nxt = self.done = 0
        arrive_s = 0.0
        next_sample = 0.0 if self.sample_s else np.inf
        samples: list[tuple] = []
        while self.done < n:
            if visible[nxt] <= self.now:
                t0 = time.perf_counter()
                while visible[nxt] <= self.now:
                    sched.arrive(nxt)
                    nxt += 1
                arrive_s += time.perf_counter() - t0
            while self.now >= next_sample:
                samples.append((next_sample, self.kv_frac, sched.n_waiting(), len(self.running)))
                next_sample += self.sample_s
            if not self.running and not sched.n_waiting():
                if nxt >= n:  # requests left that no scheduler holds: fail, never wait for ever
                    raise SchedlabError(f"{sched.describe()}: engine stalled, with {n - self.done} requests left and "
                                        "none running or waiting")
                self.now = visible[nxt]
                continue
            mode = sched.steady()
            if mode:
                t_join = visible[nxt] if mode == UNTIL_ARRIVAL else np.inf
                if self._stretch(min(t_join, next_sample)):
                    continue
            plan = sched.schedule()
            if plan.empty:
                if nxt >= n:
                    raise SchedlabError(f"{sched.describe()}: engine stalled, with {sched.n_waiting()} requests waiting "
                                        "and nothing scheduled")
                self.now = max(self.now, visible[nxt])
                continue
            self._step(plan)
        while self.sample_s and self.now >= next_sample:
            samples.append((next_sample, self.kv_frac, sched.n_waiting(), len(self.running)))
            next_sample += self.sample_s
        return RunResult(
            requests=self.log.frame(self.step_time.output_s),
            gaps=self.log.gaps,
            class_gaps=self.log.class_gaps,
            steps=self.steps,
            busy_s=self.busy,
            peak_kv_blocks=self.peak,
            kv_capacity_blocks=self.limits.kv_capacity_blocks,
            sched_overhead_s=arrive_s + sched.overhead_s,
            wall_s=time.perf_counter() - wall0,
            timeline=pd.DataFrame(samples, columns=list(TIMELINE_COLUMNS)) if self.sample_s else None,
            step_log=pd.DataFrame(self._step_log, columns=STEP_LOG_COLUMNS) if self.record else None,
            token_times=self.token_times,
            prefix_cache=self._cache_counts(),
        )

    def _cache_counts(self, mine: np.ndarray | None = None) -> dict | None:
        """The prefix cache's lookups and hits over the requests admitted (of ``mine``, a mask
        by trace position, when the log holds other engines' requests too); None without one."""
        return self.kv.stats(self.log, self.prompt, mine)

    def _step(self, plan: StepPlan) -> None:
        self._totals = None
        kv = self.kv
        plan = kv.carry_out(self, plan)
        if plan.preempted:
            gone = set(plan.preempted)
            self.running = [r for r in self.running if r not in gone]
            kv.preempted(plan.preempted)
            for v in plan.preempted:
                self.blocks[v] = 0
                self.computed[v] = 0
                self.log.preemptions[v] += 1
        if plan.admitted:
            self.running.extend(plan.admitted)
            first = self.log.first_sched
            for i in plan.admitted:
                if first[i] != first[i]:  # NaN: its first admission
                    first[i] = self.now
            kv.start(self, plan.cached)
        if plan.preempted or plan.admitted:
            self._run_arr = None
        added = n_dec = ctx = n_pre = pairs = n_emit = n_sched = 0
        bs, capacity = self.limits.block_size, self.limits.kv_capacity_blocks
        for requests, tokens in plan.parts:
            a, d, c, p, q, n_emit = kernels.apply(requests, tokens, self.seq, self.computed, self.blocks, self.prompt,
                                                  self.enc_blocks, bs, self._emits, n_emit)
            added, n_dec, ctx, n_pre, pairs, n_sched = added + a, n_dec + d, ctx + c, n_pre + p, pairs + q, n_sched + requests.size
        self.free = kv.scheduled(plan, added)
        if n_sched == 0:
            self.free = kv.free
            return
        if self.free < 0:
            raise SchedlabError(f"{self.scheduler.name}: the step plan needs {-self.free} KV blocks more than are free")
        if capacity - self.free > self.peak:
            self.peak = capacity - self.free
        dt = float(self.step_time(plan.n_encoder, n_pre, n_dec, ctx, pairs))
        if self.record:
            self._step_log.append((self.now, dt, n_pre, n_dec, n_sched - n_dec, len(self.running), capacity - self.free))
        self.now += dt
        self.busy += dt
        self.steps += 1
        emits = self._emits[:n_emit]
        self.log.tokens(emits, self.now)
        if self.token_times is not None:
            for i in emits.tolist():
                self.token_times[i].append(self.now)
        if kernels.emit(emits, self.seq, self.total):
            self._retire(emits)
        self.free = kv.free  # the step's allocations, then its releases

    def _stretch(self, t_stop: float) -> bool:
        """Run ``k >= 2`` all-decode steps in closed form, the last one ending at or after
        ``t_stop``; False when fewer would run (or some running request does not decode)."""
        k, dt0, slope = self._stretch_steps(t_stop)
        if k < 2:
            return False
        self._run_stretch(*kernels.lockstep_times(self.now, dt0, slope, k))
        return True

    def _stretch_steps(self, t_stop: float) -> tuple[int, float, float]:
        """How many all-decode steps :meth:`_stretch` would run now (0: some running request
        does not decode), the first one's duration and how much each next one adds (its
        context grows by one token per running request)."""
        run, n_dec, ctx, _, _ = self.running_totals()
        if n_dec == 0 or n_dec != run.size:
            return 0, 0.0, 0.0
        dt0 = float(self.step_time(0, 0, n_dec, ctx))
        slope = self.step_time.ctx_tokens * n_dec
        return kernels.stretch_steps(run, self.seq, self.computed, self.blocks, self.total, self.free, self.enc_blocks,
                                     self.limits.block_size, self.now, t_stop, dt0, slope), dt0, slope

    def _run_stretch(self, dts: np.ndarray, ends: np.ndarray) -> None:
        """Run all-decode steps of every running request from now, in closed form: of durations
        ``dts``, ending at ``ends`` (:func:`kernels.lockstep_times`)."""
        run, k = self.running_totals()[0], dts.size
        self._totals = None
        self.log.lockstep(run, ends, dts)
        if self.token_times is not None:
            for i in run.tolist():
                self.token_times[i].extend(ends.tolist())
        self.kv.advance(run, k)  # before the counts move: it reads them
        bs = self.limits.block_size
        added, finished = kernels.advance(run, self.seq, self.computed, self.blocks, self.total, self.enc_blocks, bs, k)
        self.free = self.kv.advanced(added)
        self.peak = max(self.peak, self.limits.kv_capacity_blocks - self.free)
        self.now = float(ends[-1])
        self.busy += float(dts.sum())
        self.steps += k
        if finished:
            self._retire(run)
        self.free = self.kv.free  # the stretch's allocations, then its releases

    def _retire(self, candidates: np.ndarray) -> np.ndarray:
        """Complete the requests of ``candidates`` that generated all their tokens, freeing
        their KV blocks; return them."""
        self._totals = None
        finished = kernels.complete(candidates, self.seq, self.total)
        self.kv.finish(finished, kernels.finish(finished, self.blocks, self.log.finish, self.now))
        # the running requests left, in admission order (none complete but those just retired)
        self._run_arr = kernels.complete(self.running_array(), self.seq, self.total, False)
        self.running = self._run_arr.tolist()
        self.done += finished.size
        if finished.size:
            progress.requests_done(int(finished.size))
        return finished


def run(trace: pd.DataFrame, scheduler: Scheduler, arena: Arena, **options) -> RunResult:
    """Serve ``trace`` with ``scheduler`` in ``arena`` (options: ``warmup_s``, ``sample_s``,
    ``record``, see :class:`Engine`)."""
    return Engine(trace, scheduler, arena, **options).run()
