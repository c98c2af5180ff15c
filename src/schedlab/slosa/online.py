"""Paper D's mapper as an online waiting-queue policy, for continuously arriving traffic.

Whenever the waiting set has changed since the last plan, the next admission re-plans: the
``window`` oldest waiting requests form one mapping decision (their SLO targets reduced by the
time they have already waited), simulated annealing orders them, and they are admitted in that
order, ahead of the rest (which wait in arrival order). The continuous-batching engine forms
its own batches, so only the mapping's priority order is used. The latency predictor is fitted
to the engine's own step-time model (:func:`predictor_for`), so the mapper sees the engine it
schedules.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

import numpy as np
import pandas as pd

from schedlab.errors import SchedlabError
from schedlab.fit.latency_predictor import LatencyPredictor, fit_predictor
from schedlab.latency.predictor_profile import BATCHES
from schedlab.policies.base import Job, Policy
from schedlab.registry import QUEUE, Context, register
from schedlab.engine.steptime import StepTimeModel
from schedlab.slosa import instances  # noqa: F401 (paper D's router registers through this entry point too)
from schedlab.slosa.problem import MappingProblem
from schedlab.slosa.search import AnnealConfig, anneal

#: Per-request SLO target columns of a trace (seconds; NaN where a target does not apply).
SLO_COLUMNS = ("slo_ttft_s", "slo_tpot_s", "slo_e2e_s")
LENGTHS = (128, 256, 512, 1000, 1500, 2000)


def predictor_for(step_time: StepTimeModel, label: str = "engine") -> LatencyPredictor:
    """Paper D's bilinear predictor fitted (OLS) to ``step_time`` on the paper's grid below
    2k tokens: a prefill of ``b`` prompts of ``l`` tokens, and one decode step of ``b``
    requests at context ``l``."""
    b, l = (g.ravel().astype(float) for g in np.meshgrid(BATCHES, LENGTHS))
    prefill = step_time(0, b * l, 0, 0, b * l * (l + 1) / 2)
    decode = step_time(0, 0, b, b * l)
    rows = pd.DataFrame({"phase": np.repeat(["prefill", "decode"], b.size), "batch": np.tile(b, 2),
                         "length": np.tile(l, 2), "time_s": np.concatenate([prefill, decode])})
    return fit_predictor(rows.assign(source="steptime", hardware=label, model=label))


class OnlineMapper(Policy):
    """Admission order from repeated mapping decisions over the oldest waiting requests.

    ``requests`` is the trace (``request_id``, ``prompt_tokens``, ``output_tokens`` as the
    output estimate, and :data:`SLO_COLUMNS`): a request is a code task (e2e target) when it
    has an ``slo_e2e_s``, else a chat task (TTFT and TPOT targets).
    """

    name = "slo-sa"

    def __init__(self, requests: pd.DataFrame, predictor: LatencyPredictor, *, window: int = 10,
                 max_batch: int = 4, anneal_config: AnnealConfig = AnnealConfig()) -> None:
        missing = [c for c in ("request_id", "prompt_tokens", "output_tokens", *SLO_COLUMNS) if c not in requests]
        if missing:
            raise SchedlabError(f"the slo-sa policy needs trace columns {', '.join(missing)}")
        if window < 1 or max_batch < 1:
            raise SchedlabError(f"window and max_batch must be >= 1, got {window}, {max_batch}")
        self.window, self.max_batch, self.config = window, max_batch, anneal_config
        self.predictor = predictor
        self._row = {int(r): k for k, r in enumerate(requests["request_id"].to_numpy())}
        self._prompt = requests["prompt_tokens"].to_numpy(float)
        self._output = requests["output_tokens"].to_numpy(float)
        ttft, tpot, e2e = (requests[c].to_numpy(float) for c in SLO_COLUMNS)
        self._code = np.isfinite(e2e)
        self._targets = np.stack([np.where(np.isnan(x), np.inf, x) for x in (ttft, tpot, e2e)], axis=1)
        self._waiting: dict[int, Job] = {}
        self._plan: list[Job] = []
        self._stale = False

    def push(self, job: Job) -> None:
        self._waiting[job.request_id] = job
        self._stale = True

    def remove(self, job: Job) -> None:
        del self._waiting[job.request_id]
        self._stale = True

    def peek(self, now: float) -> Job:
        if self._stale or not self._plan:
            self._plan = self._replan(now)
            self._stale = False
        return self._plan[0]

    def pop(self, now: float) -> Job:
        job = self.peek(now)
        self._plan.pop(0)
        del self._waiting[job.request_id]
        return job

    def __iter__(self):
        return iter(self._waiting.values())

    def __len__(self) -> int:
        return len(self._waiting)

    def _replan(self, now: float) -> list[Job]:
        jobs = sorted(self._waiting.values(), key=lambda j: (j.arrival_s, j.request_id))
        head, rest = jobs[:self.window], jobs[self.window:]
        if len(head) < 2:
            return head + rest
        # The search's seed comes from what it decides (these requests, at this time to the
        # microsecond, which the two clocks' rounding cannot split), so the
        # same decision is the same whatever asked for it: vLLM's scheduler and schedlab's
        # engine consult the queue at different moments between decisions.
        seed = int(np.random.SeedSequence([j.request_id for j in head] + [round(now * 1e6)]).generate_state(1)[0] >> 1)
        order = anneal(self._problem(head, now), replace(self.config, seed=seed)).mapping.order
        return [head[i] for i in order] + rest

    def _problem(self, head: list[Job], now: float) -> MappingProblem:
        rows = np.array([self._row[j.request_id] for j in head])
        waited = now - np.array([j.arrival_s for j in head])
        ttft, tpot, e2e = self._targets[rows].T
        code = self._code[rows]
        return MappingProblem.predicted(
            self.predictor, self._prompt[rows], self._output[rows], self.max_batch, code=code,
            slo_e2e=np.where(code, e2e - waited, np.inf),
            slo_ttft=np.where(code, np.inf, ttft - waited),
            slo_tpot=np.where(code, np.inf, tpot),
        )


@lru_cache(maxsize=4)
def _engine_predictor(step_time: StepTimeModel) -> LatencyPredictor:
    return predictor_for(step_time)


@register("slo-sa", kind=QUEUE, paper="D", needs=("trace", "arena"),
          summary="paper D's SLO-aware priority mapping, re-planned online over the oldest waiting requests")
def slo_sa(context: Context) -> OnlineMapper:
    """The mapper over the run's trace, its predictor fitted to the arena's step-time model."""
    return OnlineMapper(context.trace, _engine_predictor(context.arena.step_time))
