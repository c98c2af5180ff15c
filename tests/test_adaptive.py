"""Adaptive FCFS/SJF/HRRN switching: the rule's regimes, hysteresis, queue invariants, victims,
the drifting workload, and the study's effect (and where switching cannot help)."""

from __future__ import annotations


import numpy as np
import pandas as pd
import pytest

from schedlab.errors import SchedlabError
from schedlab import registry
from schedlab.policies import Job

make_policy = lambda name: registry.make(name, kind=registry.QUEUE)
from schedlab.policies.adaptive import Adaptive, SwitchRule
from schedlab.policies.hrrn import HRRN
from schedlab.policies.sjf import SJF
from schedlab.engine import Arena, engine_config
from schedlab.engine.steptime import StepTimeModel
from schedlab.extensions.switching import switching_study
from schedlab.workload.drift import drift_trace, parse_phases


def J(request_id: int, arrival_s: float, size: float, prompt_tokens: int = 1) -> Job:
    return Job(request_id, arrival_s, size, prompt_tokens)


#: Small thresholds so states are easy to build: FCFS at <= 2 waiting, deep at >= 4, tail at 10 s.
RULE = SwitchRule(shallow_depth=2, deep_depth=4, tail_low_s=5.0, tail_high_s=10.0, min_dwell_s=1.0)


def filled(policy, jobs):
    for j in jobs:
        policy.push(j)
    return policy


def drain(policy, now: float) -> list[int]:
    return [policy.pop(now).request_id for _ in range(len(policy))]


# -- the rule -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "bad",
    [dict(shallow_depth=4, deep_depth=4), dict(shallow_depth=-1), dict(tail_q=0.0), dict(tail_q=1.5),
     dict(tail_low_s=10.0, tail_high_s=10.0), dict(min_dwell_s=-1.0), dict(tail_policy="sjf")],
)
def test_rule_rejects_bad_parameters_with_one_line(bad):
    with pytest.raises(SchedlabError) as e:
        SwitchRule(**bad)
    assert "\n" not in str(e.value)


def test_shallow_queue_orders_fcfs():
    q = filled(Adaptive(RULE), [J(0, 0.0, 90.0), J(1, 0.1, 5.0)])  # depth 2 <= shallow_depth
    assert drain(q, now=30.0) == [0, 1]  # even with a long wait, size ignored
    assert q.active == "fcfs" and q.switches == []


def test_deep_queue_with_short_waits_orders_sjf():
    jobs = [J(i, 0.1 * i, s) for i, s in enumerate([50.0, 7.0, 30.0, 7.0, 3.0])]
    q = filled(Adaptive(RULE), jobs)
    assert q.pop(1.0).request_id == 4  # depth 5 >= deep_depth, tail wait < 1 s: smallest first
    assert q.active == "sjf"
    (sw,) = q.switches
    assert (sw.time_s, sw.from_policy, sw.to_policy, sw.regime, sw.depth) == (1.0, "fcfs", "sjf", "deep", 5)
    assert drain(q, 1.0) == [1, 3, 2, 0]  # SJF's tie-break: equal sizes by arrival


def _aged():
    """Five jobs where FCFS, SJF and HRRN each pick a different first job at t=100."""
    return [J(0, 0.0, 90.0), J(1, 40.0, 20.0), J(2, 88.0, 2.0), J(3, 95.0, 1.0), J(4, 60.0, 60.0)]


@pytest.mark.parametrize("tail_policy, first", [("fcfs", 0), ("hrrn", 2)])
def test_large_tail_wait_switches_to_the_tail_policy(tail_policy, first):
    now = 100.0
    jobs = _aged()
    hrrn_first = HRRN()
    filled(hrrn_first, jobs)
    assert hrrn_first.peek(now).request_id == 2 and min(jobs, key=lambda j: j.size).request_id == 3
    q = filled(Adaptive(SwitchRule(**{**RULE.__dict__, "tail_policy": tail_policy})), jobs)
    assert q.tail_wait(now) >= RULE.tail_high_s
    assert q.pop(now).request_id == first
    assert (q.regime, q.active) == ("tail", tail_policy)


