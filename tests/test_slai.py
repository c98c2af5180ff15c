"""Paper C: the batch builders, per-class TBT, the tile staircase, the calibration, the
workload and ``schedlab slai``. The engine invariants every builder keeps are tested with every
other scheduler in ``test_engine.py``."""

from __future__ import annotations

import io
import json
import math

import numpy as np
import pandas as pd
import pytest

from schedlab.engine import Arena, EngineConfig
from schedlab.engine import run as run_engine
from schedlab.slai.algorithm2 import Algorithm2
from schedlab.builders.prefill_priority import PrefillPriority
from schedlab.builders.rad import RAD
from schedlab.simulate import scheduler_for as make_builder
from schedlab.builders.request_level import RequestLevel
from schedlab.slai.run import by_bucket, summary
from schedlab.builders.sarathi import Sarathi
from schedlab.slai.slai import SLAI, dynamic_offset
from schedlab.errors import SchedlabError
from schedlab.engine.steptime import StepTimeModel
from schedlab.validation import read_steptime, write_steptime
from traces import two_class_trace

#: A staircase engine model shaped like the calibrated one (seconds).
MODEL = StepTimeModel(intercept=0.015, ctx_tokens=1.4e-7, prefill_pairs=2e-9, tile_tokens=6e-5, tile=128)





def run(builder, trace=None, capacity=4000, **kw):
    trace = two_class_trace() if trace is None else trace
    return run_engine(trace, builder, Arena(MODEL, EngineConfig(kv_capacity_blocks=capacity)), record=True, **kw)


class Step:
    """What a check sees of one step: the engine and its builder, and the plan's effect
    (``n_active``: requests running once it is carried out; ``fits``: whether a waiting
    request would fit in what the plan leaves free)."""

    def __init__(self, engine, plan):
        self.engine, self.builder, self.plan = engine, engine.scheduler, plan
        self.n_active = len(engine.running) - len(plan.preempted) + len(plan.admitted)
        self.free = engine.free - int((engine.blocks_for(engine.computed[plan.requests] + plan.tokens)
                                       - np.where(np.isin(plan.requests, plan.admitted), 0,
                                                  engine.blocks[plan.requests])).sum())

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def fits(self, i):
        return int(self.engine.blocks_for(int(self.engine.seq[i]))) <= self.free


def checked(builder, check):
    """Call ``check(step, decodes, chunks, started_before)`` on every plan the builder makes:
    decodes are the planned running requests that decode, chunks the other ``(request, tokens)``."""
    inner = builder.schedule

    def schedule():
        e = builder.engine
        started = list(e.prefilling())
        plan = inner()
        decoding = set(e.decoding().tolist())
        is_dec = np.array([i in decoding for i in plan.requests.tolist()], bool)
        dec = plan.requests[is_dec]
        chunks = [(int(i), int(c)) for i, c, d in zip(plan.requests, plan.tokens, is_dec) if not d]
        check(Step(e, plan), dec, chunks, started)
        return plan

    builder.schedule = schedule
    return builder


def test_preemption_recomputes_and_still_finishes_everything():
    res = run(RAD(n=64, tile_row=32, tile_col=64, tile_red=32), capacity=1200)
    assert res.requests["preemptions"].sum() > 0
    assert res.requests["finish_s"].notna().all()


# -- per-class P99 TBT over every token -----------------------------------------------------
def test_per_class_p99_tbt_matches_brute_force_and_excludes_warm_up():
    trace = two_class_trace(400, rate=5.0)
    warmup = 10.0
    res = run(make_builder("slai-spf-dynamic"), trace, capacity=100_000, warmup_s=warmup)
    for cls in ("paying", "free"):
        rows = np.flatnonzero((trace["slo_class"] == cls).to_numpy() & (trace["arrival_s"] >= warmup).to_numpy())
        gaps = np.concatenate([np.diff(res.token_times[i]) for i in rows])
        assert res.class_gaps[cls].total == gaps.size
        exact = np.quantile(gaps, 0.99, method="inverted_cdf")
        assert res.class_gaps[cls].quantile(0.99) == pytest.approx(exact, rel=0.006)
    s = summary(res, trace, policy="x")
    assert s["completed"] == int((trace["arrival_s"] >= warmup).sum())
    assert s["tbt_ok"] == (s["tbt_ok_paying"] and s["tbt_ok_free"])
    assert s["tbt_ok_paying"] == (s["p99_tbt_ms_paying"] <= 100.0)


