"""Waiting-queue policies: orderings, tie-breaks, peek/pop agreement, victims, HRRN aging."""

from __future__ import annotations


import numpy as np
import pytest

from schedlab.errors import SchedlabError
from schedlab import registry
from schedlab.policies import Job, Policy

make_policy = lambda name: registry.make(name, kind=registry.QUEUE)
from schedlab.policies.fcfs import FCFS
from schedlab.policies.hrrn import HRRN, response_ratio
from schedlab.policies.sjf import SJF
from schedlab.policies.waiting import WaitingArrays


def J(request_id: int, arrival_s: float, size: float, prompt_tokens: int = 1) -> Job:
    return Job(request_id, arrival_s, size, prompt_tokens)


def drain(policy, now: float = 0.0) -> list[int]:
    out = []
    while len(policy):
        out.append(policy.pop(now).request_id)
    return out


def filled(policy, jobs):
    for j in jobs:
        policy.push(j)
    return policy


def ratio_key(job: J, now: float):
    """Brute-force HRRN order: highest ratio, then earliest arrival, then lowest id."""
    return (-(now - job.arrival_s + job.size) / job.size, job.arrival_s, job.request_id)


# -- registry -------------------------------------------------------------------------------
def test_registry_names_and_fresh_instances():
    assert {"fcfs", "sjf", "hrrn", "adaptive", "adaptive-hrrn", "sjf-prompt", "ewsjf"} <= set(registry.names(registry.QUEUE))
    for name in registry.names(registry.QUEUE):
        if registry.entry(name).needs:
            continue
        a, b = make_policy(name), make_policy(name)
        assert isinstance(a, Policy) and a.name == name
        assert a is not b
        a.push(J(0, 0.0, 1.0))
        assert len(a) == 1 and len(b) == 0


def test_an_unknown_name_lists_the_known_ones():
    with pytest.raises(SchedlabError) as e:
        make_policy("lifo")
    msg = str(e.value)
    assert "'lifo'" in msg
    for name in ("fcfs", "sjf", "hrrn"):
        assert name in msg


# -- FCFS -----------------------------------------------------------------------------------
def test_fcfs_orders_by_arrival_then_id_whatever_the_push_order():
    jobs = [J(5, 3.0, 1), J(1, 1.0, 99), J(2, 1.0, 1), J(0, 0.5, 7), J(9, 2.0, 3), J(4, 3.0, 2)]
    rng = np.random.default_rng(0)
    for _ in range(20):
        order = rng.permutation(len(jobs))
        q = filled(FCFS(), [jobs[i] for i in order])
        assert drain(q) == [0, 1, 2, 9, 4, 5]


def test_fcfs_requeued_job_goes_to_the_front():
    q = filled(FCFS(), [J(i, float(i), 10 - i) for i in range(5)])
    first = q.pop(0.0)
    assert first.request_id == 0
    q.push(J(7, 9.0, 1))  # a later arrival goes to the back
    q.push(first)  # preempted, re-queued: older than everything waiting
    assert drain(q) == [0, 1, 2, 3, 4, 7]


def test_fcfs_ignores_size_and_now():
    q = filled(FCFS(), [J(0, 0.0, 1000.0), J(1, 1.0, 1.0)])
    assert q.peek(1e6).request_id == 0
    assert q.pop(1e6).request_id == 0


# -- SJF ------------------------------------------------------------------------------------
def test_sjf_orders_by_size_then_arrival_then_id():
    jobs = [
        J(3, 0.0, 5.0),
        J(1, 2.0, 2.0),
        J(0, 2.0, 2.0),  # same size and arrival as 1: lower id first
        J(2, 1.0, 2.0),  # same size, earlier arrival: before 0 and 1
        J(4, 0.0, 9.0),
        J(5, 5.0, 0.5),
    ]
    rng = np.random.default_rng(1)
    for _ in range(20):
        order = rng.permutation(len(jobs))
        q = filled(SJF(), [jobs[i] for i in order])
        assert drain(q) == [5, 2, 0, 1, 3, 4]


def test_sjf_matches_sorted_order_on_random_jobs():
    rng = np.random.default_rng(2)
    for _ in range(30):
        n = int(rng.integers(1, 60))
        # few distinct sizes/arrivals so ties are common
        jobs = [J(int(i), float(rng.integers(0, 4)), float(rng.integers(1, 5))) for i in rng.permutation(n)]
        expect = [j.request_id for j in sorted(jobs, key=lambda j: (j.size, j.arrival_s, j.request_id))]
        assert drain(filled(SJF(), jobs), now=123.0) == expect


# -- HRRN -----------------------------------------------------------------------------------
def test_response_ratio_formula():
    assert response_ratio(0.0, 4.0) == 1.0
    assert response_ratio(6.0, 2.0) == 4.0
    np.testing.assert_allclose(response_ratio(np.array([1.0, 3.0]), np.array([4.0, 1.0])), [1.25, 4.0])


