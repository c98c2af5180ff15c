"""Paper D: the latency predictor, the G objective, the mappers, length estimates,
multi-instance assignment, the workload, and serving a mapping on the sim engine."""

from __future__ import annotations

import io
import itertools
import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from schedlab.data.conversations import azure_code_standin, count_lengths, first_turns
from schedlab.errors import SchedlabError
from schedlab.fit.latency_predictor import REFERENCE, LatencyPredictor, PhaseModel, calibrate_roofline, fit_predictor
from schedlab.latency.catalogue import hardware, model_arch
from schedlab.latency.predictor_profile import roofline_profile
from schedlab.slosa.dispatch import paper_engine, serve, served_score
from schedlab.slosa.instances import InstanceMemory, assign
from schedlab.slosa.lengths import RunningGaussian, perturbed
from schedlab.slosa.objective import Mapping, check, score
from schedlab.slosa.problem import CHAT_SLO, CODE_SLO, MappingProblem
from schedlab.slosa.search import (
    AnnealConfig, anneal, arrival_order, by_predicted_e2e, compositions, exhaustive,
)
from schedlab.slosa.toys import TOYS
from schedlab.workload.slo_mix import slo_mix_trace


def random_requests(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "request_id": np.arange(n),
        "prompt_tokens": rng.integers(50, 1500, n),
        "output_tokens": rng.integers(20, 500, n),
        "task": rng.choice(["chat", "code"], n),
    })


def problem(n: int, max_batch: int, seed: int) -> MappingProblem:
    return MappingProblem.build(random_requests(n, seed), REFERENCE, max_batch)


# -- the predictor ------------------------------------------------------------------------
def test_decode_time_closed_form_equals_the_sum_of_steps():
    b, l, o = 3, 700, 57
    steps = sum(REFERENCE.decode(b, l + k) for k in range(1, o + 1))
    assert REFERENCE.decode_time(b, l, o) == pytest.approx(steps, rel=1e-12)
    assert REFERENCE.e2e(b, l, o) == pytest.approx(REFERENCE.ttft(b, l) + steps, rel=1e-12)


def test_reference_single_request_takes_about_three_seconds():
    # The paper sets the code SLO to 10x a ~3 s single request.
    assert 2.0 < REFERENCE.e2e(1, 1000, 150) < 4.0


def test_regression_recovers_known_coefficients_from_a_synthetic_profile():
    truth = LatencyPredictor(PhaseModel(2e-4, 3e-3, 5e-5, 0.04), PhaseModel(1e-7, 4e-4, 2e-6, 0.016))
    rng = np.random.default_rng(0)
    rows = []
    for b, n in itertools.product((1, 2, 4, 8, 16, 32), (100, 250, 500, 1000, 1500, 2000)):
        rows.append(("prefill", b, n, truth.prefill(b, n) * (1 + rng.normal(0, 0.002))))
        rows.append(("decode", b, n, truth.decode(b, n) * (1 + rng.normal(0, 0.002))))
    profile = pd.DataFrame(rows, columns=["phase", "batch", "length", "time_s"]).assign(source="synthetic", hardware="x", model="y")
    fit = fit_predictor(profile)
    for phase in ("prefill", "decode"):
        for term in ("a", "beta", "g", "d"):
            assert getattr(getattr(fit, phase), term) == pytest.approx(getattr(getattr(truth, phase), term), rel=0.1), (phase, term)
    ci = fit.meta["ci95_ms"]["prefill.a"]
    assert ci[0] <= truth.prefill.a * 1e3 <= ci[1]
    assert fit.meta["r2"]["prefill"] > 0.99


def test_fit_rejects_a_grid_without_two_batch_sizes():
    profile = pd.DataFrame({"phase": ["prefill", "decode"] * 3, "batch": 1, "length": [1, 1, 2, 2, 3, 3], "time_s": 1.0,
                            "source": "s", "hardware": "h", "model": "m"})
    with pytest.raises(SchedlabError, match="two batch sizes"):
        fit_predictor(profile)