# -- Sarathi --------------------------------------------------------------------------------
@pytest.mark.parametrize("order", ["fcfs", "spf"])
def test_sarathi_takes_every_decode_then_fills_the_budget(order):
    def check(eng, dec, chunks, started):
        assert set(dec.tolist()) == set(eng.decoding().tolist())
        used = len(dec) + sum(c for _, c in chunks)
        assert used <= 256 and eng.n_active <= 32
        if any(i not in started for i, _ in chunks):  # new requests only after started ones
            assert [i for i, _ in chunks[: len(started)]] == started

    run(checked(Sarathi(budget=256, max_active=32, order=order), check))


def test_spf_admits_the_shortest_waiting_prompt_first():
    admitted = []

    def check(eng, dec, chunks, started):
        admitted.extend(i for i, _ in chunks if i not in started)

    trace = two_class_trace(60, rate=1000.0)  # everyone waits at once
    run(checked(Sarathi(budget=512, max_active=1, order="spf"), check), trace, capacity=100_000)
    first = admitted[1:8]
    assert list(trace["prompt_tokens"].iloc[first]) == sorted(trace["prompt_tokens"].iloc[first])


# -- SLAI -------------------------------------------------------------------------------------
def test_slai_orders_decodes_by_last_schedulable_time_and_respects_every_limit():
    seen = {"critical": 0, "noncritical": 0}

    def check(eng, dec, chunks, started):
        b = eng.builder
        tokens = len(dec) + sum(c for _, c in chunks)
        assert tokens <= b.budget and len(dec) <= b.decode_limit and eng.n_active <= b.max_active
        all_dec = eng.decoding()
        deadline = b.deadlines(all_dec)
        mine = b.deadlines(dec)
        assert np.all(np.diff(mine) >= 0)  # earliest last schedulable time first
        left = np.setdiff1d(all_dec, dec)
        if len(dec) and left.size:
            assert b.deadlines(left).min() >= mine.max()  # nothing earlier was left out
        critical = int((deadline <= eng.now).sum())
        if critical > len(dec):  # some critical decode left out only when a limit binds
            assert len(dec) == b.decode_limit or tokens == b.budget
        seen["critical"] += int((mine <= eng.now).sum())
        seen["noncritical"] += int((mine > eng.now).sum())
        news = [k for k, (i, _) in enumerate(chunks) if i not in started]
        if news:  # started prefills first, each given all it needs
            assert [i for i, _ in chunks[: news[0]]] == [i for i in started][: news[0]]
            assert all(c == eng.need(i) for i, c in chunks[: news[0]])

    run(checked(SLAI(budget=256, max_active=24, decode_limit=16, offset=3.0), check), capacity=100_000)
    assert seen["critical"] > 0 and seen["noncritical"] > 0


def test_slai_defers_free_decodes_but_not_paying_ones():
    trace = two_class_trace(400, rate=5.0)
    res = run(SLAI(offset=5.0), trace, capacity=100_000)
    s = summary(res, trace)
    sarathi = summary(run(Sarathi(), trace, capacity=100_000), trace)
    assert s["p99_tbt_ms_free"] > 1.5 * sarathi["p99_tbt_ms_free"]
    assert s["p99_tbt_ms_paying"] <= 100.0


def test_dynamic_offset_switches_at_96_percent_kv_use():
    assert dynamic_offset(0.0) == dynamic_offset(0.9599) == 5.0
    assert dynamic_offset(0.96) == dynamic_offset(1.0) == 10.0
    offsets = set()

    def check(eng, dec, chunks, started):
        offsets.add((eng.builder.current_offset(), eng.kv_frac >= 0.96))

    run(checked(SLAI(offset=None), check), two_class_trace(300, rate=8.0), capacity=2500)
    assert offsets == {(5.0, False), (10.0, True)}


def test_priority_variant_admits_paying_requests_strictly_first():
    order = []

    def check(eng, dec, chunks, started):
        order.extend(i for i, _ in chunks if i not in started)

    trace = two_class_trace(80, rate=1000.0, share=0.5)
    run(checked(SLAI(max_active=1, offset=None, paying_first="paying"), check), trace, capacity=100_000)
    classes = trace["slo_class"].to_numpy()[order[1:]]
    n_paying = int((classes == "paying").sum())
    assert (classes[:n_paying] == "paying").all()


