"""schedlab policies inside vLLM's real v1 Scheduler, and the vllm-sim backend."""

from __future__ import annotations

import os
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("vllm")

from schedlab.backends.vllm.build import build_scheduler, make_request  # noqa: E402
from schedlab.backends.vllm.scheduler import PolicyQueue  # noqa: E402
from schedlab.policies import Job  # noqa: E402
from schedlab.backends.vllm_sim.run import run_vllm_sim  # noqa: E402
from schedlab.examples import TOY_KAPPA, TOY_STEP, toy_trace  # noqa: E402
from schedlab import registry  # noqa: E402
from schedlab.engine import Arena, EngineConfig, engine_config  # noqa: E402
from schedlab.simulate import run_summary  # noqa: E402
from schedlab.engine.steptime import StepTimeModel  # noqa: E402
from schedlab.workload.arrivals import arrival_times
from schedlab.workload.synthetic import random_lengths_trace  # noqa: E402
from schedlab.workload.asr import asr_trace, librispeech_pool  # noqa: E402
from vllm.v1.outputs import ModelRunnerOutput  # noqa: E402

POLICIES = ("fcfs", "sjf", "hrrn")


def _step(sched):
    """One scheduler step with a synthetic model output; returns (output, finished ids)."""
    out = sched.schedule()
    ids = list(out.num_scheduled_tokens)
    sampled = [[] if sched.requests[r].is_prefill_chunk else [100] for r in ids]
    res = sched.update_from_output(
        out, ModelRunnerOutput(req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)}, sampled_token_ids=sampled)
    )
    return out, {o.request_id for e in res.values() for o in e.outputs if o.finish_reason is not None}


# -- the waiting queue ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "policy, expected",
    [("fcfs", ["a", "b", "c", "d"]), ("sjf", ["c", "a", "d", "b"]), ("hrrn", ["c", "a", "b", "d"])],
)
def test_admission_order_follows_the_policy(policy, expected):
    """One request admitted per step (max_num_seqs grows as requests finish instantly)."""
    engine = EngineConfig(max_num_seqs=1, max_num_batched_tokens=256, block_size=16, kv_capacity_blocks=64)
    sched = build_scheduler("tiny-llama", engine, policy=policy, kappa={"en": 1.0})
    sched.clock = lambda: 10.0
    # (id, arrival, audio seconds): n_hat = floor(duration) with kappa 1.
    for rid, arrival, dur in [("a", 0.0, 8.0), ("b", 1.0, 30.0), ("c", 2.0, 2.0), ("d", 9.0, 12.0)]:
        sched.add_request(make_request(rid, 8, 1, arrival, extra_args={"audio_duration_s": dur, "language": "en"}))
    order = []
    for _ in range(50):
        out, _ = _step(sched)
        order += [r.req_id for r in out.scheduled_new_reqs]
        if not sched.has_unfinished_requests():
            break
    # HRRN at t=10: a 1+10/8=2.25, b 1+9/30=1.3, c 1+8/2=5, d 1+1/12=1.08 -> c, a, then b vs d.
    assert order == expected


def test_peek_and_pop_agree_when_the_clock_moves():
    """HRRN's choice flips between t=5.5 and t=6; pop returns what peek showed."""
    now = {"t": 5.5}
    queue = PolicyQueue(registry.make("hrrn"), lambda r: r, lambda: now["t"])
    a, b = Job(0, 0.0, 10.0, 0), Job(1, 5.0, 1.0, 0)
    a.ref, b.ref = a, b  # the queue hands back ``job.ref``
    queue.add_request(a)
    queue.add_request(b)
    assert queue.peek_request() is a  # 1.55 vs 1.5
    now["t"] = 6.0  # now b leads: 1.6 vs 2.0
    assert queue.pop_request() is a
    assert queue.pop_request() is b and not queue


