"""A cluster of engines behind a router: a one-replica cluster is the single engine byte for
byte, every request finishes on exactly one replica, runs repeat exactly, each router's
choice on toy cases, and bad input in one line."""

from __future__ import annotations

import io
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from schedlab import registry
from schedlab.cluster import cluster_summary, run_cluster
from schedlab.engine import Arena, EngineConfig
from schedlab.engine.steptime import StepTimeModel
from schedlab.validation import write_steptime
from schedlab.errors import SchedlabError
from schedlab.routers import Router
from schedlab.routers.affinity import ring_point
from schedlab.simulate import run_summary, serve
from schedlab.slosa.instances import InstanceMemory, assign
from test_hostile import run_cli
from traces import two_class_trace

#: A step-time model with a front-end station (a queue of its own per replica).
STEP = StepTimeModel(intercept=0.005, n_prefill_tokens=1e-5, n_decode=2e-4, ctx_tokens=1e-7, frontend_s=0.003,
                     frontend_service_s=0.001)
ARENA = Arena(STEP, EngineConfig(max_num_seqs=32, max_num_batched_tokens=2048, kv_capacity_blocks=600))


def parquet_bytes(frame: pd.DataFrame) -> bytes:
    buf = io.BytesIO()
    frame.to_parquet(buf)
    return buf.getvalue()


def shared_prompt_trace(n: int = 120, seed: int = 3) -> pd.DataFrame:
    """Prompts that open with one of four 64-token documents, then tokens of their own."""
    rng = np.random.default_rng(seed)
    docs = [rng.integers(1000, 30000, 64) for _ in range(4)]
    prompts = [np.concatenate([docs[rng.integers(4)], rng.integers(1000, 30000, rng.integers(1, 40))])
               for _ in range(n)]
    return pd.DataFrame({"request_id": np.arange(n), "arrival_s": np.cumsum(rng.exponential(0.05, n)),
                         "prompt_tokens": [len(p) for p in prompts], "output_tokens": rng.integers(1, 60, n),
                         "token_ids": prompts})


@pytest.mark.slow
@pytest.mark.parametrize("router", ["round-robin", "least-requests"])  # routed up front, and at each arrival
@pytest.mark.parametrize("scheduler", ["fcfs", "sjf", "hrrn", "adaptive", "request-level", "sarathi-fcfs", "rad",
                                       "slai-spf-dynamic", "algorithm2", "ewsjf"])
def test_one_replica_is_the_single_engine(scheduler, router):
    trace = two_class_trace(300, rate=8.0)
    single, expected = run_summary(trace, scheduler, ARENA, identity={})
    result = run_cluster(trace, scheduler, [ARENA], router)
    assert (result.requests["replica"] == 0).all()
    assert parquet_bytes(result.requests.drop(columns="replica")) == parquet_bytes(single.requests)
    summary, per_replica = cluster_summary(result, identity={})
    for key in set(expected) - {"wall_s", "sched_overhead_us_per_req"}:
        assert summary[key] == expected[key] or (summary[key] != summary[key] and expected[key] != expected[key]), key
        assert per_replica.loc[0, key] == expected[key] or expected[key] != expected[key], key


@pytest.mark.parametrize("scheduler", ["fcfs", "sarathi-fcfs"])
def test_one_replica_with_a_prefix_cache_is_the_single_engine(scheduler):
    trace = shared_prompt_trace()
    arena = Arena(STEP, EngineConfig(block_size=16, max_num_seqs=8, max_num_batched_tokens=256, kv_capacity_blocks=60,
                                     prefix_caching=True))
    single = serve(trace, scheduler, arena)
    assert single.requests["cached_tokens"].sum() > 0
    result = run_cluster(trace, scheduler, [arena], "prefix-affinity")
    assert parquet_bytes(result.requests.drop(columns="replica")) == parquet_bytes(single.requests)