# -- RAD, Algorithm 2, request-level, vLLM ----------------------------------------------------
def test_rad_alternates_modes_with_lcm_aligned_chunks():
    tiles = dict(tile_row=32, tile_col=8, tile_red=48)
    lcm = math.lcm(32, 8, 48)
    history = []

    def check(eng, dec, chunks, started):
        b = eng.builder
        if chunks:
            assert len(dec) == 0 and len(chunks) == 1
            i, c = chunks[0]
            assert c == min(lcm, eng.need(i)) and eng.n_active <= 8
            if history and history[-1][0] == "prefill" and history[-1][2] > 0:
                assert i == history[-1][1]  # a prefill runs to its end before anything else
            history.append(("prefill", i, eng.need(i) - c))
        else:
            assert set(dec.tolist()) == set(eng.decoding().tolist())
            assert len(dec) >= 8 or not b.n_waiting() or b.started >= b.n or not eng.fits(b.queue.peek())
            history.append(("decode", None, 0))

    run(checked(RAD(n=6, **tiles), check), capacity=100_000)
    modes = [h[0] for h in history]
    assert "prefill" in modes and "decode" in modes


def test_rad_cycle_admits_at_most_n_requests():
    per_cycle = []

    def check(eng, dec, chunks, started):
        if len(eng.decoding()) == 0 and not started:
            per_cycle.append(0)
        if chunks and chunks[0][0] not in started:
            per_cycle[-1] += 1

    run(checked(RAD(n=3, tile_row=64, tile_col=64, tile_red=64), check), capacity=100_000)
    assert max(per_cycle) <= 3 and sum(per_cycle) > 0


def test_algorithm2_prefills_the_cycle_then_decodes_a_sliding_set():
    def check(eng, dec, chunks, started):
        b = eng.builder
        assert len(dec) <= 4
        if len(dec):
            assert not chunks and set(dec.tolist()) <= set(b.cycle)
            assert all(eng.seq[i] > eng.prompt[i] for i in b.cycle if i in eng.running)  # all prefilled

    res = run(checked(Algorithm2(n=10, tile_row=32, tile_col=4, tile_red=32), check), capacity=100_000)
    assert res.requests["finish_s"].notna().all()


def test_request_level_admits_only_when_the_group_is_done():
    def check(eng, dec, chunks, started):
        if chunks:
            assert len(dec) == 0 and len(chunks) <= 8 and eng.n_active == len(chunks)
            assert all(c == eng.need(i) for i, c in chunks)  # whole prompts

    run(checked(RequestLevel(max_batch=8), check), capacity=100_000)


def test_prefill_priority_runs_prefill_only_steps_of_whole_prompts():
    def check(eng, dec, chunks, started):
        if chunks:
            assert len(dec) == 0 and sum(c for _, c in chunks) <= 8192
            assert all(c == eng.need(i) for i, c in chunks)
        else:
            assert set(dec.tolist()) == set(eng.decoding().tolist())

    run(checked(PrefillPriority(), check), capacity=100_000)


def test_unknown_scheduler_is_a_clear_error():
    with pytest.raises(SchedlabError, match="unknown scheduler 'nope'"):
        make_builder("nope")


def test_buckets_count_served_requests_by_prompt_length():
    trace = two_class_trace(200)
    res = run(make_builder("sarathi-fcfs"), trace, capacity=100_000)
    table = by_bucket(res, horizon_s=float(trace["arrival_s"].max()))
    assert table["requests"].sum() == 200
    assert (table["served"] <= table["requests"]).all()
    assert list(table["bucket"]) == sorted(table["bucket"], key=lambda b: float(b.split(",")[0][1:]))