def test_queue_remove_and_prepend():
    queue = PolicyQueue(registry.make("sjf"), lambda r: r, lambda: 0.0)
    jobs = [Job(i, float(i), float(s), 0) for i, s in enumerate([5, 3, 9])]
    for j in jobs:
        j.ref = j
        queue.add_request(j)
    queue.remove_requests([jobs[1]])
    assert len(queue) == 2 and set(queue) == {jobs[0], jobs[2]}
    queue.prepend_requests([jobs[1]])
    assert [queue.pop_request() for _ in range(3)] == [jobs[1], jobs[0], jobs[2]]


# -- victims ---------------------------------------------------------------------------------
@pytest.mark.parametrize("policy, victim", [("fcfs", "c"), ("sjf", "a"), ("hrrn", "b")])
def test_preemption_victim_is_the_policys(policy, victim):
    """Three running requests outgrow a 6-block pool at their 33rd token.

    At t=2: sizes a=30, b=20, c=1; ratios a=1+2/30=1.067, b=1+1/20=1.05, c=1+0.1/1=1.1.
    FCFS evicts the newest admitted (c), SJF the largest (a), HRRN the lowest ratio (b).
    """
    engine = EngineConfig(max_num_seqs=3, max_num_batched_tokens=64, block_size=16, kv_capacity_blocks=6)
    sched = build_scheduler("tiny-llama", engine, policy=policy, kappa={"en": 1.0})
    sched.clock = lambda: 2.0
    for rid, arrival, dur in [("a", 0.0, 30.0), ("b", 1.0, 20.0), ("c", 1.9, 1.0)]:
        sched.add_request(make_request(rid, 16, 100, arrival, extra_args={"audio_duration_s": dur}))
    preempted = set()
    for _ in range(40):
        out, _ = _step(sched)
        preempted |= set(out.preempted_req_ids)
        if preempted:
            break
    assert preempted == {victim}


def test_head_of_line_request_waits_until_it_fits():
    """A waiting request whose whole sequence does not fit is not admitted, nor overtaken."""
    engine = EngineConfig(max_num_seqs=4, max_num_batched_tokens=512, block_size=16, kv_capacity_blocks=9)
    sched = build_scheduler("tiny-llama", engine, policy="fcfs", kappa={})
    sched.add_request(make_request("big", 96, 40, 0.0))  # 6 blocks, grows to all 9
    sched.add_request(make_request("bigger", 64, 2, 0.1))  # 4 blocks: 3 are free beside it
    sched.add_request(make_request("small", 8, 2, 0.2))  # 1 block would fit, but waits its turn
    admitted = []
    for _ in range(200):
        out, _ = _step(sched)
        admitted += [r.req_id for r in out.scheduled_new_reqs]
        if len(admitted) == 1:
            assert len(sched.waiting) == 2
        if not sched.has_unfinished_requests():
            break
    assert admitted == ["big", "bigger", "small"]


# -- vllm-sim against sim ------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize(
    "policy, finish", [("fcfs", [9, 14, 17]), ("sjf", [17, 8, 3]), ("hrrn", [9, 17, 12])]
)
def test_vllm_scheduler_reproduces_the_toy_example(policy, finish):
    """Paper A's toy through vLLM's scheduler with Whisper's encoder path: exact times."""
    engine = engine_config("A100-40GB", "whisper-tiny", max_num_seqs=1, max_num_batched_tokens=2048)
    res = run_vllm_sim(toy_trace(), policy, Arena(TOY_STEP, engine, {"en": TOY_KAPPA}), model="whisper-tiny")
    np.testing.assert_allclose(res.requests["finish_s"], finish, atol=1e-9)


def _whisper_trace(rate, n, seed=0):
    rng = np.random.default_rng(seed)
    dur = np.clip(rng.lognormal(1.8, 0.6, 400), 1.3, 35.0)
    utts = pd.DataFrame({"duration_s": dur, "output_tokens": np.maximum(1, np.round(3 * dur)).astype(int)})
    arrivals = arrival_times(rate, rng=np.random.default_rng([seed, 0]), n_requests=n)
    return asr_trace(librispeech_pool(utts), arrivals, rng=np.random.default_rng([seed, 1]))


WHISPER_STEP = StepTimeModel(intercept=0.0012, n_encoder=0.045, n_prefill_tokens=0.0013, n_decode=0.00015, ctx_tokens=1e-7)


