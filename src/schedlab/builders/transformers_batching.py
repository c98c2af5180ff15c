"""transformers' continuous batching (the engine behind ``transformers serve``) as a batch
builder: the rules of its ``FIFOScheduler`` and ``PrefillFirstScheduler`` (transformers 5.19,
the pinned release, or 5.17, which GPU machines hold), with its own waiting order or a queue
policy's.

Each step, as transformers schedules it:

- **candidates**, in order: FIFO takes the decoding requests (a request decodes once the chunk
  that ends its prefill was scheduled), then the split prefills, in the order they started,
  then the waiting requests; prefill-first takes the split prefills before the decoding ones.
  No waiting request is a candidate while new requests are blocked (below).
- **safety margin**: when fewer than ``safety_margin`` of the KV blocks are free as the step
  begins (5.17: as each candidate comes), the first request scheduled may be anything, the ones
  after it only decodes.
- **prefill splitting**: each candidate takes the tokens it needs, at most the token budget
  left; a waiting request whose prompt exceeds it starts with a chunk.
- **cache budget and decode fast path**: a batch of single-token decodes of requests shorter
  than ``max_blocks_per_request`` blocks runs on the decode fast path; a candidate that would
  leave it is passed over when the cache-read budget (the cache's tokens) left is below the
  tokens it reads.
- **KV blocks**: a candidate whose new blocks (its tokens so far plus this step's, in whole
  blocks, less those it holds) are not free is passed over, not ending the pass; a running
  one is then starved. 5.17 allocates when the room left in a request's blocks is short of its
  new tokens, one block more than they fill (``(tokens - room + 1) // block_size + 1``), and a
  waiting request that finds no block free ends the pass.
- the pass ends when the token budget is spent, when the cache budget is spent off the fast
  path, or when ``max_requests_per_batch`` requests are scheduled.
- **soft reset**: when nothing was scheduled and a candidate did not fit (the pass runs again
  after it), or after a step that starved running requests, the newest starved requests are
  preempted (recompute of their prompt and generated tokens) until the others fit (5.19: one
  after the other; 5.17: their sum) or one running request is left; they wait again at the
  back of the queue, and no new request is admitted until a request finishes.

Waiting requests are transformers' own order (arrivals, then soft-reset requests as they come
back) or a queue policy's (:class:`PolicyWaiting`): the policy pops the next request only when
the pass reaches it, and a pass that reached the waiting requests leaves the ones it did not
schedule in the policy's order, as transformers leaves them in its list. :mod:`schedlab.backends.transformers.scheduler`
puts a policy into transformers' own engine the same way, so both ask it the same questions.

Limits are the engine's: ``max_num_batched_tokens`` is the token budget, ``block_size`` the
page size, ``kv_capacity_blocks`` the cache's blocks and ``max_num_seqs`` the requests per
batch. Decoder models only, without a prefix cache (transformers' block sharing is off).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from itertools import chain

from schedlab.engine.plan import Planner, StepPlan
from schedlab.engine.scheduler import Scheduler
from schedlab.errors import SchedlabError
from schedlab.policies.base import Job, Policy

FIFO, PREFILL_FIRST = "fifo", "prefill-first"
ORDERS = (FIFO, PREFILL_FIRST)
#: The transformers releases whose rules are modelled: the pinned one first.
RELEASES = ("5.19", "5.17")
#: transformers' default safety margin of each scheduler class.
SAFETY_MARGIN = {FIFO: 0.15, PREFILL_FIRST: 0.0}


def check_order(order: str) -> None:
    """Refuse an ``order`` that names no scheduler class of transformers'."""
    if order not in ORDERS:
        raise SchedlabError(f"unknown transformers scheduler order {order!r}; choose {' or '.join(ORDERS)}")


def order_of(batching: str) -> str:
    """The scheduler class that a ``--batching`` of transformers' names: ``transformers`` its
    FIFO class, ``transformers-prefill-first`` its prefill-first one."""
    return PREFILL_FIRST if batching == f"transformers-{PREFILL_FIRST}" else FIFO


class ArrivalOrder(Policy):
    """transformers' own waiting order: requests in the order they are added (arrivals, and a
    soft-reset request when it comes back); the engine picks its victims itself."""

    name = "arrival-order"

    def __init__(self) -> None:
        self._queue: deque[Job] = deque()

    def push(self, job: Job) -> None:
        self._queue.append(job)

    def peek(self, now: float) -> Job:
        return self._queue[0]

    def pop(self, now: float) -> Job:
        return self._queue.popleft()

    def remove(self, job: Job) -> None:
        self._queue.remove(job)

    def __iter__(self):
        return iter(self._queue)

    def __len__(self) -> int:
        return len(self._queue)


