"""transformers' continuous batching: its rules as schedlab's builder, held equal per request to
its own scheduler classes on a virtual clock; schedlab's policies inside its real engine on
the CPU; and the prepared GPU run, dry-run on the CPU with a tiny model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("transformers")

from schedlab import registry  # noqa: E402
from schedlab.backends.transformers.sim import run_transformers_sim  # noqa: E402
from schedlab.builders.transformers_batching import (  # noqa: E402
    ORDERS, ArrivalOrder, PolicyWaiting, TransformersBatching, release_of,
)
from schedlab.engine import Arena, EngineConfig, run  # noqa: E402
from schedlab.engine.steptime import StepTimeModel  # noqa: E402
from schedlab.errors import SchedlabError  # noqa: E402
from schedlab.policies.base import Job  # noqa: E402
from schedlab.simulate import serve  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
STEP = StepTimeModel(intercept=0.01, n_prefill_tokens=5e-5, n_decode=2e-4, ctx_tokens=1e-7, prefill_pairs=1e-9)
QUEUE_POLICIES = registry.names(registry.QUEUE)
#: The rules of the transformers release installed (`make test-compat` puts 5.17 first on the path).
INSTALLED = release_of(__import__("transformers").__version__)


def llm_trace(n: int = 80, seed: int = 0) -> pd.DataFrame:
    """``n`` requests over 4 s, prompts of 5-300 tokens (longer than a step's budget of 256)
    and outputs of 1-120, with the per-request targets slo-sa reads."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"request_id": 1000 + np.arange(n) * 7, "arrival_s": np.sort(rng.uniform(0, 4, n)),
                         "prompt_tokens": rng.integers(5, 300, n), "output_tokens": rng.integers(1, 120, n),
                         "slo_ttft_s": 1.0, "slo_tpot_s": 0.1, "slo_e2e_s": 10.0})


@pytest.mark.parametrize("capacity, max_num_seqs", [(100_000, 256), (60, 256), (60, 6)])
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("policy", [None, *QUEUE_POLICIES])
def test_sim_equals_transformers_own_scheduler_on_a_virtual_clock(policy, order, capacity, max_num_seqs):
    """Per request: first scheduling, first token, finish, the largest token gap and the soft
    resets; and the number of steps. Without a policy, transformers' FIFO or prefill-first
    class itself; with one, schedlab's scheduler class in its engine. A 60-block cache
    (960 tokens) makes transformers soft-reset requests."""
    trace = llm_trace()
    arena = Arena(STEP, EngineConfig(kv_capacity_blocks=capacity, max_num_seqs=max_num_seqs,
                                     max_num_batched_tokens=256, block_size=16))
    made = None if policy is None else registry.make(policy, registry.Context(trace, arena), registry.QUEUE)
    sim = run(trace, TransformersBatching(made, order, release=INSTALLED), arena)
    real = run_transformers_sim(trace, arena, policy=policy, order=order)
    for col in ("first_scheduled_s", "first_token_s", "finish_s", "max_gap_s"):
        np.testing.assert_allclose(real.requests[col], sim.requests[col], rtol=1e-9, atol=1e-9, err_msg=col)
    np.testing.assert_array_equal(real.requests["preemptions"], sim.requests["preemptions"])
    assert real.steps == sim.steps and real.requests["finish_s"].notna().all()
    if capacity < 1000:
        assert sim.requests["preemptions"].sum() > 0
        assert sim.peak_kv_blocks <= capacity and real.peak_kv_blocks <= capacity


def test_the_expected_transformers_release_is_the_one_imported():
    """`make test-compat` puts transformers 5.17 first on the path and says so
    (SCHEDLAB_EXPECT_TRANSFORMERS); the equality tests above ran on it only if this passes."""
    import os

    import transformers

    expected = os.environ.get("SCHEDLAB_EXPECT_TRANSFORMERS")
    if expected is None:
        pytest.skip("not a compatibility run (SCHEDLAB_EXPECT_TRANSFORMERS unset)")
    assert transformers.__version__ == expected and INSTALLED == release_of(expected)