def test_roofline_calibration_reproduces_the_reference_single_request_times():
    hw, arch = hardware("2xV100-32GB"), model_arch("qwen2.5-7b")
    eff = calibrate_roofline(REFERENCE, hw, arch)
    table = roofline_profile(hw, arch, batches=(1,), lengths=(1000,), **eff).set_index("phase")["time_s"]
    assert table["prefill"] == pytest.approx(REFERENCE.prefill(1, 1000), rel=1e-6)
    assert table["decode"] == pytest.approx(REFERENCE.decode(1, 1000), rel=1e-6)


def test_tensor_parallel_hardware_scales_the_device():
    one, two = hardware("V100-32GB"), hardware("2xV100-32GB")
    assert (two.peak_flops, two.mem_bw, two.mem_bytes) == (2 * one.peak_flops, 2 * one.mem_bw, 2 * one.mem_bytes)
    with pytest.raises(SchedlabError, match="unknown hardware"):
        hardware("2xV99")


# -- the objective -----------------------------------------------------------------------
def brute_force_score(p: MappingProblem, mapping: Mapping) -> tuple[int, float]:
    """Straight from the definition, without the kernels' slack arrays."""
    wait, met, total = 0.0, 0, 0.0
    for batch in mapping.batches():
        b = len(batch) - 1
        for i in batch:
            e2e = wait + p.prefill[i, b] + p.decode[i, b]
            total += e2e
            if p.kind[i] == 0:
                met += e2e <= p.slo_e2e[i]
            else:
                met += (wait + p.prefill[i, b] <= p.slo_ttft[i]) and (p.decode[i, b] / p.output[i] <= p.slo_tpot[i])
        wait += max(p.prefill[i, b] + p.decode[i, b] for i in batch)
    return met, total


@pytest.mark.parametrize("seed", range(5))
def test_score_matches_the_definition(seed):
    p = problem(9, 4, seed)
    rng = np.random.default_rng(seed)
    for _ in range(20):
        order = rng.permutation(p.n)
        sizes = compositions(p.n, 4)[rng.integers(len(compositions(p.n, 4)))]
        mapping = Mapping(order, sizes[sizes > 0])
        met, total = brute_force_score(p, mapping)
        s = score(p, mapping)
        assert s.met == met
        assert s.total_e2e_s == pytest.approx(total, rel=1e-12)


def test_problem_uses_the_papers_slos():
    req = random_requests(6, 0)
    p = MappingProblem.build(req, REFERENCE, 2)
    chat = (req["task"] == "chat").to_numpy()
    assert np.all(p.slo_ttft[chat] == CHAT_SLO["ttft_s"]) and np.all(p.slo_tpot[chat] == CHAT_SLO["tpot_s"])
    assert np.all(p.slo_e2e[~chat] == CODE_SLO["e2e_s"]) and np.all(np.isinf(p.slo_e2e[chat]))
    with pytest.raises(SchedlabError, match="unknown task"):
        MappingProblem.build(req.assign(task="video"), REFERENCE, 2)


@pytest.mark.parametrize("name", sorted(TOYS))
def test_toy_illustrations_give_their_exact_g(name):
    expected = {
        "order": {"size order": 1 / 6, "SLO-aware": 2 / 9},
        "split": {"one batch": 0.0, "split": 1 / 3},
        "defer": {"most urgent first": 0.0, "deferred": 1 / 4},
    }[name]
    p, mappings = TOYS[name]()
    for label, mapping in mappings.items():
        assert score(p, mapping).g == pytest.approx(expected[label], abs=1e-12)
    best = max(expected.values())
    assert exhaustive(p).g == pytest.approx(best, abs=1e-12)
    assert anneal(p, AnnealConfig(early_exit=False)).g == pytest.approx(best, abs=1e-12)