# -- the tile staircase, its fit and the calibration ----------------------------------------
def test_staircase_is_off_by_default_and_steps_by_whole_tiles():
    plain = StepTimeModel(intercept=0.01, n_prefill_tokens=1e-5, n_decode=2e-5, ctx_tokens=1e-7)
    assert plain(0, 300, 7, 9000) == 0.01 + 300e-5 + 7 * 2e-5 + 9000e-7  # unchanged form
    stair = StepTimeModel(intercept=0.01, tile_tokens=1e-4, tile=128)
    assert stair(0, 1, 0, 0) == stair(0, 128, 0, 0) < stair(0, 129, 0, 0) == stair(0, 200, 56, 0)
    assert stair(0, 129, 0, 0) - stair(0, 128, 0, 0) == pytest.approx(128 * 1e-4)
    back = StepTimeModel(**{**stair.__dict__})
    assert back == stair and back.scaled(2.0, 1.0).tile_tokens == pytest.approx(2e-4)
    kneed = StepTimeModel(intercept=0.01, n_decode=1e-4, knee_tokens=1e-3, knee=6)
    assert kneed(0, 2, 4, 0) == pytest.approx(0.01 + 4e-4)  # 6 tokens: at the knee
    assert kneed(0, 2, 7, 0) == pytest.approx(0.01 + 7e-4 + 3 * 1e-3)
    assert kneed.scaled(2.0, 1.0).knee_tokens == pytest.approx(2e-3) and kneed.scaled(2.0, 1.0).knee == 6


def test_fit_recovers_a_known_staircase_and_prefill_attention(tmp_path):
    from schedlab.fit.steptime import fit_steptime, predict

    rng = np.random.default_rng(0)
    n = 400
    prof = pd.DataFrame({
        "source": "synthetic", "hardware": "x", "model": "y", "n_encoder": 0,
        "n_prefill_tokens": rng.integers(0, 1024, n), "n_decode": rng.integers(0, 64, n),
        "ctx_tokens": rng.integers(0, 200_000, n), "prefill_pairs": rng.integers(0, 5_000_000, n),
    })
    truth = StepTimeModel(intercept=0.015, n_decode=1e-5, ctx_tokens=1.4e-7, prefill_pairs=2e-9, tile_tokens=6e-5, tile=128)
    prof["time_s"] = predict(truth, prof)
    fit = fit_steptime(prof, tile=128)
    for term in ("intercept", "n_decode", "ctx_tokens", "prefill_pairs", "tile_tokens"):
        assert getattr(fit, term) == pytest.approx(getattr(truth, term), rel=1e-6, abs=1e-12)
    assert fit.tile == 128 and fit.meta["r2"] == pytest.approx(1.0)
    assert fit_steptime(prof).meta["r2"] < 0.9999  # without the staircase the fit is worse
    write_steptime(fit, tmp_path / "m.json")
    assert read_steptime(tmp_path / "m.json") == fit


def test_roofline_staircase_and_additive_form():
    from schedlab.latency.catalogue import hardware, model_arch
    from schedlab.latency.roofline import step_time

    hw, arch = hardware("RTX-6000-Ada"), model_arch("mistral-7b")
    t = lambda c, **kw: step_time(hw, arch, 0, c, 0, 0, prefill_pairs=0, **kw)
    assert t(1, tile=128, overlap=False) == t(128, tile=128, overlap=False) < t(129, tile=128, overlap=False)
    assert t(1000, tile=128) == t(1024, tile=128) < t(1025, tile=128)  # compute-bound: steps too
    assert t(1000) < t(1024)  # no staircase by default
    weights = arch.decoder_params * 2 / hw.mem_bw
    assert t(64, overlap=False) == pytest.approx(weights + 2 * arch.decoder_params * 64 / hw.peak_flops)
    assert t(64) == pytest.approx(weights)  # overlapped: memory-bound


def test_calibration_matches_the_measured_chunk_times():
    from schedlab.slai.model import MEASURED_CHUNKS, MEASURED_TIMES_S, calibrated_model, roofline_profile
    from schedlab.fit.chunk_times import calibrate_chunks, chunk_time
    from schedlab.latency.catalogue import hardware, model_arch

    model, record = calibrated_model(roofline_profile(hardware("RTX-6000-Ada"), model_arch("mistral-7b")))
    np.testing.assert_allclose(chunk_time(model, MEASURED_CHUNKS), MEASURED_TIMES_S, rtol=0.05)
    assert record["max_rel_error"] < 0.05 and model.tile == 128
    assert 0.5 < 1 / record["compute"] < 1.0 and 0.5 < 1 / record["memory"] <= 1.0  # plausible efficiencies
    assert model.meta["calibration"]["targets_s"] == list(MEASURED_TIMES_S)
    with pytest.raises(SchedlabError, match="two"):
        calibrate_chunks(model, [64], [0.02])


