"""Paper C's schedulers inside vLLM's real v1 Scheduler, by step plans (``vllm_plan``): the same
per-request times as schedlab's engine, SLO hints through the request path, and a divergence
reported when vLLM cannot carry a plan out."""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("vllm")

from schedlab.backends.vllm.build import build_scheduler, make_request  # noqa: E402
from schedlab.backends.vllm_sim.run import run_vllm_sim  # noqa: E402
from schedlab.engine import Arena, EngineConfig, run  # noqa: E402
from schedlab.engine.steptime import StepTimeModel  # noqa: E402
from schedlab import registry  # noqa: E402
from schedlab.simulate import scheduler_for as make_builder  # noqa: E402

SCHEDULERS = registry.names(registry.BATCH)
from traces import two_class_trace  # noqa: E402
from vllm.v1.outputs import ModelRunnerOutput  # noqa: E402

#: Paper C's model shape: fixed cost, per-token, attention pairs and the GEMM tile staircase.
STEP = StepTimeModel(intercept=0.02, n_prefill_tokens=5e-5, n_decode=1e-4, ctx_tokens=1e-8, prefill_pairs=1e-9,
                     tile_tokens=1e-5, tile=128)
MODEL = "mistral-7b"  # a 32k context: every request of the traces fits


def small_trace() -> pd.DataFrame:
    return two_class_trace(70, 3.0, 2, prompt=(20, 2000), output=(1, 300), targets=(0.05, 0.2))


@pytest.mark.slow
@pytest.mark.parametrize("capacity, max_num_seqs", [(100_000, 256), (500, 256), (100_000, 6)])
@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_vllm_sim_equals_sim_for_every_paper_c_scheduler(name, capacity, max_num_seqs, caplog):
    """Identical per-request times and preemptions, with and without KV pressure and with an
    engine whose running cap is below the builders' own, and no step where vLLM ran something
    other than the plan."""
    trace = small_trace()
    arena = Arena(STEP, EngineConfig(kv_capacity_blocks=capacity, max_num_seqs=max_num_seqs))
    sim = run(trace, make_builder(name), arena, sample_s=1.0)
    with caplog.at_level(logging.WARNING, logger="schedlab.backends.vllm.plan"):
        vs = run_vllm_sim(trace, name, arena, model=MODEL, sample_s=1.0)
    assert not [r for r in caplog.records if "instead of the plan" in r.getMessage()]
    for col in ("first_scheduled_s", "first_token_s", "finish_s", "max_gap_s"):
        np.testing.assert_allclose(vs.requests[col], sim.requests[col], rtol=1e-9, atol=1e-9, err_msg=col)
    np.testing.assert_array_equal(vs.requests["preemptions"], sim.requests["preemptions"])
    if capacity < 1000 and name not in ("request-level", "algorithm2"):
        assert sim.requests["preemptions"].sum() > 0
    assert vs.steps == sim.steps
    for cls, hist in sim.class_gaps.items():
        assert vs.class_gaps[cls].total == hist.total
    pd.testing.assert_frame_equal(vs.timeline[["t_s", "running"]], sim.timeline[["t_s", "running"]])
    assert sim.timeline["running"].max() <= max_num_seqs


def _step(sched, now):
    sched.clock = lambda: now
    out = sched.schedule()
    ids = list(out.num_scheduled_tokens)
    sampled = [[] if sched.requests[r].is_prefill_chunk else [100] for r in ids]
    sched.update_from_output(
        out, ModelRunnerOutput(req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)}, sampled_token_ids=sampled))
    return out


def test_slo_hints_reach_slai_and_a_bad_hint_serves_the_request_without_a_target(caplog):
    sched = build_scheduler(MODEL, EngineConfig(kv_capacity_blocks=10_000), builder="slai-spf-fixed10")
    hints = {
        "strict": {"slo_class": "paying", "tbt_target_s": 0.05},
        "relaxed": {"slo_class": "free", "tbt_target_s": 0.5},
        "list": {"slo_class": ["paying"], "tbt_target_s": 0.05},
        "nan": {"slo_class": "paying", "tbt_target_s": float("nan")},
        "huge": {"tbt_target_s": 1e300},
    }
    with caplog.at_level(logging.WARNING, logger="schedlab.backends.vllm.plan"):
        for rid, h in hints.items():
            sched.add_request(make_request(rid, 16, 20, 0.0, extra_args=h))
    view = sched.view
    got = {rid: (view.slo_class[view.index[rid]], view.target[view.index[rid]]) for rid in hints}
    assert got["strict"] == ("paying", 0.05) and got["relaxed"] == ("free", 0.5)
    for rid in ("list", "nan", "huge"):
        assert got[rid] == ("all", np.inf)
    assert sum("no target" in r.getMessage() for r in caplog.records) == 3
    now = 0.0
    while sched.has_unfinished_requests():
        now += 0.01
        _step(sched, now)
    assert all(sched.requests.get(rid) is None or sched.requests[rid].is_finished() for rid in hints)


def test_a_plan_vllm_cannot_carry_out_is_reported_not_hidden(caplog):
    """A view that overstates free KV makes the builder plan admissions vLLM's KV manager
    refuses: the step is logged and recorded, and the next plan starts from vLLM's state."""
    sched = build_scheduler(MODEL, EngineConfig(kv_capacity_blocks=40, block_size=16), builder="request-level")
    for k in range(4):
        sched.add_request(make_request(str(k), 300, 5, 0.0))
    real = sched._kv_free
    sched._kv_free = lambda: 10 * real()
    with caplog.at_level(logging.WARNING, logger="schedlab.backends.vllm.plan"):
        _step(sched, 0.1)
    assert sched.divergences and "instead of the plan" in caplog.text
    step, planned, ran = sched.divergences[0]
    assert sum(planned.values()) > sum(ran.values())
    sched._kv_free = real
    now = 0.1
    while sched.has_unfinished_requests() and now < 10:
        now += 0.05
        _step(sched, now)
    assert not sched.has_unfinished_requests()


def test_aborted_requests_leave_the_plan_and_the_rest_is_served():
    from vllm.v1.request import RequestStatus

    sched = build_scheduler(MODEL, EngineConfig(kv_capacity_blocks=10_000), builder="sarathi-spf")
    for k in range(6):
        sched.add_request(make_request(str(k), 100 + 50 * k, 30, 0.0))
    _step(sched, 0.1)
    running = [r.request_id for r in sched.running]
    waiting = [r.request_id for r in sched.waiting]
    sched.finish_requests([running[0], waiting[0]], RequestStatus.FINISHED_ABORTED)
    now = 0.1
    while sched.has_unfinished_requests() and now < 20:
        now += 0.05
        _step(sched, now)
    assert not sched.has_unfinished_requests() and not sched.divergences
    assert sched.builder.n_waiting() == 0