def test_a_step_budget_splits_prompts_as_transformers_does():
    """Exact toy numbers: one step of 256 tokens; a 300-token prompt starts with 256 and ends
    with 44 beside the other's first chunk; steps cost 1 s, so the first token of request 0 is
    at 2 s."""
    trace = pd.DataFrame({"request_id": [0, 1], "arrival_s": [0.0, 0.0], "prompt_tokens": [300, 100],
                          "output_tokens": [2, 2]})
    arena = Arena(StepTimeModel(intercept=1.0), EngineConfig(kv_capacity_blocks=1000, max_num_batched_tokens=256))
    for result in (run(trace, TransformersBatching(), arena), run_transformers_sim(trace, arena)):
        req = result.requests
        assert req["first_scheduled_s"].tolist() == [0.0, 1.0]
        assert req["first_token_s"].tolist() == [2.0, 2.0] and req["finish_s"].tolist() == [3.0, 3.0]


def test_a_policy_keeps_its_order_when_a_pass_passes_requests_over():
    """The requests popped but not scheduled, and those never reached, go back in the policy's
    order (a first-in-first-out queue keeps its order)."""
    policy = ArrivalOrder()
    jobs = [Job(k, float(k), 1.0, 1, k) for k in range(5)]
    for j in jobs:
        policy.push(j)
    waiting = PolicyWaiting(policy)
    taken = []
    for job in waiting.candidates(0.0):
        taken.append(job.ref)
        if len(taken) == 3:
            break
    waiting.restore(0.0, lambda job: job.ref != 1)  # request 1 was scheduled
    assert [j.ref for j in policy] == [0, 2, 3, 4]
    untouched = PolicyWaiting(policy)
    untouched.candidates(0.0)  # never asked: nothing popped
    untouched.restore(0.0, lambda job: True)
    assert [j.ref for j in policy] == [0, 2, 3, 4]


def test_transformers_batching_on_the_command_paths_and_its_refusals():
    """``transformers-sim`` and ``sim`` with transformers' batching give one schedule; a batch
    builder has no other batching, vllm-sim runs vLLM's, and transformers' engine serves neither
    an encoder-decoder model nor a prefix cache."""
    trace = llm_trace(30, seed=1)
    arena = Arena(STEP, EngineConfig(kv_capacity_blocks=80, max_num_seqs=64, max_num_batched_tokens=128))
    for batching in ("transformers", "transformers-prefill-first"):
        a = serve(trace, "hrrn", arena, batching=batching)
        b = serve(trace, "hrrn", arena, backend="transformers-sim", batching=batching)
        np.testing.assert_allclose(a.requests["finish_s"], b.requests["finish_s"], rtol=1e-9, atol=1e-9)
    with pytest.raises(SchedlabError, match="batch builder"):
        serve(trace, "sarathi-fcfs", arena, batching="transformers")
    with pytest.raises(SchedlabError, match="vllm-sim runs vLLM's batching"):
        serve(trace, "fcfs", arena, backend="vllm-sim", model="mistral-7b", batching="transformers")
    with pytest.raises(SchedlabError, match="unknown batching"):
        serve(trace, "fcfs", arena, batching="sglang")
    with pytest.raises(SchedlabError, match="decoder models only"):
        run(trace, TransformersBatching(), Arena(STEP, EngineConfig(encoder_frames=1500, max_num_batched_tokens=2048)))