def test_hysteresis_and_dwell_keep_it_from_flapping():
    q = Adaptive(RULE)
    rid = iter(range(10_000))
    t = 0.0

    def step(depth_before_pop: int) -> str:
        nonlocal t
        t += 0.05
        filled(q, [J(next(rid), t, 1.0) for _ in range(depth_before_pop - len(q))])
        while len(q) > depth_before_pop:  # removals take no decision
            q.remove(next(iter(q)))
        q.pop(t)
        return q.active

    # Depth 3 at decisions, above shallow (2) but not deep (4): FCFS stays...
    assert {step(3) for _ in range(40)} == {"fcfs"}
    assert step(5) == "sjf"
    t += RULE.min_dwell_s
    # ...and once deep, depth 3 (below deep, above shallow) keeps SJF.
    assert {step(d) for d in [3, 4] * 20} == {"sjf"}
    assert len(q.switches) == 1
    # Depth alternating across both thresholds (2 <-> 5) every 0.05 s: at most one change per dwell.
    for k in range(200):
        step(5 if k % 2 else 2)
    times = np.array([s.time_s for s in q.switches])
    assert len(times) >= 8  # it does react...
    assert np.all(np.diff(times) >= RULE.min_dwell_s - 1e-9)  # ...but never faster than the dwell


# -- the queue ------------------------------------------------------------------------------
def _churn(seed: int, rule=RULE):
    """Random arrivals, pops, re-queues (preemptions) and removals across regime changes;
    returns the policy, what was popped, peeked-vs-popped pairs, and every job pushed."""
    rng = np.random.default_rng(seed)
    q = Adaptive(rule)
    ids = iter(range(10_000))
    jobs, popped, pairs, waiting = [], [], [], set()
    t = 0.0
    for i in range(400):
        t += float(rng.exponential(0.2))
        for _ in range(int(rng.integers(0, 3)) if i < 200 else 0):
            j = J(next(ids), t, float(rng.integers(1, 90)))
            jobs.append(j)
            q.push(j)
            waiting.add(j.request_id)
        if len(q) and (i >= 200 or rng.random() < 0.6):
            seen = q.peek(t)
            got = q.pop(t)
            pairs.append((seen, got))
            popped.append(got)
            waiting.discard(got.request_id)
            if rng.random() < 0.05:  # preempted: back to waiting
                q.push(got)
                waiting.add(got.request_id)
                popped.pop()
        if len(q) and rng.random() < 0.02:
            gone = next(iter(q))
            q.remove(gone)
            waiting.discard(gone.request_id)
            jobs.remove(gone)
    return q, popped, pairs, jobs, waiting, t


def test_peek_and_pop_agree_across_switches():
    q, _, pairs, *_ = _churn(0)
    assert {s.regime for s in q.switches} == {"shallow", "deep", "tail"}
    assert all(seen is got for seen, got in pairs)


def test_no_job_lost_or_duplicated_across_switches():
    q, popped, _, jobs, waiting, t = _churn(1, SwitchRule(shallow_depth=2, deep_depth=4, tail_low_s=1.0,
                                                      tail_high_s=3.0, min_dwell_s=0.5, tail_policy="hrrn"))
    assert {s.to_policy for s in q.switches} == {"sjf", "hrrn", "fcfs"}
    assert {j.request_id for j in q} == waiting
    rest = [q.pop(t + 1.0) for _ in range(len(q))]
    ids = [j.request_id for j in popped + rest]
    assert len(ids) == len(set(ids)) and set(ids) == {j.request_id for j in jobs}


def test_pinned_to_one_regime_it_is_that_policy():
    rng = np.random.default_rng(4)
    jobs = [J(i, float(rng.integers(0, 5)), float(rng.integers(1, 6))) for i in rng.permutation(60)]
    never_deep = Adaptive(SwitchRule(shallow_depth=1000, deep_depth=1001))
    assert drain(filled(never_deep, jobs), 7.0) == [j.request_id for j in sorted(jobs, key=lambda j: (j.arrival_s, j.request_id))]
    always_sjf = Adaptive(SwitchRule(shallow_depth=0, deep_depth=1, tail_low_s=1e9, tail_high_s=2e9))
    assert drain(filled(always_sjf, jobs), 7.0) == drain(filled(SJF(), jobs), 7.0)