# -- the searches ------------------------------------------------------------------------
@pytest.mark.parametrize("n,max_batch", [(3, 2), (4, 2), (4, 4), (5, 3)])
def test_exhaustive_is_optimal_on_small_cases(n, max_batch):
    for seed in range(3):
        p = problem(n, max_batch, seed)
        best = max(
            score(p, Mapping(order, sizes[sizes > 0])).g
            for order in itertools.permutations(range(n))
            for sizes in compositions(n, max_batch)
        )
        result = exhaustive(p)
        check(p, result.mapping)
        assert result.g == pytest.approx(best, rel=1e-12)
        assert score(p, result.mapping).g == pytest.approx(result.g, rel=1e-12)


def test_compositions_are_every_legal_split():
    comps = compositions(5, 2)
    assert len(comps) == 8  # Fibonacci: splits of 5 into parts of 1 or 2
    assert all(row.sum() == 5 and row[row > 0].max() <= 2 for row in comps)


def test_annealing_matches_exhaustive_search_on_a_seeded_suite():
    gaps = []
    for n, max_batch, seed in itertools.product((4, 6, 8), (1, 2, 4), range(4)):
        p = problem(n, max_batch, seed)
        opt = exhaustive(p).g
        sa = anneal(p, AnnealConfig(seed=seed, early_exit=False))
        assert sa.g <= opt * (1 + 1e-12)
        gaps.append((opt - sa.g) / opt)
    gaps = np.array(gaps)
    assert gaps.mean() < 0.01
    assert (gaps <= 0.01).mean() >= 0.9


def test_annealing_keeps_mappings_legal_and_never_loses_to_its_start():
    for n, max_batch, seed in itertools.product((5, 12, 30), (1, 3, 4), range(3)):
        p = problem(n, max_batch, seed)
        sa = anneal(p, AnnealConfig(seed=seed, early_exit=False))
        check(p, sa.mapping)
        assert score(p, sa.mapping).g == pytest.approx(sa.g, rel=1e-9)
        start = max(score(p, arrival_order(p)).g, score(p, by_predicted_e2e(p)).g)
        assert sa.g >= start


def test_annealing_is_deterministic_per_seed():
    p = problem(12, 4, 0)
    a, b = anneal(p, AnnealConfig(seed=3, early_exit=False)), anneal(p, AnnealConfig(seed=3, early_exit=False))
    assert np.array_equal(a.mapping.order, b.mapping.order) and np.array_equal(a.mapping.sizes, b.mapping.sizes)


def test_early_exit_when_ordering_by_predicted_e2e_meets_every_slo():
    easy = MappingProblem.build(random_requests(8, 0).assign(task="code", output_tokens=30, prompt_tokens=200), REFERENCE, 4)
    assert score(easy, by_predicted_e2e(easy)).met == easy.n
    res = anneal(easy)
    assert res.early_exit and res.evaluations == 1
    assert res.mapping.order.tolist() == by_predicted_e2e(easy).order.tolist()
    hard = problem(30, 2, 0)
    assert score(hard, by_predicted_e2e(hard)).met < hard.n
    assert not anneal(hard).early_exit


def test_annealing_rejects_a_bad_schedule():
    with pytest.raises(SchedlabError):
        AnnealConfig(t0=10, t_min=20)


# -- length estimates, instances ---------------------------------------------------------
def test_running_gaussian_tracks_each_task_and_honours_ranges():
    est = RunningGaussian(ranges={"code": (10, 20)})
    rng = np.random.default_rng(0)
    chat = rng.normal(300, 40, 500)
    est.observe_many(["chat"] * 500, chat)
    est.observe_many(["code"] * 3, [100, 200, 300])
    draws = est.estimate(["chat"] * 2000, np.random.default_rng(1))
    assert draws.mean() == pytest.approx(chat.mean(), rel=0.02)
    assert draws.std() == pytest.approx(chat.std(ddof=1), rel=0.1)
    assert set(est.estimate(["code"] * 50, rng)) <= set(range(10, 21))
    with pytest.raises(SchedlabError, match="no observed output lengths"):
        est.estimate(["video"], rng)