def test_hrrn_toy_orders():
    jobs = [J(0, 0.0, 8.0), J(1, 0.0, 4.0), J(2, 0.0, 2.0)]
    # at t=0 every ratio is 1: ties go to the earliest arrival, then the lowest id
    assert filled(HRRN(), jobs).pop(0.0).request_id == 0
    # later, equal waits favour the shortest job
    assert drain(filled(HRRN(), jobs), now=9.0) == [2, 1, 0]
    # a long job that has waited long enough beats a younger short one
    q = filled(HRRN(), [J(0, 0.0, 10.0), J(1, 9.0, 1.0)])
    assert q.peek(9.5).request_id == 0  # R0 = 19.5/10 = 1.95, R1 = 1.5/1 = 1.5
    assert q.peek(10.0).request_id == 0  # R0 = 2, R1 = 2: tie -> earlier arrival
    assert q.peek(11.0).request_id == 1  # R0 = 2.1, R1 = 3
    assert len(q) == 2


def test_hrrn_tie_goes_to_earliest_arrival_then_lowest_id():
    # identical (arrival, size) -> identical ratios at every now
    q = filled(HRRN(), [J(7, 1.0, 3.0), J(2, 1.0, 3.0), J(5, 1.0, 3.0)])
    assert drain(q, now=4.0) == [2, 5, 7]
    # equal ratios, different arrivals: R=(wait+size)/size; job a: wait 4, size 2 -> 3;
    # job b: wait 2, size 1 -> 3
    q = filled(HRRN(), [J(1, 2.0, 1.0), J(0, 0.0, 2.0)])
    assert q.pop(4.0).request_id == 0


def test_hrrn_matches_brute_force_over_random_pops_including_growth():
    rng = np.random.default_rng(3)
    q = HRRN()
    q._waiting = WaitingArrays(capacity=4)  # a small store, forced to grow several times
    ref: list[J] = []
    now = 0.0
    rid = 0
    for _ in range(3000):
        now += float(rng.exponential(0.5))
        for _ in range(int(rng.integers(0, 3))):
            j = J(rid, now - float(rng.uniform(0, 5)), float(rng.uniform(0.5, 50)))
            rid += 1
            q.push(j)
            ref.append(j)
        if ref and rng.random() < 0.6:
            best = min(ref, key=lambda j: ratio_key(j, now))
            assert q.peek(now) is best
            assert q.pop(now) is best
            ref.remove(best)
        assert len(q) == len(ref)
    assert rid > 1024  # the queue outgrew its initial capacity at least once
    while ref:
        now += 1.0
        best = min(ref, key=lambda j: ratio_key(j, now))
        assert q.pop(now) is best
        ref.remove(best)


def test_hrrn_order_invariant_to_scaling_all_sizes():
    rng = np.random.default_rng(4)
    for _ in range(40):
        n = int(rng.integers(2, 40))
        arrival = np.sort(rng.uniform(0, 20, n))
        size = rng.lognormal(2.0, 0.8, n)
        pop_times = np.sort(rng.uniform(arrival.max(), arrival.max() + 50, n))

        def order(scale: float) -> list[int]:
            q = filled(HRRN(), [J(i, float(arrival[i]), float(size[i] * scale)) for i in range(n)])
            return [q.pop(float(t)).request_id for t in pop_times]

        base = order(1.0)
        # the order is not trivially the arrival or the size order
        for scale in (1e-3, 0.37, 3.0, 60.0, 1e3):
            assert order(scale) == base, scale


def test_hrrn_sits_between_fcfs_and_sjf():
    jobs = [J(0, 0.0, 10.0), J(1, 90.0, 1.0)]
    # t=100: R-1 = 100/10 = 10 vs 10/1 = 10 -> tie -> earliest arrival; t=101: 10.1 vs 11
    assert filled(HRRN(), jobs).peek(100.0).request_id == 0
    assert filled(HRRN(), jobs).peek(101.0).request_id == 1
    assert filled(SJF(), jobs).peek(100.0).request_id == 1
    assert filled(FCFS(), jobs).peek(101.0).request_id == 0


def test_hrrn_aging_pops_the_long_job_within_the_derived_bound():
    """A long job L (arrival 0, size L) against a stream of short jobs (size s).

    Pops happen at now = 1, 2, 3, ...; one short job arrives half a unit before each pop, so at
    every pop exactly one short job waits, with wait 0.5. L wins once
    now / L > 0.5 / s, i.e. at the first integer now > 0.5 * L / s.
    """
    L, s, d = 100.0, 3.0, 0.5
    bound = int(np.floor(d * L / s)) + 1  # 17: 17/100 > 0.5/3 = 0.1667 > 16/100
    assert bound / L > d / s > (bound - 1) / L

    def stream(policy, horizon: int) -> int | None:
        policy.push(J(0, 0.0, L))
        for k in range(1, horizon + 1):
            policy.push(J(k, k - d, s))
            if policy.pop(float(k)).request_id == 0:
                return k
        return None

    assert stream(HRRN(), 1000) == bound
    # SJF starves it for as long as short jobs keep coming; FCFS serves it first
    assert stream(SJF(), 1000) is None
    assert stream(FCFS(), 1000) == 1