@pytest.mark.parametrize("router", ["round-robin", "least-requests"])
def test_a_replica_that_gets_every_request_is_the_single_engine(router):
    """Replicas 1 and 2 hold too few KV blocks for any request: every request is routed to
    replica 0, whose run is the single engine's while the others wait idle, whether the
    router reads the replicas at each arrival or routes up front."""
    trace = two_class_trace(200, rate=6.0, prompt=(1, 500))
    tiny = ARENA.with_limits(kv_capacity_blocks=1)
    single = serve(trace, "sarathi-fcfs", ARENA)
    result = run_cluster(trace, "sarathi-fcfs", [ARENA, tiny, tiny], router)
    assert (result.requests["replica"] == 0).all()
    assert parquet_bytes(result.requests.drop(columns="replica")) == parquet_bytes(single.requests)
    assert [run.steps for run in result.replicas[1:]] == [0, 0]


@pytest.mark.parametrize("scheduler", ["fcfs", "rad"])
def test_a_router_that_reads_no_state_gives_each_replica_a_single_engines_run_of_its_share(scheduler):
    trace = two_class_trace(300, rate=20.0)
    result = run_cluster(trace, scheduler, [ARENA] * 3, "round-robin")
    assert not registry.make_router("round-robin").reads_state
    for r in range(3):
        share = trace.iloc[r::3].reset_index(drop=True)
        mine = result.requests[result.requests["replica"] == r].drop(columns="replica").reset_index(drop=True)
        assert parquet_bytes(mine) == parquet_bytes(serve(share, scheduler, ARENA).requests)


#: Steps of exactly 1/16 s and no front end: step ends fall on routing times (a step that begins
#: at a routing time has not begun before it).
TIES = Arena(StepTimeModel(intercept=0.0625, n_prefill_tokens=0.0, n_decode=0.0),
             EngineConfig(max_num_seqs=256, max_num_batched_tokens=8192, kv_capacity_blocks=4000))
#: A front end slower than the time between two arrivals; batches of at most two requests; steps
#: long beside the front end (a stretch that a request routed here cuts to fewer than two steps).
SLOW_FRONT = Arena(StepTimeModel(intercept=0.005, n_prefill_tokens=1e-5, n_decode=2e-4, ctx_tokens=1e-7,
                                 frontend_s=0.3), ARENA.limits)
FULL = ARENA.with_limits(max_num_seqs=2)
LONG_STEPS = Arena(StepTimeModel(intercept=0.05, n_prefill_tokens=1e-5, n_decode=2e-4, frontend_s=0.002),
                   ARENA.limits)


@pytest.mark.slow
@pytest.mark.parametrize("arena", [ARENA, SLOW_FRONT, FULL, LONG_STEPS],
                         ids=["front-end", "slow-front-end", "full-batches", "long-steps"])
@pytest.mark.parametrize("scheduler", ["fcfs", "sarathi-fcfs", "rad", "sjf", "slai-spf-dynamic"])
@pytest.mark.parametrize("reads_kv", [False, True])
def test_replicas_run_piecewise_at_each_arrival_equal_the_single_engines_on_their_shares(scheduler, reads_kv, arena,
                                                                                         monkeypatch):
    """A router that reads the replicas' state (and their KV blocks, or not) but routes in turn:
    the replicas run up to every arrival, and still each replica runs the single engine's steps
    on its share, byte for byte (round-robin, which reads no state, runs each share as a single
    engine): every stretch of decode steps waits until a routing time passes its last step's
    start, and one that the next arrival here would stop is cut when that request is routed."""
    class InTurn(type(registry.make_router("round-robin"))):
        reads_state = True

    InTurn.reads_kv = reads_kv
    trace = two_class_trace(400, rate=30.0)
    up_front = run_cluster(trace, scheduler, [arena] * 3, "round-robin")
    monkeypatch.setattr(registry, "make_router", lambda name, **options: InTurn())
    piecewise = run_cluster(trace, scheduler, [arena] * 3, "in-turn")
    assert piecewise.requests["replica"].tolist() == [i % 3 for i in range(len(trace))]
    assert [run.steps for run in piecewise.replicas] == [run.steps for run in up_front.replicas]
    assert parquet_bytes(piecewise.requests) == parquet_bytes(up_front.requests)
    assert [run.busy_s for run in piecewise.replicas] == [run.busy_s for run in up_front.replicas]
    assert [run.peak_kv_blocks for run in piecewise.replicas] == [run.peak_kv_blocks for run in up_front.replicas]