class PolicyWaiting:
    """A policy's waiting requests as one step's candidates: ``candidates`` pops the next job
    only when the pass asks for it (dropping those ``alive`` rejects: a cancelled request);
    ``restore``, after a pass that asked for one, pops the rest too and pushes back every job
    the step left waiting in the order they came out, so that the policy holds them in its
    order again (a policy that keeps first-in-first-out queues keeps their order)."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self._popped: list[Job] = []
        self._alive: Callable[[Job], bool] | None = None

    def candidates(self, now: float, alive: Callable[[Job], bool] | None = None) -> Iterator[Job]:
        self._popped, self._alive = [], alive
        while len(self.policy):
            job = self.policy.pop(now)
            if alive is None or alive(job):
                self._popped.append(job)
                yield job

    def restore(self, now: float, waiting: Callable[[Job], bool]) -> None:
        if not self._popped:
            return  # the pass never reached the waiting requests: the policy is as it was
        while len(self.policy):
            job = self.policy.pop(now)
            if self._alive is None or self._alive(job):
                self._popped.append(job)
        for job in self._popped:
            if waiting(job):
                self.policy.push(job)
        self._popped = []


class TransformersBatching(Scheduler):
    """transformers' scheduler class of ``order`` around ``policy`` (default: its own arrival
    order), as ``release`` schedules (see :func:`release_of`); ``safety_margin`` defaults to the
    class's own, ``max_requests_per_batch`` to the engine's ``max_num_seqs``;
    ``max_blocks_per_request`` > 0 turns the decode fast path on."""

    def __init__(self, policy: Policy | None = None, order: str = FIFO, safety_margin: float | None = None,
                 max_requests_per_batch: int | None = None, max_blocks_per_request: int = 0,
                 release: str = RELEASES[0]) -> None:
        check_order(order)
        if release not in RELEASES:
            raise SchedlabError(f"transformers {release}'s scheduling is not modelled; choose {' or '.join(RELEASES)}")
        self.release = release
        self.policy = policy if policy is not None else ArrivalOrder()
        self.order = order
        self.safety_margin = SAFETY_MARGIN[order] if safety_margin is None else safety_margin
        if not 0 <= self.safety_margin <= 1:
            raise SchedlabError(f"safety_margin must be in [0, 1], got {self.safety_margin}")
        self.max_requests_per_batch = max_requests_per_batch
        self.max_blocks_per_request = max_blocks_per_request
        self.name = f"transformers-{order}" if policy is None else f"{policy.name} (transformers {order})"
        self.waiting = PolicyWaiting(self.policy)

    def bind(self, engine) -> None:
        super().bind(engine)
        if engine.enc_blocks:
            raise SchedlabError(f"{self.name}: transformers' continuous batching serves decoder models only")
        if engine.prefix_caching:
            raise SchedlabError(f"{self.name}: transformers' block sharing is not modelled; run without a prefix cache")
        lim = engine.limits
        self.token_budget = lim.max_num_batched_tokens
        self.num_blocks = lim.kv_capacity_blocks
        self.cache_budget = lim.kv_capacity_blocks * lim.block_size  # the cache's tokens: what a step may read
        self.fast_length = self.max_blocks_per_request * lim.block_size
        self.max_requests = self.max_requests_per_batch or lim.max_num_seqs
        self._rid = engine.trace["request_id"].to_numpy()
        self.jobs: dict[int, Job] = {}
        self.decoding: set[int] = set()  # running requests whose prefill is scheduled in full
        self.block_new = False
        self._done = 0
        # 5.17's own count of each request's blocks (it allocates some ahead), and of the free ones
        self.held: dict[int, int] = {}
        self.free_held = self.num_blocks

    def arrive(self, i: int) -> None:
        e = self.engine
        job = self.jobs[i] = Job(int(self._rid[i]), float(e.arrival[i]), float(e.sizes[i]), int(e.prompt[i]), i)
        self.policy.push(job)

    def requeue(self, i: int) -> None:
        self.decoding.discard(i)
        self.policy.push(self.jobs[i])

    def n_waiting(self) -> int:
        return len(self.policy)

    def drop(self, i: int) -> None:
        self.policy.remove(self.jobs[i])

    def schedule(self) -> StepPlan:
        e = self.engine
        if e.done != self._done:  # a request finished in the last step: new requests may start again
            self._done, self.block_new = e.done, False
            running = set(e.running)
            for r in [r for r in self.held if r not in running]:  # finished: its blocks return
                self.free_held += self.held.pop(r)
        plan = Planner(e, self, self.token_budget)
        scheduled, starved, failed = self._pass(plan)
        while not scheduled and failed:
            if not self._soft_reset(plan, starved):
                raise SchedlabError(f"{self.name}: no request can be scheduled and none can be preempted")
            scheduled, starved, failed = self._pass(plan)
        if starved:
            self._soft_reset(plan, starved)
        return plan.plan()

    def _pass(self, plan: Planner) -> tuple[int, list[tuple[int, int]], bool]:
        """One scheduling pass (transformers' ``schedule_batch``): the requests scheduled, the
        running ones starved (with the blocks they asked for) and whether one did not fit."""
        e = self.engine
        seq, computed, blocks, bs = e.seq, e.computed, e.blocks, e.limits.block_size
        latest = self.release == RELEASES[0]
        in_margin = plan.free / self.num_blocks >= self.safety_margin  # 5.19: once, as the step begins
        alive = set(plan.alive)
        decoding = [r for r in plan.alive if r in self.decoding]
        prefilling = [r for r in plan.alive if r not in self.decoding]
        running = decoding + prefilling if self.order == FIFO else prefilling + decoding
        waiting = () if self.block_new else (job.ref for job in self.waiting.candidates(e.now))
        tokens, cache, requests = self.token_budget, self.cache_budget, self.max_requests
        fast = self.fast_length > 0
        scheduled, failed, starved = 0, False, []
        admitted: set[int] = set()
        for r in chain(running, waiting):
            is_decoding = r in self.decoding
            if not latest:  # 5.17: before each candidate, on the blocks free then
                in_margin = self.free_held >= self.safety_margin * self.num_blocks
            if not in_margin and scheduled and not is_decoding:
                break
            c = int(computed[r])
            need = int(seq[r]) - c
            n = min(need, tokens)
            eligible = n == 1 and c < self.fast_length
            if not (fast and eligible) and cache < c:
                continue
            if latest:  # the blocks its tokens so far and this step's fill, less those it holds
                grow = -(-(c + n) // bs) - int(blocks[r])
                fits = grow <= plan.free
            else:  # 5.17: when its blocks' room is short, one block more than the new tokens fill
                held = self.held.get(r, 0)
                room = held * bs - c
                grow = (n - room + 1) // bs + 1 if room < n or held == 0 else 0
                fits = grow <= self.free_held
            if not fits:
                failed = True
                if r in alive:
                    starved.append((r, grow))
                elif not latest and self.free_held == 0:
                    break  # 5.17: a waiting request finds the cache full, and so would every later one
                continue
            if not latest:
                self.held[r] = self.held.get(r, 0) + grow
                self.free_held -= grow
            if r in alive:
                plan.take(r, n)
            else:
                plan.admit(r, n)
                admitted.add(r)
            if n == need:
                self.decoding.add(r)
            fast = fast and eligible
            tokens, cache, requests, scheduled = tokens - n, cache - c, requests - 1, scheduled + 1
            if tokens == 0 or (cache <= 0 and not fast) or requests <= 0:
                break
        self.waiting.restore(e.now, lambda job: job.ref not in admitted)
        return scheduled, starved, failed

    def _soft_reset(self, plan: Planner, starved: list[tuple[int, int]]) -> bool:
        """Preempt the newest starved requests (transformers' ``offload_requests`` without a CPU
        swap space) while one running request is left besides them and the others' new blocks
        do not fit: 5.19 counts whether they fit one after the other, 5.17 whether their sum
        does. They wait again oldest first. False when none was preempted."""
        latest = self.release == RELEASES[0]
        needs = [n for _, n in starved]
        n_active = len(plan.alive) + len(plan.admitted)
        free = plan.free if latest else self.free_held
        victims = []
        while starved and n_active - len(victims) > 1:
            if latest:
                left, fit = free, 0
                for need in needs:
                    if need > left:
                        break
                    left, fit = left - need, fit + 1
                if fit == len(starved):
                    break
            elif sum(needs) <= free:
                break
            r, _ = starved.pop()
            needs.pop()
            victims.append(r)
            free += int(self.engine.blocks[r]) if latest else self.held.get(r, 0)
        for r in reversed(victims):
            plan.preempt(r)
            if not latest:
                self.free_held += self.held.pop(r, 0)
        if victims:
            self.block_new = True
        return bool(victims)


def release_of(version: str) -> str:
    """The modelled release (:data:`RELEASES`) that transformers ``version`` schedules as."""
    release = ".".join(version.split(".")[:2])
    if release not in RELEASES:
        raise SchedlabError(f"transformers {version}'s scheduling is not modelled; modelled: {', '.join(RELEASES)}")
    return release