# -- data and workload ------------------------------------------------------------------------
def test_openchat_lengths_from_the_mirror_match_the_paper_table(mirror):
    from schedlab.data.openchat import openchat_lengths

    pool = openchat_lengths()
    assert len(pool) == 30_731
    assert pool["prompt_tokens"].median() == 1730 and pool["prompt_tokens"].quantile(0.9) == pytest.approx(5696, abs=2)
    assert pool["output_tokens"].median() == 415
    assert (pool["prompt_tokens"] + pool["output_tokens"]).max() <= 8192


def test_openchat_rounds_from_the_original_format():
    from schedlab.data.openchat import count_rounds, rounds

    data = [
        {"items": [{"from": "human", "value": "hi there"}, {"from": "gpt", "value": "hello friend"},
                   {"from": "human", "value": "more"}, {"from": "gpt", "value": "sure thing"}]},
        {"conversations": [{"from": "gpt", "value": "x"}, {"from": "human", "value": "q"}]},
    ]
    got = list(rounds(io.BytesIO(json.dumps(data).encode())))
    assert got == [("hi there", "hello friend"), ("hi therehello friendmore", "sure thing")]
    table = count_rounds(io.BytesIO(json.dumps(data).encode()), "fixture")
    assert len(table) == 2 and table["prompt_tokens"].iloc[1] > table["prompt_tokens"].iloc[0]


def test_openchat_loader_without_mirror_or_network_fails_clearly(data_cache, monkeypatch):
    from schedlab.data import openchat
    from schedlab.data.sources import DataUnavailable

    def offline(url, dest):
        raise DataUnavailable(f"cannot download {url}")

    monkeypatch.setattr(openchat, "download", offline)
    with pytest.raises(DataUnavailable, match="sharegpt_gpt4.json"):
        openchat.openchat_lengths()


def test_workload_shares_arrivals_and_lengths_across_schedulers_and_shares():
    from schedlab.workload.openchat import openchat_trace

    pool = pd.DataFrame({"prompt_tokens": np.arange(1, 1001), "output_tokens": np.arange(1000, 0, -1)})
    a, b = openchat_trace(pool, 1.6, 2100, 0.05, 0), openchat_trace(pool, 1.6, 2100, 0.95, 0)
    assert 3100 < len(a) < 3600 and a["arrival_s"].max() < 2100
    pd.testing.assert_frame_equal(a.drop(columns=["slo_class", "tbt_target_s"]), b.drop(columns=["slo_class", "tbt_target_s"]))
    assert set(a.index[a["slo_class"] == "paying"]) <= set(b.index[b["slo_class"] == "paying"])
    assert (a["slo_class"] == "paying").mean() == pytest.approx(0.05, abs=0.015)
    assert (a.loc[a["slo_class"] == "paying", "tbt_target_s"] == 0.1).all()
    pd.testing.assert_frame_equal(a, openchat_trace(pool, 1.6, 2100, 0.05, 0))
    with pytest.raises(SchedlabError, match="share"):
        openchat_trace(pool, 1.0, 10, 1.5, 0)


# -- the command line -------------------------------------------------------------------------
def _cli(*args):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "schedlab.cli", *args], capture_output=True, text=True)


@pytest.mark.slow
def test_cli_runs_one_scheduler_and_rejects_bad_input(tmp_path):
    from schedlab.io import write_parquet

    pool = tmp_path / "pool.parquet"
    write_parquet(pd.DataFrame({"prompt_tokens": [100, 900, 3000], "output_tokens": [50, 10, 300]}), pool)
    write_steptime(MODEL, tmp_path / "m.json")
    common = ["--pool", str(pool), "--steptime", str(tmp_path / "m.json"), "--duration-s", "60", "--warmup-s", "5"]
    out = [f"--out-results={tmp_path / 'r.parquet'}", f"--out-summary={tmp_path / 's.json'}"]
    ok = _cli("slai", "run", "--scheduler", "slai-spf-dynamic", "--rate", "1", "--share", "0.5", *common, *out)
    assert ok.returncode == 0, ok.stderr
    s = json.loads((tmp_path / "s.json").read_text())
    assert s["scheduler"] == "slai-spf-dynamic" and s["completed"] > 0 and "p99_tbt_ms_paying" in s
    for bad, msg in (
        (["--scheduler", "nope", "--rate", "1"], "unknown scheduler"),
        (["--scheduler", "rad", "--rate", "-1"], "positive"),
        (["--scheduler", "rad", "--rate", "1", "--share", "2"], "within [0, 1]"),
    ):
        (tmp_path / "s2.json").unlink(missing_ok=True)
        proc = _cli("slai", "run", *bad, *common, f"--out-results={tmp_path / 'r2.parquet'}", f"--out-summary={tmp_path / 's2.json'}")
        assert proc.returncode == 2 and msg in proc.stderr and proc.stderr.count("\n") == 1
        assert not (tmp_path / "s2.json").exists()
    missing = _cli("slai", "run", "--scheduler", "rad", "--rate", "1", "--pool", str(tmp_path / "none.parquet"),
                   "--steptime", str(tmp_path / "m.json"), *out)
    assert missing.returncode == 2 and "file not found" in missing.stderr