@pytest.mark.parametrize("arena", [ARENA, TIES, SLOW_FRONT, FULL],
                         ids=["front-end", "step-ends-on-arrivals", "slow-front-end", "full-batches"])
def test_a_router_that_reads_kv_blocks_sees_each_replicas_as_the_steps_begun_before_the_arrival_leave_them(
        arena, monkeypatch):
    """At every routing time, each replica's share of KV blocks in use is the single engine's on
    that replica's share, sampled at that time (a sample shows the engine after every step that
    began before it), whether a request routed to it is still in its front end or its batch is
    full (a stretch of decode steps that runs to a completion, arrivals or not). Arrivals on a
    grid of 1/8 s, which the samples hit exactly."""
    seen = []

    class InTurnReadingKV(type(registry.make_router("round-robin"))):
        reads_state = reads_kv = True

        def route(self, i, candidates):
            seen.append([rep.kv_frac for rep in self.cluster.replicas])
            return super().route(i, candidates)

    rng = np.random.default_rng(2)
    n = 300
    trace = pd.DataFrame({"request_id": np.arange(n),
                          "arrival_s": np.sort(rng.choice(np.arange(1, 600), n, replace=False)) * 0.125,
                          "prompt_tokens": rng.integers(16, 500, n), "output_tokens": rng.integers(50, 400, n)})
    monkeypatch.setattr(registry, "make_router", lambda name, **options: InTurnReadingKV())
    result = run_cluster(trace, "fcfs", [arena] * 3, "in-turn")
    assert result.requests["preemptions"].eq(0).all()
    seen = np.array(seen)
    assert (seen > 0).mean() > 0.5  # mostly busy replicas
    for r in range(3):
        timeline = serve(trace.iloc[r::3].reset_index(drop=True), "fcfs", arena, sample_s=0.125).timeline
        at = timeline.set_index("t_s")["kv_frac"]
        np.testing.assert_array_equal(seen[:, r], at.loc[trace["arrival_s"]].to_numpy())


def test_a_router_that_says_it_reads_no_state_and_reads_some_is_stopped_in_one_line(monkeypatch):
    class Sly(Router):
        reads_state = False

        def route(self, i, candidates):
            return int(np.argmin([rep.outstanding for rep in self.cluster.replicas]))

    monkeypatch.setattr(registry, "make_router", lambda name, **options: Sly())
    with pytest.raises(SchedlabError, match="reads a replica's 'outstanding' but says it reads no replica's state") as caught:
        run_cluster(two_class_trace(20, rate=5.0), "fcfs", [ARENA] * 2, "sly")
    assert "\n" not in str(caught.value)


def test_a_router_that_reads_no_state_may_read_the_replicas_limits(monkeypatch):
    """Limits do not change: a router that weighs replicas by their KV capacity reads no state."""
    class ByCapacity(Router):
        reads_state = False

        def route(self, i, candidates):
            return max(candidates.tolist(), key=lambda r: self.cluster.replicas[r].limits.kv_capacity_blocks)

    monkeypatch.setattr(registry, "make_router", lambda name, **options: ByCapacity())
    result = run_cluster(two_class_trace(30, rate=5.0), "fcfs", [ARENA, ARENA.with_limits(kv_capacity_blocks=900)], "cap")
    assert (result.requests["replica"] == 1).all()


def test_a_choice_that_is_not_a_replica_index_is_stopped_in_one_line(monkeypatch):
    class Halfway(Router):
        reads_state = False

        def route(self, i, candidates):
            return 0.5

    monkeypatch.setattr(registry, "make_router", lambda name, **options: Halfway())
    with pytest.raises(SchedlabError, match="chose replica 0.5 for request 0, which only") as caught:
        run_cluster(two_class_trace(10, rate=5.0), "fcfs", [ARENA] * 2, "halfway")
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("router", ["round-robin", "least-requests"])
def test_an_empty_trace_gives_an_empty_table(router):
    result = run_cluster(two_class_trace(10, rate=5.0).iloc[:0], "fcfs", [ARENA] * 2, router)
    assert result.requests.empty and "replica" in result.requests and [run.steps for run in result.replicas] == [0, 0]