def test_victim_follows_the_active_policy():
    now = 100.0
    running = _aged()
    q = Adaptive(RULE)
    # FCFS regime: the engine's default, the newest admitted — here a preempted, re-admitted
    # job that arrived first.
    old, young = filled(q, running[:2]).pop(now), q.pop(now)
    q.push(old)
    assert q.pop(now) is old
    assert q.active == "fcfs" and q.victim([young, old], now) is old
    # SJF and HRRN regimes: exactly those policies' victims.
    deep = filled(Adaptive(RULE), [J(10 + i, now - 0.5, 5.0) for i in range(5)])
    deep.pop(now)
    assert deep.active == "sjf" and deep.victim(running, now) is SJF().victim(running, now)
    tail = filled(Adaptive(SwitchRule(**{**RULE.__dict__, "tail_policy": "hrrn"})), _aged())
    tail.pop(now)
    assert tail.active == "hrrn" and tail.victim(running, now) is HRRN().victim(running, now)
    assert SJF().victim(running, now) is not HRRN().victim(running, now)


def test_registered_with_tuned_defaults():
    assert make_policy("adaptive").rule == SwitchRule()
    assert make_policy("adaptive-hrrn").rule == SwitchRule(tail_policy="hrrn")


# -- the drifting workload ------------------------------------------------------------------
def utterances(seed: int = 0, n: int = 400) -> pd.DataFrame:
    """LibriSpeech-like clips: right-skewed durations, ~3 Whisper tokens per second."""
    dur = np.clip(np.random.default_rng(seed).lognormal(1.8, 0.6, n), 1.3, 35.0)
    return pd.DataFrame({"duration_s": dur, "output_tokens": np.maximum(1, np.round(3 * dur)).astype(int)})


def test_drift_trace_plays_phases_back_to_back():
    phases = [{"name": "a", "duration_s": 20, "rate": 5, "pool": "librispeech"},
              {"name": "b", "duration_s": 10, "rate": 20, "pool": "uniform"}]
    tr = drift_trace(utterances(), phases, seed=3)
    a, b = tr[tr.phase == "a"], tr[tr.phase == "b"]
    assert a.arrival_s.between(0, 20, inclusive="left").all() and b.arrival_s.between(20, 30, inclusive="left").all()
    assert (tr.request_id.to_numpy() == np.arange(len(tr))).all() and tr.arrival_s.is_monotonic_increasing
    assert set(b.audio_duration_s) <= {5.0, 10.0, 15.0, 20.0, 25.0, 30.0}
    assert 60 < len(a) < 140 and 130 < len(b) < 270
    pd.testing.assert_frame_equal(tr, drift_trace(utterances(), phases, seed=3))
    assert not tr.equals(drift_trace(utterances(), phases, seed=4))


@pytest.mark.parametrize(
    "phases, msg",
    [([], "at least one"), ([{"duration_s": 1, "rate": 1}], "missing"),
     ([{"duration_s": 1, "rate": -1, "pool": "librispeech"}], "rate"),
     ([{"duration_s": 1, "rate": 1, "pool": "fleurs"}], "pool 'fleurs': unknown workload kind"),
     ([{"duration_s": 1, "rate": 1, "pool": "openchat"}], "makes llm requests, not asr"),
     ([{"duration_s": 1, "rate": 1, "pool": "uniform", "burst": 2}], "unknown keys"),
     ([{"name": "x", "duration_s": 1, "rate": 1, "pool": "uniform"}] * 2, "distinct")],
)
def test_bad_phases_are_one_line_errors(phases, msg):
    with pytest.raises(SchedlabError, match=msg):
        parse_phases(phases)


# -- the study ------------------------------------------------------------------------------
STEP = StepTimeModel(intercept=0.0012, n_encoder=0.045, n_prefill_tokens=0.0013, n_decode=0.00015, ctx_tokens=1e-7)
ENGINE = engine_config("A100-40GB", "whisper-large-v3", max_num_batched_tokens=2048)
KAPPA = {"en": 3.0}
SURGE = [{"name": "light", "duration_s": 20, "rate": 5, "pool": "librispeech"},
         {"name": "surge", "duration_s": 40, "rate": 24, "pool": "librispeech"},
         {"name": "after", "duration_s": 20, "rate": 5, "pool": "librispeech"}]


