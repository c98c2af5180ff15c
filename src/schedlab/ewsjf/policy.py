"""The EWSJF policy: the tactical loop over queue heads, and the strategic updates beside it.

Tactical (every engine step): when ``now`` differs from the last decision's, a new batch
starts: every queue's head is scored (O(k) in the number of queues k, whatever the number of
waiting jobs), the best queue is served FIFO, then the batch is backfilled from adjacent
queues outward (at equal distance the better-scoring side first) while the engine keeps
admitting at that ``now``. ``peek`` and ``pop`` at the same ``now`` agree.

The cost estimate: the paper's score takes a head's prompt length ``b`` as its job (its
shortness ``q_index / (b + 1)``, its prefill ``C_prefill(b)``). With ``cache_aware`` (the
``ewsjf-uncached`` entry), on an engine with a prefix cache, ``b`` is the prompt tokens the
cache does not hold when the decision is made (:meth:`Job.work
<schedlab.policies.base.Job.work>`), the prefill the admission would really run; the queues
still partition prompt lengths.

Strategic (beside it): prompt lengths enter a sliding window; Refine-and-Prune re-partitions
on the window after ``warmup`` arrivals and every ``refit_every`` after that (waiting jobs are
re-routed), a light adjustment moves the bounds every ``adjust_every`` arrivals, and an
optional tuner swaps the meta-parameters at trial boundaries (see :mod:`.optimise`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterator, Protocol

import numpy as np

# paper B's workload kinds and pools register with its policies (this is its entry-point module)
import schedlab.ewsjf.workload  # noqa: F401
from schedlab.ewsjf.dispatch import Dispatcher, Queue
from schedlab.ewsjf.partition import Band, adjust, refine_and_prune
from schedlab.ewsjf.reward import TrialStats
from schedlab.ewsjf.score import DEFAULT_PREFILL, PrefillModel, Weights
from schedlab.registry import QUEUE, register
from schedlab.policies.base import Job, Policy

#: The catch-all band before any traffic has been seen.
EVERYTHING = Band(0, 1 << 31, 0, 1000.0)


@dataclass(frozen=True)
class Params:
    """The meta-parameters the strategic loop tunes."""

    weights: Weights = field(default_factory=Weights)
    alpha: float = 2.0
    max_queues: int = 32


class Tuner(Protocol):
    """What the policy needs from a meta-optimiser (see :class:`.optimise.Tuner`)."""

    end_s: float | None

    def begin(self, now: float) -> Params: ...

    def end(self, now: float, terms: dict) -> Params: ...

    def extend(self, now: float) -> None: ...


@register("ewsjf", kind=QUEUE, paper="B", summary='EWSJF: queues of similar prompt lengths, chosen by an effective-wait score')
@register("ewsjf-uncached", kind=QUEUE, paper="B", params={"cache_aware": True},
          summary="EWSJF whose score costs a head's prompt tokens the prefix cache does not hold")
class EWSJF(Policy):
    """Adaptive multi-queue SJF. ``bands`` fixes the initial partition; with ``learn`` off it
    never changes (the static k-means / Refine-and-Prune baselines)."""

    name = "ewsjf"

    def __init__(
        self,
        params: Params | None = None,
        prefill: PrefillModel = DEFAULT_PREFILL,
        bands: list[Band] | None = None,
        *,
        learn: bool = True,
        window: int = 4096,
        warmup: int = 512,
        refit_every: int = 4096,
        adjust_every: int = 512,
        bubble_width: int = 64,
        idle_limit: int = 1000,
        tuner: Tuner | None = None,
        cache_aware: bool = False,
    ) -> None:
        self.params = params or Params()
        self.cache_aware = self.reads_cache = cache_aware
        if cache_aware:
            self.name = "ewsjf-uncached"
        self.prefill = prefill
        self.dispatch = Dispatcher(bands or [EVERYTHING], self.params.weights, bubble_width=bubble_width, idle_limit=idle_limit)
        self.learn, self.warmup, self.refit_every, self.adjust_every = learn, warmup, refit_every, adjust_every
        self.tuner = tuner
        self._window = np.zeros(window, dtype=np.int64)
        self._seen = 0
        self._n = 0
        self._at: float | None = None
        self._current: Queue | None = None
        self._backfill: Iterator[Queue] = iter(())
        self._stats = TrialStats()
        self._bubbles0 = 0
        #: Queue heads scored so far (the tactical loop's cost, counted).
        self.scored = 0
        self.decisions = 0

    # -- the Policy interface -------------------------------------------------------------
    def push(self, job: Job) -> None:
        self.dispatch.push(job)
        self._n += 1
        if self.learn:
            self._observe(job.prompt_tokens)

    def peek(self, now: float) -> Job:
        return self._source(now).head()

    def pop(self, now: float) -> Job:
        q = self._source(now)
        job = q.pop(now)
        self.dispatch.taken(job)
        self._n -= 1
        b = job.prompt_tokens
        self._stats.admitted(q, b, now - job.arrival_s, self.prefill(b))
        return job

    def remove(self, job: Job) -> None:
        self.dispatch.remove(job)
        self._n -= 1

    def __iter__(self) -> Iterator[Job]:
        return iter(list(self.dispatch))

    def __len__(self) -> int:
        return self._n

    # -- tactical -------------------------------------------------------------------------
    def _source(self, now: float) -> Queue:
        """The queue the current batch takes from (a new decision when ``now`` moved)."""
        if now != self._at:
            self._decide(now)
        q = self._current
        while not q.fifo:  # emptied within the step: backfill from the neighbours
            q = next(self._backfill, None)
            if q is None:
                self._decide(now)
                q = self._current
                break
            self._current = q
        return q

    def _decide(self, now: float) -> None:
        if self.tuner is not None and (self.tuner.end_s is None or now >= self.tuner.end_s):
            self._next_trial(now)
        d = self.dispatch
        d.drop_idle()
        queues = d.queues
        c0, c1 = self.prefill.intercept_s, self.prefill.per_token_s
        log = math.log
        scores = [-1.0] * len(queues)
        best, best_i, scored = -1.0, -1, 0
        for i, q in enumerate(queues):  # score.score() inlined: this loop is the hot path
            fifo = q.fifo
            if fifo:
                job = fifo[0]
                b = job.work() if self.cache_aware else job.prompt_tokens
                w_base, w_urg, w_fair = q.w
                s = (i + 1) / (b + 1) * (w_base + w_urg * (now - job.arrival_s) / (c0 + c1 * b) + w_fair * log(b + 1))
                scores[i] = s
                scored += 1
                if s > best:
                    best, best_i = s, i
        self.scored += scored
        self.decisions += 1
        self._current, self._at = queues[best_i], now
        self._backfill = _outward(queues, scores, best_i)

    # -- strategic ------------------------------------------------------------------------
    def _observe(self, length: int) -> None:
        w = self._window
        w[self._seen % w.size] = length
        self._seen += 1
        seen = self._seen
        if seen == self.warmup or (seen > self.warmup and (seen - self.warmup) % self.refit_every == 0):
            self.refit()
        elif seen > self.warmup and seen % self.adjust_every == 0:
            idx = np.arange(seen - self.adjust_every, seen) % w.size
            self.dispatch.reshape(adjust(self.dispatch.bands(), w[idx]))
            self._at = None

    def refit(self) -> None:
        """Refine-and-Prune on the window; waiting jobs are re-routed."""
        if self._seen == 0:
            return
        lengths = self._window[: min(self._seen, self._window.size)]
        p = self.params
        self.dispatch.rebuild(refine_and_prune(lengths, alpha=p.alpha, max_queues=p.max_queues))
        self._at = None

    def _next_trial(self, now: float) -> None:
        d = self.dispatch
        if self.tuner.end_s is None:
            params = self.tuner.begin(now)
        elif self._stats.n == 0:  # nothing admitted: the trial goes on
            self.tuner.extend(now)
            return
        else:
            terms = self._stats.terms(len(d.queues), d.bubbles_made - self._bubbles0)
            params = self.tuner.end(now, terms)
        self._stats, self._bubbles0 = TrialStats(), d.bubbles_made
        old, self.params = self.params, params
        d.reweigh(params.weights)
        if self.learn and (params.alpha, params.max_queues) != (old.alpha, old.max_queues):
            self.refit()


def _outward(queues: list[Queue], scores: list[float], best: int) -> Iterator[Queue]:
    """Non-empty queues by distance from ``best``; at equal distance the better score first."""
    lo, hi, k = best - 1, best + 1, len(queues)
    while lo >= 0 or hi < k:
        if hi >= k or (lo >= 0 and scores[lo] >= scores[hi]):
            i, lo = lo, lo - 1
        else:
            i, hi = hi, hi + 1
        if scores[i] >= 0:
            yield queues[i]