def test_each_replica_counts_its_own_prefix_cache_lookups(monkeypatch):
    """Per replica, the prefix cache's lookups and hits are those of the requests it served:
    the same whether the replicas run piecewise (a router that reads state, in turn) or each as
    the single engine on its share (round-robin), and together the cluster's."""
    class InTurn(type(registry.make_router("round-robin"))):
        reads_state = True

    trace = shared_prompt_trace(200)
    arena = Arena(STEP, EngineConfig(block_size=16, max_num_seqs=8, max_num_batched_tokens=256, kv_capacity_blocks=60,
                                     prefix_caching=True))
    up_front = run_cluster(trace, "fcfs", [arena] * 3, "round-robin")
    monkeypatch.setattr(registry, "make_router", lambda name, **options: InTurn())
    piecewise = run_cluster(trace, "fcfs", [arena] * 3, "in-turn")
    counts = [run.prefix_cache for run in piecewise.replicas]
    assert counts == [run.prefix_cache for run in up_front.replicas]
    assert [c["queries"] for c in counts] == [int(run.requests["prompt_tokens"].sum()) for run in piecewise.replicas]
    assert sum(c["hits"] for c in counts) == int(piecewise.requests["cached_tokens"].sum()) > 0


@pytest.mark.parametrize("router", ["random", "round-robin", "least-requests", "least-tokens", "least-kv",
                                    "prefix-affinity", "largest-memory"])
def test_every_request_finishes_on_exactly_one_replica(router):
    trace = shared_prompt_trace(300)
    arena = Arena(STEP, EngineConfig(max_num_seqs=8, max_num_batched_tokens=256, kv_capacity_blocks=40,
                                     prefix_caching=True))
    result = run_cluster(trace, ["fcfs", "sarathi-fcfs", "sjf"], [arena, arena, arena.with_limits(kv_capacity_blocks=80)],
                         router, seed=4)
    req = result.requests
    assert req["request_id"].tolist() == trace["request_id"].tolist()
    assert req["finish_s"].notna().all() and (req["finish_s"] >= req["arrival_s"]).all()
    assert set(req["replica"]) <= {0, 1, 2}
    per = [run.requests for run in result.replicas]
    assert sorted(pd.concat(per)["request_id"].tolist()) == sorted(trace["request_id"].tolist())
    summary, per_replica = cluster_summary(result, identity={"workload": "toy"})
    assert summary["completed"] == len(trace) == per_replica["completed"].sum()
    assert summary["replicas"] == 3 and summary["router"] == router and summary["policy"] == "fcfs+sarathi-fcfs+sjf"
    assert per_replica["replica"].tolist() == [0, 1, 2]
    assert per_replica["policy"].tolist() == ["fcfs", "sarathi-fcfs", "sjf"]


def test_runs_repeat_exactly_and_the_seed_moves_random_routing():
    trace = two_class_trace(400, rate=20.0)
    one = run_cluster(trace, "fcfs", [ARENA] * 4, "random", seed=1)
    again = run_cluster(trace, "fcfs", [ARENA] * 4, "random", seed=1)
    other = run_cluster(trace, "fcfs", [ARENA] * 4, "random", seed=2)
    assert parquet_bytes(one.requests) == parquet_bytes(again.requests)
    assert (one.requests["replica"] != other.requests["replica"]).any()
    draws = np.random.default_rng([1, 37]).integers(4, size=len(trace))
    assert one.requests["replica"].tolist() == draws.tolist()


def test_the_view_a_router_reads_counts_every_request_routed_and_not_finished(monkeypatch):
    """At every routing time, each replica's outstanding requests are exactly its waiting
    and running ones, and its outstanding tokens theirs; least-tokens picks the minimum."""
    seen = []
    inner = registry.make_router("least-tokens")

    class Recorder(Router):
        def bind(self, cluster):
            self.cluster = cluster
            inner.bind(cluster)

        def route(self, i, candidates):
            reps = self.cluster.replicas
            for r in reps:
                assert r.outstanding == r.n_waiting + r.n_running
            tokens = [r.outstanding_tokens for r in reps]
            chosen = inner.route(i, candidates)
            seen.append((tokens, chosen))
            return chosen

    monkeypatch.setattr(registry, "make_router", lambda name, **options: Recorder())
    trace = two_class_trace(300, rate=25.0)
    result = run_cluster(trace, "sarathi-fcfs", [ARENA] * 3, "recorder")
    assert result.requests["finish_s"].notna().all()
    assert all(chosen == int(np.argmin(tokens)) for tokens, chosen in seen)
    assert any(max(tokens) > 0 for tokens, _ in seen)