def test_capacity_brackets_extends_and_bisects():
    from schedlab.slai.studies import capacity

    class Stub:
        calls = []

        def run(self, scheduler, rate, share, seed):
            self.calls.append(rate)
            return None, {"within_capacity": rate <= {"a": 1.37, "b": 1.37, "c": 0.1}[scheduler]}

    def grid(scheduler, rates):
        return pd.DataFrame({"scheduler": scheduler, "share": 0.05, "seed": 0, "rate": rates,
                             "within_capacity": [r <= {"a": 1.37, "b": 1.37, "c": 0.1}[scheduler] for r in rates]})

    stub = Stub()
    table = capacity(stub, pd.concat([grid("a", [0.5, 1.0, 1.5]), grid("b", [0.5, 1.0]), grid("c", [0.5, 1.0])]),
                     iterations=3).set_index("scheduler")
    assert table.loc["a", "capacity_rps"] == pytest.approx(1.3125) and table.loc["a", "bound"] == "bracketed"
    assert 1.25 <= table.loc["b", "capacity_rps"] <= 1.37 and table.loc["b", "bound"] == "bracketed"
    assert table.loc["c", "capacity_rps"] == 0.0 and table.loc["c", "bound"] == "below"


# -- calibration on the baseline's serving capacity --------------------------------------------
@pytest.mark.slow
def test_serving_overhead_puts_the_baseline_at_the_capacity_and_runs_no_other_scheduler(monkeypatch):
    from dataclasses import replace

    from schedlab.slai.serving import BASELINE_SCHEDULER, serving_overhead
    from schedlab.slai.run import CAPACITY_TTFT_MS
    from schedlab.slai.studies import Setup

    rng = np.random.default_rng(0)
    pool = pd.DataFrame({"prompt_tokens": rng.integers(200, 3000, 500), "output_tokens": rng.integers(50, 400, 500)})
    arena = Arena(MODEL, EngineConfig(max_num_batched_tokens=512, kv_capacity_blocks=20_000))
    setup = Setup(pool, arena, duration_s=400, warmup_s=40)
    seen = []
    original = Setup.run
    monkeypatch.setattr(Setup, "run", lambda self, scheduler, *a: seen.append(scheduler) or original(self, scheduler, *a))
    model, record = serving_overhead(setup, capacity_rps=1.5, shares=[0.05, 0.5])
    assert set(seen) == {BASELINE_SCHEDULER}  # only the baseline's runs enter the fit
    assert model.intercept == pytest.approx(MODEL.intercept + record["overhead_s"]) and record["overhead_s"] > 0
    assert model.meta["calibration"]["serving"] is record
    lo, hi = record["overhead_interval_s"]
    assert lo < record["overhead_s"] < hi  # a higher capacity needs less overhead
    calibrated = replace(setup, arena=replace(arena, step_time=model))
    at = calibrated.run(BASELINE_SCHEDULER, 1.5, 0.05, 0)[1]["p50_ttft_ms"]
    assert at == pytest.approx(CAPACITY_TTFT_MS, rel=0.02)
    assert calibrated.run(BASELINE_SCHEDULER, 1.3, 0.05, 0)[1]["p50_ttft_ms"] < CAPACITY_TTFT_MS
    # The treatment's capacity beside the baseline's across the overhead's interval (a prediction).
    from schedlab.slai.serving import capacity_sensitivity

    sens = capacity_sensitivity(setup, record, rates=(0.8, 1.6, 2.4), iterations=2)
    assert list(sens["overhead"]) == ["low", "fitted", "high"]
    assert sens["overhead_s"].is_monotonic_increasing
    assert sens[BASELINE_SCHEDULER].is_monotonic_decreasing  # more overhead, less capacity
    assert sens["gain_pct"].to_numpy() == pytest.approx(
        (sens["slai-spf-dynamic"] / sens[BASELINE_SCHEDULER] - 1).to_numpy() * 100)