@pytest.mark.parametrize("policy", POLICIES)
def test_vllm_sim_equals_sim_on_whisper(policy):
    """Same trace, policy and step model: identical per-request times, up to overload."""
    trace = _whisper_trace(rate=25.0, n=250)
    engine = engine_config("A100-40GB", "whisper-large-v3", max_num_batched_tokens=2048)
    # with a served engine's front end on both sides of the scheduler
    arena = Arena(replace(WHISPER_STEP, frontend_s=0.03, output_s=0.01), engine, {"en": 3.0})
    sim = run_summary(trace, policy, arena, identity={})[0].requests
    vs = run_summary(trace, policy, arena, identity={}, backend="vllm-sim", model="whisper-large-v3")[0].requests
    for col in ("first_scheduled_s", "first_token_s", "finish_s"):
        np.testing.assert_allclose(vs[col], sim[col], rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("policy", ["fcfs", "hrrn"])
def test_vllm_sim_equals_sim_under_kv_pressure(policy):
    """Decoder-only, chunked prefill, a pool small enough for dozens of preemptions."""
    rng = np.random.default_rng(3)
    n = 150
    trace = random_lengths_trace(arrival_times(20.0, rng=rng, n_requests=n), rng=rng, prompt=(16, 600), output=(4, 200))
    step = StepTimeModel(intercept=0.004, n_prefill_tokens=2e-5, n_decode=1e-4, ctx_tokens=1e-7)
    engine = EngineConfig(max_num_seqs=32, max_num_batched_tokens=512, block_size=16, kv_capacity_blocks=250)
    sim = run_summary(trace, policy, Arena(step, engine, {}), identity={})[0].requests
    vs = run_summary(trace, policy, Arena(step, engine, {}), identity={}, backend="vllm-sim", model="tiny-llama")[0].requests
    assert sim["preemptions"].sum() > 10
    np.testing.assert_array_equal(vs["preemptions"], sim["preemptions"])
    np.testing.assert_allclose(vs["finish_s"], sim["finish_s"], rtol=1e-9)


def test_paper_d_mapping_served_by_vllms_scheduler_equals_sim():
    """A simulated-annealing mapping served with each request's batch index as its priority:
    vLLM's scheduler admits the batches in order, exactly as the sim engine does."""
    from schedlab.fit.latency_predictor import REFERENCE
    from schedlab.latency.catalogue import hardware, model_arch
    from schedlab.slosa.dispatch import paper_engine, serve
    from schedlab.slosa.problem import MappingProblem
    from schedlab.slosa.search import AnnealConfig, anneal

    rng = np.random.default_rng(4)
    n = 16
    req = pd.DataFrame({
        "request_id": np.arange(n),
        "prompt_tokens": rng.integers(50, 1500, n),
        "output_tokens": rng.integers(20, 300, n),
        "task": rng.choice(["chat", "code"], n),
    })
    mapping = anneal(MappingProblem.build(req, REFERENCE, 4), AnnealConfig(early_exit=False)).mapping
    engine = paper_engine(hardware("2xV100-32GB"), model_arch("qwen2.5-7b"))
    sim = serve(req, mapping, engine)
    vs = serve(req, mapping, engine, backend="vllm-sim", model="qwen2.5-7b")
    rank = mapping.rank()
    first = vs["first_scheduled_s"].to_numpy()
    assert all(first[rank == j].max() <= first[rank == j + 1].min() for j in range(len(mapping.sizes) - 1))
    for col in ("first_scheduled_s", "first_token_s", "finish_s"):
        np.testing.assert_allclose(vs[col], sim[col], rtol=1e-9, atol=1e-9, err_msg=col)


@pytest.mark.parametrize("policy", ["ewsjf", "sjf-prompt"])
def test_vllm_sim_equals_sim_for_prompt_length_policies(policy):
    """Paper B's registry policies in vLLM's scheduler: the job's prompt length is the
    request's, and EWSJF's decisions (one per clock reading, with refits after 512 arrivals)
    match the sim engine's request for request."""
    rng = np.random.default_rng(5)
    n = 700
    trace = random_lengths_trace(arrival_times(60.0, rng=rng, n_requests=n), rng=rng, prompt=(16, 600), output=(2, 40))
    step = StepTimeModel(intercept=0.004, n_prefill_tokens=4e-5, n_decode=1e-4, ctx_tokens=1e-7)
    engine = EngineConfig(max_num_seqs=16, max_num_batched_tokens=512, block_size=16, kv_capacity_blocks=2000)
    sim = run_summary(trace, policy, Arena(step, engine, {}), identity={})[0].requests
    vs = run_summary(trace, policy, Arena(step, engine, {}), identity={}, backend="vllm-sim", model="tiny-llama")[0].requests
    fcfs = run_summary(trace, "fcfs", Arena(step, engine, {}), identity={})[0].requests
    assert not np.allclose(sim["first_scheduled_s"], fcfs["first_scheduled_s"])  # the order differs from FCFS
    for col in ("first_scheduled_s", "first_token_s", "finish_s"):
        np.testing.assert_allclose(vs[col], sim[col], rtol=1e-9, atol=1e-9)


def test_policy_sees_one_clock_reading_per_step():
    """With a live clock that moves on every read, EWSJF still makes one decision per
    ``schedule()`` (a batch), and the policy's waits are measured from that step's reading."""
    engine = EngineConfig(max_num_seqs=8, max_num_batched_tokens=512, block_size=16, kv_capacity_blocks=200)
    sched = build_scheduler("tiny-llama", engine, policy="ewsjf", kappa={})
    ticks = iter(np.arange(100.0, 200.0, 0.5))
    sched.clock = lambda: float(next(ticks))
    for i in range(6):
        sched.add_request(make_request(str(i), 20 + 10 * i, 2, 0.0))
    out, _ = _step(sched)
    assert len(out.scheduled_new_reqs) == 6
    assert sched.schedlab_policy.decisions == 1


@pytest.mark.parametrize("name", registry.names(registry.QUEUE))
def test_vllm_sim_equals_sim_for_every_registered_queue_policy(name):
    """Every registered waiting-queue policy, plug-ins and paper D's online mapper (which is
    handed the whole trace) included: identical per-request times and preemptions on
    vLLM's scheduler and on schedlab's engine, with a pool small enough to preempt."""
    rng = np.random.default_rng(8)
    n = 120
    trace = random_lengths_trace(arrival_times(25.0, rng=rng, n_requests=n), rng=rng, prompt=(16, 500), output=(4, 120))
    code = rng.random(n) < 0.5
    trace = trace.assign(slo_ttft_s=np.where(code, np.nan, 0.5), slo_tpot_s=np.where(code, np.nan, 0.05),
                         slo_e2e_s=np.where(code, 8.0, np.nan))
    step = StepTimeModel(intercept=0.004, n_prefill_tokens=3e-5, n_decode=1e-4, ctx_tokens=1e-7)
    engine = EngineConfig(max_num_seqs=24, max_num_batched_tokens=512, block_size=16, kv_capacity_blocks=300)
    arena = Arena(step, engine, {})
    sim = run_summary(trace, name, arena, identity={})[0].requests
    vs = run_summary(trace, name, arena, identity={}, backend="vllm-sim", model="tiny-llama")[0].requests
    assert sim["finish_s"].notna().all()
    np.testing.assert_array_equal(vs["preemptions"], sim["preemptions"])
    for col in ("first_scheduled_s", "first_token_s", "finish_s"):
        np.testing.assert_allclose(vs[col], sim[col], rtol=1e-9, atol=1e-9, err_msg=col)


def test_the_expected_vllm_release_is_the_one_imported():
    """`make test-compat` runs these tests against another vLLM release put first on the path:
    this one fails if the path did not take."""
    import vllm

    expected = os.environ.get("SCHEDLAB_EXPECT_VLLM")
    if expected is None:
        pytest.skip("not a compatibility run (SCHEDLAB_EXPECT_VLLM unset)")
    assert vllm.__version__ == expected