# -- each router's choice on toy views --------------------------------------------------------
def toy_cluster(*, outstanding=(0, 0, 0), tokens=(0, 0, 0), kv=(0.0, 0.0, 0.0), blocks=(100, 100, 100), keys=None):
    replicas = [SimpleNamespace(outstanding=o, outstanding_tokens=t, kv_frac=k,
                                limits=SimpleNamespace(kv_capacity_blocks=b, block_size=16))
                for o, t, k, b in zip(outstanding, tokens, kv, blocks)]
    return SimpleNamespace(replicas=replicas, prefix_key=lambda i, n: (keys or {}).get(i))


def routed(name: str, cluster, requests=range(1), candidates=(0, 1, 2), **options) -> list[int]:
    router = registry.make_router(name, **options)
    router.bind(cluster)
    return [router.route(i, np.array(candidates)) for i in requests]


def test_round_robin_takes_replicas_in_turn_and_skips_one_that_cannot_serve():
    assert routed("round-robin", toy_cluster(), range(7)) == [0, 1, 2, 0, 1, 2, 0]
    router = registry.make_router("round-robin")
    router.bind(toy_cluster())
    picks = [router.route(0, np.array(c)) for c in ([0, 1, 2], [0, 2], [0, 1, 2], [0, 1])]
    assert picks == [0, 2, 0, 1]


def test_the_least_loaded_routers_pick_the_minimum_with_ties_to_the_lowest_index():
    assert routed("least-requests", toy_cluster(outstanding=(3, 1, 1))) == [1]
    assert routed("least-requests", toy_cluster(outstanding=(3, 1, 0)), candidates=(0, 1)) == [1]
    assert routed("least-tokens", toy_cluster(outstanding=(1, 1, 9), tokens=(900, 800, 100))) == [2]
    assert routed("least-kv", toy_cluster(kv=(0.5, 0.25, 0.75))) == [1]
    assert routed("least-kv", toy_cluster(kv=(0.5, 0.5, 0.5))) == [0]


def test_largest_memory_is_paper_ds_rule_on_tokens_left():
    # capacity 100 or 120 blocks of 16 tokens, 90% usable: 1440, 1728, 1440 tokens, less what is outstanding
    assert routed("largest-memory", toy_cluster(tokens=(0, 287, 0), blocks=(100, 120, 100))) == [1]
    assert routed("largest-memory", toy_cluster(tokens=(0, 289, 0), blocks=(100, 120, 100))) == [0]
    # all of it usable: 1600, 1920 - 289 = 1631, 1600
    assert routed("largest-memory", toy_cluster(tokens=(0, 289, 0), blocks=(100, 120, 100)), usable=1.0) == [1]
    assert routed("largest-memory", toy_cluster(tokens=(0, 289, 0), blocks=(100, 120, 100)), candidates=(0, 2)) == [0]


def test_largest_memory_in_a_cluster_assigns_a_burst_as_paper_ds_study_does():
    """Requests that arrive together are routed before any replica runs: the cluster's choices
    are paper D's assignment of that batch."""
    rng = np.random.default_rng(5)
    burst = pd.DataFrame({"request_id": np.arange(12), "arrival_s": np.zeros(12),
                          "prompt_tokens": rng.integers(10, 400, 12), "output_tokens": rng.integers(1, 200, 12)})
    arenas = [ARENA.with_limits(kv_capacity_blocks=b) for b in (300, 500, 400)]
    result = run_cluster(burst, "fcfs", arenas, "largest-memory")
    memory = [InstanceMemory(free_bytes=b * 16, bytes_per_token=1.0) for b in (300, 500, 400)]
    assert result.requests["replica"].tolist() == assign(burst, memory).tolist()