def test_perturbed_lengths_stay_within_the_error():
    true = np.full(1000, 400.0)
    out = perturbed(true, 0.05, np.random.default_rng(0))
    assert out.min() >= 380 and out.max() <= 420 and out.std() > 5


def test_instances_take_requests_by_most_free_memory():
    req = pd.DataFrame({"prompt_tokens": [100, 100, 100, 50], "output_tokens": [0, 0, 0, 0]})
    mem = [InstanceMemory(free_bytes=1000, bytes_per_token=1, usable=1.0), InstanceMemory(free_bytes=1150, bytes_per_token=1, usable=1.0)]
    # free 1000/1150 -> 1st to #1 (1050), 2nd to #1 (950), 3rd to #0 (900), 4th to #1 (900)
    assert assign(req, mem).tolist() == [1, 1, 0, 1]
    equal = [InstanceMemory(1e6, 2.0)] * 3
    where = assign(random_requests(30, 0).assign(prompt_tokens=100, output_tokens=100), equal)
    assert where.tolist() == [0, 1, 2] * 10  # equal requests: round robin


# -- workload ----------------------------------------------------------------------------
def _dump(conversations) -> bytes:
    return json.dumps(conversations).encode()


def test_first_turns_stream_and_stop_at_a_truncated_end():
    convs = [
        {"id": "a", "conversations": [{"from": "human", "value": "hello there"}, {"from": "gpt", "value": "hi, how can I help?"}]},
        {"id": "b", "conversations": [{"from": "gpt", "value": "no human first"}, {"from": "human", "value": "x"}]},
        {"id": "c", "conversations": [{"from": "human", "value": "write code"}, {"from": "gpt", "value": "def f(): pass"}]},
    ]
    data = _dump(convs)
    cut = data[: data.index(b'"c"') + 20]  # the third conversation is cut mid-way
    assert [p for p, _ in first_turns(io.BytesIO(data))] == ["hello there", "write code"]
    assert [p for p, _ in first_turns(io.BytesIO(cut))] == ["hello there"]
    lengths = count_lengths(io.BytesIO(data), "fixture")
    assert len(lengths) == 2 and (lengths["prompt_tokens"] > 0).all() and (lengths["output_tokens"] > 0).all()


def test_azure_code_standin_is_labelled(tmp_path):
    path = tmp_path / "code.csv"
    pd.DataFrame({"TIMESTAMP": ["2023-11-16 18:17:03.9799600", "2023-11-16 18:17:04.0319600"], "ContextTokens": [300, 0], "GeneratedTokens": [20, 5]}).to_csv(path, index=False)
    out = azure_code_standin(path)
    assert out[["prompt_tokens", "output_tokens"]].values.tolist() == [[300, 20]]
    assert "stand-in" in out["source"].iloc[0]


def test_slo_mix_is_even_under_2k_and_seeded():
    rng = np.random.default_rng(0)
    pool = pd.DataFrame({"prompt_tokens": rng.integers(10, 3000, 500), "output_tokens": rng.integers(5, 900, 500)})
    a = slo_mix_trace(pool, pool, 11, np.random.default_rng(5))
    b = slo_mix_trace(pool, pool, 11, np.random.default_rng(5))
    pd.testing.assert_frame_equal(a, b)
    assert (a["task"] == "chat").sum() == 6 and (a["task"] == "code").sum() == 5
    assert ((a["prompt_tokens"] + a["output_tokens"]) < 2000).all()
    with pytest.raises(SchedlabError):
        slo_mix_trace(pool.assign(prompt_tokens=5000), pool, 4, rng)


# -- serving a mapping -------------------------------------------------------------------
@pytest.fixture(scope="module")
def engine():
    return paper_engine(hardware("2xV100-32GB"), model_arch("qwen2.5-7b"))