def test_a_scaled_pool_keeps_every_request_within_the_engines_context():
    from schedlab.workload.openchat import openchat_trace, scaled_pool

    pool = pd.DataFrame({"prompt_tokens": [8000, 100, 1], "output_tokens": [1024, 4, 1]})
    out = scaled_pool(pool, 0.25, 2048)
    assert out["output_tokens"].tolist() == [256, 1, 1]
    assert out["prompt_tokens"].tolist() == [2048 - 256, 25, 1]
    trace = openchat_trace(out, 5.0, 20.0, 0.5, 0, {"paying": 0.3, "free": 1.5})
    assert set(trace.groupby("slo_class")["tbt_target_s"].first().items()) == {("paying", 0.3), ("free", 1.5)}
    assert trace[["prompt_tokens", "output_tokens"]].equals(openchat_trace(out, 5.0, 20.0, 0.5, 0)[["prompt_tokens", "output_tokens"]])


# -- routing across identical engines ---------------------------------------------------------
def test_the_routing_study_serves_one_engines_rate_per_engine_and_reads_it():
    from schedlab.slai.report import routing_capacity, routing_reading
    from schedlab.slai.studies import Setup, routing

    rng = np.random.default_rng(0)
    pool = pd.DataFrame({"prompt_tokens": rng.integers(200, 3000, 500), "output_tokens": rng.integers(50, 400, 500)})
    setup = Setup(pool, Arena(MODEL, EngineConfig(max_num_batched_tokens=512, kv_capacity_blocks=20_000)),
                  duration_s=200, warmup_s=20)
    table = routing(setup, ["sarathi-fcfs"], replicas=(1, 2), factors=(0.8, 1.2), backlog=100)
    assert len(table) == 2 * 2 * 2
    one = table[table["replicas"] == 1].drop(columns="router").reset_index(drop=True)  # rows: each load, each router
    pd.testing.assert_frame_equal(one.iloc[0::2].reset_index(drop=True), one.iloc[1::2].reset_index(drop=True))
    below, above = table[table["factor"] == 0.8], table[table["factor"] == 1.2]
    assert (below["served_per_offered"] > 0.9).all()  # below saturation every engine keeps up
    assert (above["served_per_saturation"] > 0.9).all() and (above["left_per_engine"] > below["left_per_engine"].max()).all()
    cap = routing_capacity(table)
    assert set(cap["factor"]) == {1.2} and (cap.loc[cap["replicas"] == 1, "per_single"] == 1).all()
    [sentence] = routing_reading(table)
    assert sentence.startswith("Sarathi (FCFS): at 1.2x one engine's saturation throughput, random routing served")
    assert "kept the throughput per engine, as the theorem states" in sentence and "at 0.8x load on 2 engines" in sentence


def test_the_routing_reading_says_when_random_routing_loses_throughput():
    from schedlab.slai.report import routing_reading

    rows = [{"scheduler": "rad", "router": router, "replicas": n, "factor": f, "served_rps_per_engine": served,
             "p50_ttft_ms": ttft, "p99_e2el_ms": 2e4}
            for router, n, f, served, ttft in [("random", 1, 1.1, 2.0, 500), ("least-requests", 1, 1.1, 2.0, 500),
                                               ("random", 4, 1.1, 1.8, 900), ("least-requests", 4, 1.1, 2.0, 600),
                                               ("random", 4, 0.9, 1.5, 800), ("least-requests", 4, 0.9, 1.5, 400)]]
    [sentence] = routing_reading(pd.DataFrame(rows))
    assert sentence == ("RAD (N = 128): at 1.1x one engine's saturation throughput, random routing served 90% to 100% of "
                        "one engine's rate per engine on 1 to 4 engines (join-the-shortest-queue: 100% to 100%), so it lost "
                        "more than 5% of the throughput per engine, against the theorem; at 0.9x load on 4 engines its "
                        "median TTFT was 800 ms against 400 ms (2.00x) and its P99 E2E latency 20.0 s against 20.0 s.")
