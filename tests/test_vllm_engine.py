"""End-to-end runs through a real vLLM engine (CPU build, dummy weights, tiny Llama)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("vllm")

from schedlab.backends.vllm_engine import EngineSpec, replay, start_engine  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.exclusive]


def test_sjf_in_a_real_engine_admits_by_audio_duration():
    """One sequence at a time: a burst of four is served shortest audio first, lengths forced."""
    import schedlab.slosa.search  # noqa: F401  numba/llvmlite loaded, as in a notebook mixing papers

    assert "llvmlite.binding.ffi" in sys.modules
    llm = start_engine(EngineSpec(max_num_seqs=1), policy="sjf", kappa={"en": 3.0})
    assert "llvmlite.binding.ffi" in sys.modules  # hidden from vLLM's start-up scan only
    trace = pd.DataFrame(
        {
            "request_id": [0, 1, 2, 3],
            "arrival_s": [0.0, 0.0, 0.0, 0.0],
            "prompt_tokens": [8, 8, 8, 8],
            "output_tokens": [24, 12, 6, 18],
            "audio_duration_s": [8.0, 4.0, 2.0, 6.0],
            "language": "en",
        }
    )
    res = replay(llm, trace)
    req = res.requests
    assert req["finish_s"].notna().all()
    order = list(req.sort_values("first_scheduled_s")["request_id"])
    assert order == [2, 1, 3, 0]
    # Each request ran alone: it finished before the next was admitted.
    by_start = req.sort_values("first_scheduled_s")
    assert (by_start["finish_s"].to_numpy()[:-1] <= by_start["first_scheduled_s"].to_numpy()[1:] + 1e-9).all()
    # Forced lengths: every generated token after the first left one gap.
    assert res.gaps.total == int((trace["output_tokens"] - 1).sum())
    assert (req["first_scheduled_s"] <= req["first_token_s"]).all() and (req["first_token_s"] < req["finish_s"]).all()


@pytest.mark.parametrize("policy", ["fcfs", "hrrn", "ewsjf"])
def test_vllm_run_cli_replays_a_trace(tmp_path, policy):
    """Each policy family through a real engine: FCFS, a victim-ranking policy (HRRN) and
    paper B's multi-queue EWSJF (prompt lengths from the engine's requests)."""
    rng = np.random.default_rng(0)
    n = 30
    trace = pd.DataFrame(
        {
            "request_id": np.arange(n),
            "arrival_s": np.sort(rng.uniform(0, 2.0, n)),
            "prompt_tokens": rng.integers(4, 200, n),
            "output_tokens": rng.integers(5, 40, n),
            "audio_duration_s": rng.uniform(2, 20, n),
            "language": "en",
        }
    )
    trace.to_parquet(tmp_path / "trace.parquet")
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "schedlab.cli", "vllm-run", "--trace", str(tmp_path / "trace.parquet"),
         "--policy", policy, "--max-num-seqs", "8", "--rate", "15", "--workload", "test",
         "--out-results", str(out / "r.parquet"), "--out-summary", str(out / "s.json")],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "s.json").read_text())
    assert summary["backend"] == "vllm" and summary["completed"] == n == summary["arrived"]
    assert 0 < summary["p50_ttft_ms"] <= summary["p50_e2el_ms"]
    res = pd.read_parquet(out / "r.parquet")
    assert (res["arrival_s"] <= res["first_scheduled_s"] + 1e-9).all()
    # Requests are submitted at their arrival offsets, so none is scheduled early.
    assert (res["first_scheduled_s"] >= res["arrival_s"] - 0.01).all()


def test_vllm_predictor_profile_times_each_grid_point_as_one_prefill_then_decodes(tmp_path):
    """Paper D's ``vllm`` predictor source: every (batch, length) point is prefilled in one
    engine step and then decoded together, and the OLS fit takes the table."""
    from schedlab.fit.latency_predictor import fit_predictor
    from schedlab.latency.predictor_profile import PREDICTOR_PROFILE_COLUMNS

    out = tmp_path / "vllm.parquet"
    proc = subprocess.run(
        [sys.executable, "-m", "schedlab.cli", "slosa", "profile", "--source", "vllm", "--model", "tiny-llama",
         "--repeats", "1", "--out", str(out)],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    prof = pd.read_parquet(out)
    assert tuple(prof.columns) == PREDICTOR_PROFILE_COLUMNS and set(prof["source"]) == {"vllm"}
    assert (prof["time_s"] > 0).all()
    prefill, decode = prof[prof["phase"] == "prefill"], prof[prof["phase"] == "decode"]
    points = {(b, n) for b in (1, 2, 4, 8) for n in (64, 128, 256, 512)}
    assert sorted(zip(prefill["batch"], prefill["length"])) == sorted(points)  # one step each
    per_point = decode.assign(base=decode["length"] - decode["length"] % 64).groupby(["batch", "base"]).size()
    assert set(per_point.index) == points and (per_point == 4).all()  # four decode steps each
    assert (decode["length"] % 64).between(1, 4).all()  # context: the prompt plus tokens so far
    fit = fit_predictor(prof)
    assert np.isfinite(fit.coefficients_ms()["ms"]).all()