def test_served_mapping_keeps_every_request_and_runs_batches_in_order(engine):
    req = random_requests(12, 1)
    p = MappingProblem.build(req, REFERENCE, 3)
    mapping = anneal(p, AnnealConfig(early_exit=False)).mapping
    out = serve(req, mapping, engine)
    assert sorted(out["request_id"]) == list(range(12))
    assert out["finish_s"].notna().all()
    rank = mapping.rank()
    # a later batch's requests are first scheduled no earlier than an earlier batch's
    first = out["first_scheduled_s"].to_numpy()
    for j in range(len(mapping.sizes) - 1):
        assert first[rank == j].min() <= first[rank == j + 1].min()
    s = served_score(out)
    assert 0 <= s.met <= 12 and s.total_e2e_s == pytest.approx(out["finish_s"].sum())


def test_served_g_ranks_sa_above_fcfs_on_a_loaded_set(engine):
    req = random_requests(24, 2)
    p = MappingProblem.build(req, REFERENCE, 4)
    fcfs = served_score(serve(req, arrival_order(p), engine)).g
    sa = served_score(serve(req, anneal(p).mapping, engine)).g
    assert sa > fcfs


# -- CLI ---------------------------------------------------------------------------------
def _cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "schedlab.cli", *args], cwd=cwd, capture_output=True, text=True)


@pytest.mark.slow
def test_slosa_cli_fits_and_fails_clearly(tmp_path):
    ok = _cli("slosa", "profile", "--source", "roofline", "--calibrate", "--out", "p.parquet", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    ok = _cli("slosa", "fit", "--profile", "p.parquet", "--out", "fit.json", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    fit = LatencyPredictor.load(tmp_path / "fit.json")
    assert fit.e2e(1, 1000, 150) == pytest.approx(REFERENCE.e2e(1, 1000, 150), rel=0.05)
    bad = _cli("slosa", "fit", "--out", "x.json", cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0 and "--reference" in bad.stderr
    missing = _cli("slosa", "study", "compare", "--predictor", "nope.json", "--chat", "c", "--code", "d", "--out", "o.parquet", cwd=tmp_path)
    assert missing.returncode == 2 and "nope.json" in missing.stderr and missing.stderr.strip().count("\n") == 0
    assert not (tmp_path / "x.json").exists() and not (tmp_path / "o.parquet").exists()


def test_paper_d_is_compared_by_what_its_predictor_predicts():
    """The paper's predictor against itself: every prediction row matches, its coefficients are
    shown but counted apart, and SA's two claims are bounds (met or not by the value alone)."""
    from schedlab.fit.latency_predictor import REFERENCE
    from schedlab.counting import counts, paper_vs_ours
    from schedlab.slosa.report import ROW_BATCHES, ROW_LENGTHS, prediction_errors, slosa_rows

    grid = prediction_errors(REFERENCE)
    assert len(grid) == 2 * 6 * 8 and (grid["error_pct"].abs() < 1e-9).all()
    slower = REFERENCE.scaled({"prefill.d": 2.0})
    off = prediction_errors(slower, batches=(1,), lengths=(1000,)).set_index("phase")
    assert off.loc["decode", "error_pct"] == pytest.approx(0.0)
    assert off.loc["prefill", "error_pct"] == pytest.approx(REFERENCE.prefill.d / REFERENCE.prefill(1, 1000) * 100)
    table = paper_vs_ours(slosa_rows(REFERENCE, 99.4, 0.2))
    roles = table.groupby("role").size().to_dict()
    assert roles == {"fitted": 2, "predicted": 2 * len(ROW_BATCHES) * len(ROW_LENGTHS) - 2, "not identified": 8, "bound": 2}
    assert (table.loc[table["role"] != "bound", "within"] == "yes").all()
    n = roles["predicted"]
    assert counts(table) == {"fitted": (2, 2), "derived": 0, "predicted": (n, 0, n), "changes": (0, 0, 0),
                             "bound": (2, 2), "not identified": 8}
    missed = paper_vs_ours(slosa_rows(REFERENCE, 97.0, 1.5))
    assert (missed.loc[missed["role"] == "bound", "within"] == "no").all()