def test_prefix_affinity_keeps_a_prefix_on_its_ring_owner_within_the_load_bound():
    cluster = toy_cluster(outstanding=(0, 0, 0), keys={0: 5, 1: 5, 2: None})
    router = registry.make_router("prefix-affinity")
    router.bind(cluster)
    points = sorted((ring_point(f"replica {r} point {v}"), r) for r in range(3) for v in range(64))
    start = next((k for k, (p, _) in enumerate(points) if p >= 5), 0)
    walk = [points[(start + k) % len(points)][1] for k in range(len(points))]  # the owners round the ring
    owner = walk[0]
    assert router.route(0, np.array([0, 1, 2])) == owner == router.route(1, np.array([0, 1, 2]))
    # the owner at the bound, ceil(1.25 * (4 + 1) / 3) = 3: the next owner round the ring
    cluster.replicas[owner].outstanding = 3
    cluster.replicas[(owner + 1) % 3].outstanding = 1
    assert router.route(1, np.array([0, 1, 2])) == next(r for r in walk if r != owner)
    # no prefix: the fewest outstanding
    assert router.route(2, np.array([0, 1, 2])) == [r for r in range(3) if r not in (owner, (owner + 1) % 3)][0]


def test_prefix_affinity_sends_a_shared_document_to_one_replica_and_finds_it_cached():
    trace = shared_prompt_trace(200)
    arena = Arena(STEP, EngineConfig(max_num_seqs=8, max_num_batched_tokens=256, kv_capacity_blocks=200,
                                     prefix_caching=True))
    hits = {}
    for router in ("prefix-affinity", "round-robin"):
        result = run_cluster(trace, "fcfs", [arena] * 4, router)
        hits[router] = int(result.requests["cached_tokens"].sum())
    assert hits["prefix-affinity"] > hits["round-robin"]


# -- bad input ------------------------------------------------------------------------------
def test_bad_input_is_one_line():
    trace = two_class_trace(20, rate=5.0, prompt=(1, 500))
    cases = [
        (lambda: run_cluster(trace, "fcfs", [], "round-robin"), "at least one replica"),
        (lambda: run_cluster(trace, "fcfs", [ARENA], "nearest"), "unknown router 'nearest'"),
        (lambda: run_cluster(trace, ["fcfs"] * 2, [ARENA] * 3, "random"), "one scheduler or one per replica"),
        (lambda: run_cluster(trace.assign(prompt_tokens=10_000), "fcfs", [ARENA, ARENA], "random"),
         "fits no replica's context and KV blocks, nor do 19 more"),
        (lambda: run_cluster(trace, "slo-sa", [ARENA], "random"), "needs the run's trace"),
    ]
    for call, message in cases:
        with pytest.raises(SchedlabError, match=message) as caught:
            call()
        assert "\n" not in str(caught.value)


# -- the command line ---------------------------------------------------------------------
def test_the_cluster_command_writes_results_with_replicas_and_both_summaries(tmp_path, capsys):
    from schedlab.cli import main

    trace = two_class_trace(60, rate=10.0, prompt=(1, 500))
    trace.to_parquet(tmp_path / "trace.parquet")
    write_steptime(STEP, tmp_path / "step.json")
    argv = ["cluster", "--trace", str(tmp_path / "trace.parquet"), "--replicas", "3", "--router", "least-tokens",
            "--scheduler", "fcfs", "--steptime", str(tmp_path / "step.json"), "--hardware", "toy", "--model", "tiny-llama",
            "--kv-capacity-blocks", "600", "--max-num-seqs", "32", "--max-num-batched-tokens", "2048",
            "--out-results", str(tmp_path / "r.parquet"), "--out-summary", str(tmp_path / "s.json"),
            "--out-replicas", str(tmp_path / "per.parquet")]
    assert main(argv) == 0
    results = pd.read_parquet(tmp_path / "r.parquet")
    expected = run_cluster(trace, "fcfs", [ARENA] * 3, "least-tokens").requests
    assert results["replica"].tolist() == expected["replica"].tolist() and results["finish_s"].notna().all()
    per = pd.read_parquet(tmp_path / "per.parquet")
    assert per["completed"].sum() == 60 and per["replica"].tolist() == [0, 1, 2]
    summary = pd.read_json(tmp_path / "s.json", typ="series")
    assert summary["replicas"] == 3 and summary["router"] == "least-tokens" and summary["completed"] == 60
    for bad, message in ((["--replicas", "0"], "--replicas"), (["--router", "nearest"], "unknown router 'nearest'"),
                         (["--scheduler", "fcfs", "sjf"], "--scheduler needs one value for every replica")):
        _refused(capsys, [*argv, *bad], message)