@pytest.mark.slow
def test_the_papers_policies_register_from_the_checkout_where_schedlab_is_not_installed():
    """With no entry points (PYTHONPATH=src on a GPU machine), the GPU run imports the modules
    pyproject.toml names, and paper B's EWSJF is there."""
    code = ("import importlib.metadata as m; m.entry_points = lambda **kw: []; "
            "from pathlib import Path; from schedlab import registry; "
            "from schedlab.backends.transformers.study import register_checkout_plugins; "
            f"added = register_checkout_plugins(Path({str(ROOT)!r})); "
            "assert 'ewsjf' in added and registry.entry('ewsjf').kind == 'queue', added; print(added)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


# -- the real engine on the CPU ----------------------------------------------------------------
def test_the_real_engine_refuses_a_policy_that_plans_with_a_step_time_model():
    """slo-sa plans with the engine's step-time model, which a real engine does not have: one
    clear error, before any model is made."""
    from schedlab.backends.transformers.engine import Engine, TransformersSpec

    with pytest.raises(SchedlabError, match="'slo-sa' needs the engine's step-time model"):
        Engine(TransformersSpec(model="no-such-model"), "slo-sa")



def _burst_then_stream() -> pd.DataFrame:
    """Four requests at once, then three arriving one by one."""
    return pd.DataFrame({"request_id": range(7), "arrival_s": [0, 0, 0, 0, 0.5, 0.6, 0.7],
                         "prompt_tokens": [40, 30, 50, 20, 10, 10, 10], "output_tokens": [12, 4, 8, 2, 3, 5, 2]})


@pytest.mark.slow
@pytest.mark.serving
@pytest.mark.parametrize("policy, admitted", [("fcfs", [0, 1, 2, 3]), ("sjf", [3, 1, 2, 0])])
def test_a_policy_orders_admissions_in_transformers_real_engine(policy, admitted):
    """One request a step (``max_num_seqs`` 1): a request runs alone until it finishes, so the
    burst is admitted in the policy's order (FCFS by arrival, SJF by output length); no request
    is lost, each gets its forced length, none is scheduled before it arrives; and the step log
    holds every token computed."""
    from schedlab.backends.transformers.engine import Engine, TransformersSpec

    trace = _burst_then_stream()
    spec = TransformersSpec(max_num_seqs=1, max_num_batched_tokens=64, kv_capacity_blocks=64, threads=1)
    result, raw = Engine(spec, policy).replay(trace)
    req = result.requests
    assert len(req) == len(trace) and req["finish_s"].notna().all() and (req["preemptions"] == 0).all()
    assert result.gaps.total == int((trace["output_tokens"] - 1).sum())
    assert (req["first_scheduled_s"] >= req["arrival_s"] - 1e-6).all()
    assert (req["first_scheduled_s"] <= req["first_token_s"]).all() and (req["first_token_s"] <= req["finish_s"]).all()
    burst = req[req["arrival_s"] == 0]
    # the premise, read off the engine: the burst waited together before the first admission
    assert raw["n_waiting"].iloc[0] == len(burst) - 1
    assert burst.sort_values("first_scheduled_s")["request_id"].tolist() == admitted
    # the steps: one request each, every prompt token prefilled once, every later token a decode
    assert (raw["n_scheduled"] == 1).all() and len(raw) == result.steps
    assert raw["n_prefill_tokens"].sum() == trace["prompt_tokens"].sum()
    assert raw["n_decode"].sum() == (trace["output_tokens"] - 1).sum()
    assert (raw["n_prefill_tokens"] <= 64).all() and (raw["t_update"] >= raw["t_schedule"]).all()
    assert raw["t_schedule"].is_monotonic_increasing and not raw["busy_after"].iloc[-1]


def test_the_study_refuses_a_policy_the_engine_cannot_run_before_any_run(tmp_path, capsys):
    """One line and exit 2, before a model is made or a file written."""
    from schedlab.backends.transformers.study import main

    out = tmp_path / "run"
    assert main(["--device", "cpu", "--out", str(out), "--held-out", "sjf", "slo-sa"]) == 2
    assert capsys.readouterr().err.strip() == ("error: queue policy 'slo-sa' needs the engine's step-time model and "
                                               "limits, which transformers' real engine does not give it")
    assert not out.exists()


# -- the prepared GPU run, dry-run on the CPU --------------------------------------------------
@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("transformers-run")
    done = subprocess.run(
        [sys.executable, "-m", "schedlab.backends.transformers.study", "--device", "cpu", "--model", "tiny-llama",
         "--dtype", "float32", "--requests", "16", "--prompt-median", "40", "--output-median", "12",
         "--max-num-batched-tokens", "128", "--kv-capacity-blocks", "256", "--threads", "1", "--out", str(out)],
        capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


@pytest.mark.slow
@pytest.mark.serving
def test_the_gpu_run_runs_on_the_cpu_with_a_tiny_model(dry_run):
    """The prepared GPU run's own command: a probe, FCFS at three loads, three held-out policies
    at two loads, the same trace for every policy at a load, and four files."""
    from schedlab.fit.engine_runs import read_runs, sim_against_engine

    assert sorted(p.name for p in dry_run.iterdir()) == sorted(
        ["traces.parquet", "requests.parquet", "steps.parquet", "provenance.json"])
    runs = read_runs(dry_run)
    prov = runs["provenance"]
    assert prov["engine"]["model"] == "tiny-llama" and prov["left_out"] == [] and prov["probe_throughput_rps"] > 0
    assert [(r["policy"], r["load"]) for r in prov["runs"]] == [
        ("fcfs", float("inf")), ("fcfs", 0.3), ("fcfs", 0.6), ("fcfs", 0.9),
        *[(p, load) for p in ("sjf", "ewsjf", "hrrn") for load in (0.45, 0.75)]]
    req, traces = runs["requests"], runs["traces"]
    assert len(req) == len(traces) == 10 * 16 and req["finish_s"].notna().all()
    for _, group in traces[traces["load"] == 0.45].groupby("policy"):
        pd.testing.assert_frame_equal(group[["arrival_s", "prompt_tokens", "output_tokens"]].reset_index(drop=True),
                                      traces[(traces["load"] == 0.45) & (traces["policy"] == "sjf")][
                                          ["arrival_s", "prompt_tokens", "output_tokens"]].reset_index(drop=True))
    steps = runs["steps"]
    assert (steps["time_s"] > 0).all() and set(steps["policy"]) == {"fcfs", "sjf", "ewsjf", "hrrn"}
    errors, ratios = sim_against_engine(runs)
    assert len(errors) == 6 and len(ratios) == 6 * 16 and np.isfinite(ratios["e2e_ratio"]).all()


@pytest.mark.slow
@pytest.mark.exclusive
def test_sim_fitted_on_fcfs_steps_follows_the_real_engine_on_held_out_policies(dry_run):
    """``sim`` with the step-time model fitted on the engine's FCFS steps, against the engine's
    held-out runs (SJF, EWSJF, HRRN at loads it was not fitted on): the median absolute error
    over P50/P90 TTFT and E2E and throughput stays within 35%; the per-request E2E ratios'
    spread is in the message."""
    from schedlab.fit.engine_runs import read_runs, reading, sim_against_engine, spread

    errors, ratios = sim_against_engine(read_runs(dry_run))
    err = errors[[c for c in errors if c.endswith("_err_pct")]].abs().to_numpy()
    assert np.median(err) < 35, reading(errors) + "\n" + spread(ratios).to_string()
    assert (errors["throughput_rps_err_pct"].abs() < 40).all(), errors.to_string()


# -- the pipeline's transformers option ------------------------------------------------------
def check_the_pipelines_transformers_study(results: Path, config: dict) -> None:
    """The tiny configuration runs with `transformers.enabled` (tests/test_pipeline.py calls this
    on its run): the study runs on the CPU (a probe, FCFS at the fit's loads, the held-out
    policies at theirs, the same trace for every policy at a load), and the calibration notebook
    renders sim against it, with its figure and its reading of the held-out runs."""
    from schedlab.fit.engine_runs import read_runs

    t = config["transformers"]
    assert t["enabled"]
    runs = read_runs(results / "runs" / "transformers" / "cpu")
    plan = [("fcfs", float("inf")), *[("fcfs", x) for x in t["fit_loads"]],
            *[(p, x) for p in t["held_out"] for x in t["held_out_loads"]]]
    assert [(r["policy"], r["load"]) for r in runs["provenance"]["runs"]] == plan
    assert all(0 <= r["foreign_cpu_share"] <= 1 for r in runs["provenance"]["runs"])
    assert len(runs["requests"]) == len(plan) * t["requests"] and runs["requests"]["finish_s"].notna().all()
    held = runs["traces"][runs["traces"]["policy"].isin(t["held_out"])]
    cols = ["arrival_s", "prompt_tokens", "output_tokens"]
    for _, at_load in held.groupby("load"):
        per_policy = [g[cols].reset_index(drop=True) for _, g in at_load.groupby("policy")]
        assert len(per_policy) == len(t["held_out"])
        for other in per_policy[1:]:
            pd.testing.assert_frame_equal(other, per_policy[0])
    nb = json.loads((results / "notebooks" / "calibration.ipynb").read_text())
    assert not [o for c in nb["cells"] for o in c.get("outputs", []) if o.get("output_type") == "error"]
    text = "".join("".join(o.get("text", "")) for c in nb["cells"] for o in c.get("outputs", []))
    n_held = len(t["held_out"]) * len(t["held_out_loads"])
    version = runs["provenance"]["versions"]["transformers"]
    assert f"cpu, transformers {version}: Over {n_held} held-out runs, sim's median absolute error of P50 and" in text
    assert (results / "figures" / "calibration" / "transformers_vs_sim_cpu.png").stat().st_size > 10_000
