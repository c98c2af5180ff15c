"""What a policy reads of its requests (``Job``'s live fields and the trace's own), and the
preemption hook: the same values at every decision on ``sim`` and ``vllm-sim``, as documented
(a preempted request waits with nothing computed or held and one preemption more, its tokens
generated kept), and a hook's answers checked."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from schedlab import registry
from schedlab.engine import Arena, EngineConfig
from schedlab.engine.steptime import StepTimeModel
from schedlab.policies import Job, KeyedPolicy
from schedlab.policies.contract import CheckedQueue
from schedlab.policies.fcfs import FCFS
from schedlab.registry import PluginError
from schedlab.simulate import serve
from traces import two_class_trace

FIELDS = ("generated_tokens", "computed_tokens", "prompt_computed", "preemptions", "kv_blocks", "first_token_s",
          "finished", "slo_class", "tenant", "deadline_s", "predicted_tokens")


class Recording(KeyedPolicy):
    """Least generated first, preemptive (so the hook runs), recording what it reads of every
    job it admits and of the running jobs at every step boundary."""

    name = "recording"
    preemptive = True
    records: list

    def key(self, job: Job, now: float | None) -> int:
        return job.generated_tokens // 24

    def _record(self, what: str, job: Job, now: float) -> None:
        Recording.records.append((what, job.request_id, now, *(getattr(job, f) for f in FIELDS)))

    def pop(self, now: float) -> Job:
        job = super().pop(now)
        self._record("pop", job, now)
        return job

    def preempt(self, running, now, free_slots):
        for job in running:
            self._record("running", job, now)
        chosen = super().preempt(running, now, free_slots)
        for job in chosen:
            self._record("preempt", job, now)
        return chosen


@pytest.fixture
def recording(monkeypatch):
    monkeypatch.setattr(registry, "_entries", dict(registry._entries))
    registry.register("recording", kind=registry.QUEUE)(Recording)
    yield Recording
    monkeypatch.delattr(Recording, "_schedlab_names", raising=False)


def _trace() -> pd.DataFrame:
    trace = two_class_trace(60, rate=30.0, seed=4, prompt=(8, 300), output=(2, 120))
    rng = np.random.default_rng(5)
    return trace.assign(tenant=rng.choice(["t1", "t2", "t3"], len(trace)),
                        slo_e2e_s=np.where(rng.random(len(trace)) < 0.5, 2.5, np.nan),
                        predicted_output_tokens=trace["output_tokens"] * 1.5)


def test_every_backend_shows_a_policy_the_same_requests(recording):
    """The records of every admission and every step boundary: equal on sim and vllm-sim, under
    memory pressure (the engine's victims) and the hook's own preemptions."""
    trace = _trace()
    arena = Arena(StepTimeModel(intercept=0.004, n_prefill_tokens=3e-5, n_decode=1e-4, ctx_tokens=1e-7),
                  EngineConfig(max_num_seqs=6, max_num_batched_tokens=256, block_size=16, kv_capacity_blocks=60))
    runs = {}
    for backend in ("sim", "vllm-sim"):
        Recording.records = []
        result = serve(trace, "recording", arena, backend=backend, model="tiny-llama")
        runs[backend] = (Recording.records, result.requests)
    (sim, sim_requests), (vs, vs_requests) = runs["sim"], runs["vllm-sim"]
    assert len(sim) == len(vs) > 0
    for a, b in zip(sim, vs):
        assert a[:2] == b[:2] and math.isclose(a[2], b[2], abs_tol=1e-9)
        for name, x, y in zip(FIELDS, a[3:], b[3:]):
            assert x == y or (isinstance(x, float) and (math.isclose(x, y, abs_tol=1e-9) or (x != x and y != y))), \
                (name, a, b)
    kinds = {r[0] for r in sim}
    assert kinds == {"pop", "running", "preempt"}
    assert sim_requests["preemptions"].sum() > sum(r[0] == "preempt" for r in sim) > 0  # memory victims too
    np.testing.assert_allclose(vs_requests["finish_s"], sim_requests["finish_s"], rtol=1e-9)

    # what the documentation says of each field
    trace = trace.set_index("request_id")
    for what, rid, now, *values in sim:
        f = dict(zip(FIELDS, values))
        row = trace.loc[rid]
        assert f["slo_class"] == row.slo_class and f["tenant"] == row.tenant
        assert f["predicted_tokens"] == row.output_tokens * 1.5
        assert f["deadline_s"] == (row.arrival_s + 2.5 if row.slo_e2e_s == 2.5 else math.inf)
        assert 0 <= f["generated_tokens"] < row.output_tokens and not f["finished"]
        if what == "pop":  # waiting: nothing computed or held (a prefix-cache hit comes with admission)
            assert f["computed_tokens"] == f["kv_blocks"] == 0
            assert (f["generated_tokens"] > 0) == (f["first_token_s"] == f["first_token_s"])  # NaN before
            assert f["preemptions"] > 0 or f["generated_tokens"] == 0  # a request with tokens waits again only preempted
        else:  # running, as the last step left it
            assert f["computed_tokens"] <= row.prompt_tokens + f["generated_tokens"]
            assert f["kv_blocks"] == -(-f["computed_tokens"] // 16)
            assert f["prompt_computed"] == min(f["computed_tokens"], row.prompt_tokens)
            if what == "preempt":
                assert f["generated_tokens"] >= 1 and f["computed_tokens"] == row.prompt_tokens + f["generated_tokens"] - 1
                assert f["first_token_s"] <= now


def test_a_job_without_a_backend_reads_as_nothing_done():
    job = Job(3, 1.0, 10.0, 7)
    assert (job.generated_tokens, job.computed_tokens, job.preemptions, job.kv_blocks, job.finished) == (0, 0, 0, 0, False)
    assert math.isnan(job.first_token_s) and math.isnan(job.predicted_tokens) and job.deadline_s == math.inf
    assert (job.slo_class, job.tenant) == ("all", "") and not job.produced_since_admission


# -- the hook's answers, checked --------------------------------------------------------------
class _Progress:
    """A state where every job has produced its first token (prompt of 4 tokens computed)."""

    def __getattr__(self, name):
        return {"generated_tokens": lambda ref: 1, "computed_tokens": lambda ref: 4}[name]


def _running(n: int, produced: bool = True) -> list[Job]:
    from schedlab.policies.base import NO_STATE

    return [Job(i, float(i), 1.0, 4, ref=i, state=_Progress() if produced else NO_STATE) for i in range(n)]


@pytest.mark.parametrize("answer, says", [
    (lambda running: [Job(9, 0.0, 1.0, 4)], "in preempt: it named request 9, which is not one of the running"),
    (lambda running: [running[0], running[0]], "in preempt: it named request 0 twice"),
])
def test_a_hook_names_running_requests_once(answer, says):
    class Hook(FCFS):
        def preempt(self, running, now, free_slots):
            return answer(running)

    queue = CheckedQueue(Hook(), lambda job: None)
    assert queue.preempts
    with pytest.raises(PluginError, match=says):
        queue.preempt(_running(2), 0.0, 0)


def test_a_hook_cannot_preempt_a_request_before_its_next_token():
    """So no run preempts and re-admits a request for ever without progress."""
    class Eager(FCFS):
        def preempt(self, running, now, free_slots):
            return list(running)

    queue = CheckedQueue(Eager(), lambda job: None)
    running = _running(2)
    assert queue.preempt(running, 0.0, 0) == running  # each produced its first token: allowed
    with pytest.raises(PluginError, match="it named request 0, which has not generated a token since its admission"):
        queue.preempt(_running(2, produced=False), 0.0, 0)


def test_a_preemptive_keyed_policy_moves_only_as_many_as_wait_beyond_the_free_slots():
    class Least(KeyedPolicy):
        preemptive = True

        def key(self, job, now):
            return job.request_id

    policy = Least()
    running = _running(3)  # keys 0, 1, 2
    for rid in (-2, -1, 5):  # two waiting jobs of smaller keys than any running one, one larger
        policy.push(Job(rid, 0.0, 1.0, 4))
    assert [j.request_id for j in policy.preempt(running, 0.0, free_slots=0)] == [2, 1]
    assert [j.request_id for j in policy.preempt(running, 0.0, free_slots=1)] == [2]  # -2 takes the free slot
    assert policy.preempt(running, 0.0, free_slots=2) == []


@pytest.mark.slow
def test_a_step_that_only_preempts_is_planned_again_at_once_on_both_backends(recording):
    """Under memory pressure the first running request can be its own victim (the request of
    the largest key): the step preempts and schedules nothing. vLLM's engine then schedules again
    at once, as schedlab's engine does; vllm-sim once moved its clock to the next arrival
    instead."""
    trace = two_class_trace(300, rate=8.0, seed=3, shuffled_ids=True, prompt=(1, 1500), output=(1, 400))
    arena = Arena(StepTimeModel(intercept=0.004, n_prefill_tokens=3e-5, n_decode=1e-4, ctx_tokens=1e-7),
                  EngineConfig(max_num_seqs=32, max_num_batched_tokens=1024, block_size=16, kv_capacity_blocks=900))
    Recording.records = []
    sim = serve(trace, "recording", arena).requests
    boundaries = [(r[1], r[2]) for r in Recording.records if r[0] == "running"]
    assert len(set(boundaries)) < len(boundaries)  # a request running at two boundaries at one time
    vs = serve(trace, "recording", arena, backend="vllm-sim", model="tiny-llama").requests
    for col in ("first_scheduled_s", "first_token_s", "finish_s"):
        np.testing.assert_allclose(vs[col], sim[col], rtol=1e-9, atol=1e-9, err_msg=col)
    assert (vs["preemptions"] == sim["preemptions"]).all()
