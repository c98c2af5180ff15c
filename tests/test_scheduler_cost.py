"""vLLM's scheduler's own CPU cost per step (schedlab.fit.scheduler_cost): the fit's exact
numbers on a toy table, the term's arithmetic on a step-time model, and a real measurement
inside vLLM's scheduler on a virtual clock that leaves the run's results as they were."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from schedlab.engine.steptime import StepTimeModel
from schedlab.errors import SchedlabError
from schedlab.fit.scheduler_cost import COLUMNS, fit_scheduler_cost


def _table(rows):
    table = pd.DataFrame(rows, columns=["n_scheduled", "schedule_ms", "update_ms"]).assign(n_decode=0, n_prefill_tokens=0)
    return table.assign(total_ms=table["schedule_ms"] + table["update_ms"])[list(COLUMNS)]


def test_the_fit_is_ols_of_the_cost_on_the_requests_scheduled():
    """0.2 ms per step and 0.01 ms per request, +-0.01 ms at each size: exactly that line."""
    table = _table([(n, 0.1 + 0.005 * n + e, 0.1 + 0.005 * n) for n in (1, 16, 64, 256) for e in (-0.01, 0.01)])
    fit = fit_scheduler_cost(table)
    assert fit["fixed_ms"] == pytest.approx(0.2) and fit["per_request_ms"] == pytest.approx(0.01)
    assert fit["ci95"]["per_request_ms"][0] < 0.01 < fit["ci95"]["per_request_ms"][1]
    assert fit["steps"] == 8 and fit["largest_batch"] == 256
    with pytest.raises(SchedlabError, match="two batch sizes"):
        fit_scheduler_cost(_table([(4, 0.1, 0.1)] * 5))


def test_the_term_adds_its_costs_to_every_step_and_each_decode():
    model = StepTimeModel(intercept=0.01, n_decode=0.001, n_prefill_tokens=1e-5)
    on = model.with_host_cost(0.0002, 0.00001)
    assert on(0, 100, 32, 0) - model(0, 100, 32, 0) == pytest.approx(0.0002 + 32 * 0.00001)
    assert on.n_prefill_tokens == model.n_prefill_tokens and on.frontend_s == model.frontend_s


@pytest.mark.slow
def test_measuring_the_scheduler_in_vllm_sim_logs_every_step_and_changes_no_result():
    """One row per step of the run, every step's CPU time measured, and the requests' times
    identical to the same run without the measurement."""
    from schedlab.backends.vllm_sim.run import run_vllm_sim
    from schedlab.engine import Arena, EngineConfig
    from schedlab.fit.scheduler_cost import measure_scheduler_cost

    rng = np.random.default_rng(3)
    trace = pd.DataFrame({"request_id": np.arange(60), "arrival_s": np.sort(rng.uniform(0, 1, 60)),
                          "prompt_tokens": rng.integers(20, 400, 60), "output_tokens": rng.integers(2, 40, 60)})
    arena = Arena(StepTimeModel(intercept=0.01, n_prefill_tokens=2e-5, n_decode=3e-4),
                  EngineConfig(max_num_seqs=16, max_num_batched_tokens=512, kv_capacity_blocks=4096), {})
    table = measure_scheduler_cost(trace, "fcfs", arena, model="tiny-llama")
    plain = run_vllm_sim(trace, "fcfs", arena, model="tiny-llama")
    assert len(table) == plain.steps and table["n_scheduled"].between(1, 16).all()
    assert (table[["schedule_ms", "update_ms"]] >= 0).all().all() and table["total_ms"].sum() > 0
    costs: list = []
    measured = run_vllm_sim(trace, "fcfs", arena, model="tiny-llama", host_costs=costs)
    pd.testing.assert_frame_equal(measured.requests, plain.requests)
    assert table["n_decode"].sum() == sum(c[1] for c in costs)