def _refused(capsys, argv: list[str], message: str) -> None:
    """``schedlab argv`` ends in one line holding ``message``, exit status 2."""
    capsys.readouterr()
    rc, _, err = run_cli(capsys, argv)
    assert rc == 2 and err.count("\n") == 1 and message in err, err


def test_a_replica_holds_every_piece_of_state_the_engine_does():
    """A replica is the engine with shared per-request arrays: a state the engine gains must be
    given to the replica too (its own, or shared), or the piecewise loop would miss it."""
    from schedlab.cluster.replica import Replica
    from schedlab.engine.requests import Requests
    from schedlab.engine.core import Engine
    from schedlab.simulate import scheduler_for

    trace = two_class_trace(20, rate=5.0)
    engine = Engine(trace, scheduler_for("fcfs"), ARENA)
    replica = Replica(0, Requests(trace, 0.0), scheduler_for("fcfs"), ARENA)
    assert set(vars(engine)) <= set(vars(replica))


def test_requests_beyond_a_replicas_context_go_to_the_replicas_that_can_serve_them():
    """Replica 0's model holds 600 tokens, replica 1's any: longer requests all go to replica
    1, the rest in turn (round-robin skipping replica 0 for the long ones)."""
    trace = two_class_trace(60, rate=5.0, prompt=(1, 1000), output=(1, 50))
    short = Arena(STEP, ARENA.limits, max_tokens=600)
    result = run_cluster(trace, "fcfs", [short, ARENA], "round-robin")
    tokens = trace["prompt_tokens"] + trace["output_tokens"]
    where = result.requests["replica"].to_numpy()
    assert (where[tokens.to_numpy() > 600] == 1).all() and (where == 0).any()
    turn, expected = 0, []
    for long in (tokens > 600).tolist():
        chosen = 1 if long else turn
        expected.append(chosen)
        turn = (chosen + 1) % 2
    assert where.tolist() == expected
    assert result.requests["finish_s"].notna().all()


def test_the_cluster_replay_command_refuses_bad_input_in_one_line_and_writes_nothing(tmp_path, capsys):
    """`schedlab cluster-replay` (its real-server run: tests/test_servers_against_sim.py): a URL that is
    not a server's, an unknown router, an ASR trace, and a server that does not answer each end in
    one line, exit status 2, before any request is sent, with no output written."""
    from schedlab.backends.served.server import free_port

    two_class_trace(4, rate=10.0).to_parquet(tmp_path / "trace.parquet")
    two_class_trace(4, rate=10.0).assign(audio_duration_s=5.0).to_parquet(tmp_path / "asr.parquet")
    silent = f"http://127.0.0.1:{free_port()}"
    outs = [tmp_path / "r.parquet", tmp_path / "s.json", tmp_path / "per.parquet"]
    argv = ["cluster-replay", "--servers", silent, "--trace", str(tmp_path / "trace.parquet"), "--router", "round-robin",
            "--model", "tiny-llama", "--scheduler", "fcfs", "--out-results", str(outs[0]), "--out-summary", str(outs[1]),
            "--out-replicas", str(outs[2])]
    cases = [
        (["--servers", "ftp://host"], "not a server URL"),
        (["--servers", "http://127.0.0.1:8000/v1"], "not a server URL"),
        (["--router", "nearest"], "unknown router 'nearest'"),
        (["--trace", str(tmp_path / "asr.parquet")], "serves decoder models"),
        (["--servers", "http://127.0.0.1:8000/?"], "not a server URL"),
        ([], f"no server answers at {silent} (ConnectError)"),
    ]
    for bad, message in cases:
        _refused(capsys, [*argv, *bad], message)
        assert not any(p.exists() for p in outs)