def test_hrrn_aging_with_a_random_short_stream():
    """One short job (random size s in [1, 10], random arrival u in the unit before) per pop:
    at every pop L is taken exactly when now / L >= wait / s of the waiting short job, so it is
    taken by now = L * max(wait / s) < L at the latest."""
    L = 200.0
    for seed in range(20):
        rng = np.random.default_rng([5, seed])
        q = HRRN()
        q.push(J(0, 0.0, L))
        popped_at = None
        for k in range(1, 1000):
            now = float(k)
            short = J(k, now - float(rng.uniform(0.0, 1.0)), float(rng.uniform(1.0, 10.0)))
            q.push(short)
            short_ratio = (now - short.arrival_s) / short.size
            assert len(q) == 2
            job = q.pop(now)
            if job.request_id == 0:
                assert now / L >= short_ratio
                popped_at = now
                break
            assert job is short and now / L <= short_ratio
        assert popped_at is not None and popped_at < L


# -- peek/pop agreement ---------------------------------------------------------------------
@pytest.mark.parametrize("name", ["fcfs", "sjf", "hrrn"])
def test_peek_agrees_with_pop(name):
    rng = np.random.default_rng(6)
    q = make_policy(name)
    now = 0.0
    rid = 0
    for _ in range(2000):
        now += float(rng.exponential(1.0))
        if rng.random() < 0.55 or not len(q):
            q.push(J(rid, now, float(rng.integers(1, 30))))
            rid += 1
        else:
            n = len(q)
            a = q.peek(now)
            assert q.peek(now) is a  # peek leaves it in place
            assert len(q) == n
            assert q.pop(now) is a
            assert len(q) == n - 1


# -- victims --------------------------------------------------------------------------------
def test_fcfs_victim_is_the_newest_admitted():
    running = [J(3, 0.0, 1.0), J(1, 5.0, 100.0), J(2, 2.0, 7.0)]
    assert FCFS().victim(running, 10.0) is running[-1]


def test_sjf_victim_is_the_largest_size():
    running = [J(0, 0.0, 5.0), J(1, 1.0, 50.0), J(2, 2.0, 7.0)]
    assert SJF().victim(running, 10.0).request_id == 1
    # ties on size: the newest (latest arrival, then highest id)
    running = [J(0, 0.0, 50.0), J(4, 3.0, 50.0), J(3, 3.0, 50.0), J(2, 2.0, 7.0)]
    assert SJF().victim(running, 10.0).request_id == 4


def test_hrrn_victim_is_the_lowest_current_ratio():
    running = [J(0, 0.0, 10.0), J(1, 8.0, 1.0), J(2, 5.0, 100.0)]
    # now=10: R = 20/10 = 2, 3/1 = 3, 105/100 = 1.05
    assert HRRN().victim(running, 10.0).request_id == 2
    # the victim depends on now: R0 = 1010/10 = 101, R1 = 11/1 = 11 -> the short job
    running = [J(0, 0.0, 10.0), J(1, 990.0, 1.0)]
    assert HRRN().victim(running, 1000.0).request_id == 1
    # equal waits: R0 = 20/10 = 2, R1 = 11/1 = 11 -> the long job
    running = [J(0, 0.0, 10.0), J(1, 0.0, 1.0)]
    assert HRRN().victim(running, 10.0).request_id == 0


def test_hrrn_victim_ties_go_to_the_newest():
    running = [J(0, 0.0, 4.0), J(5, 2.0, 2.0), J(3, 2.0, 2.0)]
    # now=4: R0 = 2, R5 = R3 = 2 -> newest arrival (2.0), then highest id (5)
    assert HRRN().victim(running, 4.0).request_id == 5


def test_victims_agree_with_brute_force_on_random_batches():
    rng = np.random.default_rng(7)
    for _ in range(200):
        n = int(rng.integers(1, 12))
        running = [J(int(i), float(rng.uniform(0, 10)), float(rng.integers(1, 20))) for i in rng.permutation(n)]
        now = 10.0 + float(rng.uniform(0, 10))
        assert FCFS().victim(running, now) is running[-1]
        sj = SJF().victim(running, now)
        assert sj.size == max(j.size for j in running)
        hr = HRRN().victim(running, now)
        ratios = [(now - j.arrival_s + j.size) / j.size for j in running]
        assert (now - hr.arrival_s + hr.size) / hr.size == pytest.approx(min(ratios), rel=1e-12)