@pytest.fixture(scope="module")
def surge_study():
    return switching_study(utterances(), Arena(STEP, ENGINE, KAPPA), phases=SURGE, seed=0)


def test_under_a_surge_switching_keeps_fcfs_tail_and_beats_its_median(surge_study):
    s = surge_study.summary.set_index("policy")
    ad, fcfs, sjf, hrrn = (s.loc[p] for p in ("adaptive", "fcfs", "sjf", "hrrn"))
    assert s["completed"].nunique() == 1
    # SJF starves the long clips; the tail regime serves the oldest, so the tail stays FCFS-like.
    assert sjf.p99_e2el_ms > 2 * fcfs.p99_e2el_ms
    assert ad.p99_e2el_ms < 0.5 * sjf.p99_e2el_ms and ad.p99_e2el_ms < 1.25 * fcfs.p99_e2el_ms
    assert ad.p90_e2el_ms < 0.7 * sjf.p90_e2el_ms and ad.p90_e2el_ms < hrrn.p90_e2el_ms
    # ...while the deep regime's SJF stretches serve part of the surge at once: median below FCFS's.
    assert ad.p50_e2el_ms < 0.85 * fcfs.p50_e2el_ms and ad.p50_ttft_ms < 0.85 * fcfs.p50_ttft_ms
    # HRRN as the tail regime ages too slowly to bound the tail: it keeps HRRN's.
    assert s.loc["adaptive-hrrn"].p99_e2el_ms > 1.5 * ad.p99_e2el_ms
    log = surge_study.switches[surge_study.switches.policy == "adaptive"]
    assert {"sjf", "fcfs"} <= set(log.to_policy) and log.time_s.between(20, 100).all()
    # Before the surge nothing queues deep: the adaptive run is FCFS's.
    light = surge_study.by_phase.set_index(["phase", "policy"]).loc["light"]
    pd.testing.assert_series_equal(light.loc["adaptive"], light.loc["fcfs"], check_names=False)


def test_light_steady_load_switching_changes_nothing():
    """At light load nothing queues deep: the adaptive run is FCFS's, request for request, and
    (as paper A finds) the fixed policies are all but equal too."""
    steady = [{"name": "steady", "duration_s": 60, "rate": 4, "pool": "librispeech"}]
    st = switching_study(utterances(1), Arena(STEP, ENGINE, KAPPA), phases=steady, seed=1)
    assert (st.summary["switches"] == 0).all() and st.switches.empty
    assert set(st.regimes.active) == {"fcfs"}
    s = st.summary.set_index("policy").drop(columns="switches")
    pd.testing.assert_series_equal(s.loc["adaptive"], s.loc["fcfs"], check_names=False)
    pd.testing.assert_series_equal(s.loc["adaptive-hrrn"], s.loc["fcfs"], check_names=False)
    for p in ("sjf", "hrrn"):
        for col in ("p50_e2el_ms", "p90_e2el_ms"):
            assert s.loc[p, col] == pytest.approx(s.loc["fcfs", col], rel=0.02)
    tl = st.timeline.set_index(["policy", "window_start_s"])
    pd.testing.assert_frame_equal(tl.loc["adaptive"], tl.loc["fcfs"])


def test_study_is_deterministic_and_complete(surge_study):
    again = switching_study(utterances(), Arena(STEP, ENGINE, KAPPA), phases=SURGE, seed=0)
    for name in ("summary", "by_phase", "timeline", "switches", "regimes", "phases"):
        pd.testing.assert_frame_equal(getattr(surge_study, name), getattr(again, name))
    assert list(surge_study.summary.policy) == ["fcfs", "sjf", "hrrn", "adaptive", "adaptive-hrrn"]
    assert len(surge_study.by_phase) == 5 * 3
    reg = surge_study.regimes[surge_study.regimes.policy == "adaptive"]
    assert reg.start_s.iloc[0] == 0.0 and (reg.end_s.to_numpy()[:-1] == reg.start_s.to_numpy()[1:]).all()
