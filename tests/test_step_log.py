"""The served engine's step log: what the scheduler writes and how a step's time is read."""

import numpy as np
import pytest

from schedlab.backends.steps.log import RAW_COLUMNS, StepLog
from schedlab.backends.steps.tables import read_step_log, step_table, steps_between
from schedlab.contracts import PROFILE_COLUMNS
from schedlab.errors import SchedlabError
from schedlab.validation.hints import server_options


def _log(path):
    """Two busy periods: steps at t = 100.00, .01, .03 (idle after), then 105.00, .02 (idle after)."""
    log = StepLog(path, flush_rows=2)
    comp = (0, 16, 0, 0, 136)
    log.record(100.00, 100.008, comp, 1, 1, 0, True)
    log.record(100.01, 100.018, (0, 0, 1, 17, 0), 1, 1, 0, True)
    assert len(read_step_log(path)) == 2  # a full buffer is written
    log.record(100.03, 100.037, (0, 0, 1, 18, 0), 1, 0, 0, False)  # the engine idles: written
    log.record(105.00, 105.005, (1, 4, 2, 40, 10), 3, 2, 1, True)
    log.record(105.02, 105.026, (0, 0, 2, 42, 0), 2, 0, 0, False)
    return log


def test_the_log_is_written_when_the_engine_idles_or_the_buffer_fills(tmp_path):
    log = StepLog(tmp_path / "s.csv", flush_rows=100)
    log.record(1.0, 1.5, (0, 1, 0, 0, 1), 1, 1, 0, True)
    assert read_step_log(tmp_path / "s.csv").empty  # buffered
    log.record(2.0, 2.5, (0, 0, 1, 1, 0), 1, 0, 0, False)
    raw = read_step_log(tmp_path / "s.csv")
    assert list(raw.columns) == list(RAW_COLUMNS) and len(raw) == 2 and not log.rows
    with open(tmp_path / "s.csv", "a") as f:
        f.write("3.0,3.5,0")  # a row being written is not read
    assert len(read_step_log(tmp_path / "s.csv")) == 2


def test_a_scheduler_started_again_on_the_same_log_goes_on_after_its_rows(tmp_path):
    from schedlab.backends.steps.tables import read_request_log

    first = StepLog(tmp_path / "s.steps.csv", flush_rows=100)
    first.record(1.0, 1.5, (0, 1, 0, 0, 1), 1, 1, 0, True)
    first.request("r0", 0.9, 1.0, 2.5)
    first.record(2.0, 2.5, (0, 0, 1, 1, 0), 1, 0, 0, False)
    second = StepLog(tmp_path / "s.steps.csv", flush_rows=100)  # a restarted server
    second.request("r1", 9.9, 10.0, 11.5)
    second.record(10.0, 11.5, (0, 1, 0, 0, 1), 1, 0, 0, False)
    assert read_step_log(tmp_path / "s.steps.csv")["t_schedule"].tolist() == [1.0, 2.0, 10.0]
    assert read_request_log(tmp_path / "s.requests.csv")["request_id"].tolist() == ["r0", "r1"]


def test_a_steps_time_runs_to_the_next_schedule_while_busy_and_never_spans_idle_time(tmp_path):
    _log(tmp_path / "s.csv")
    table = step_table(read_step_log(tmp_path / "s.csv"), hardware="cpu", model="tiny-llama")
    assert tuple(table.columns[: len(PROFILE_COLUMNS)]) == PROFILE_COLUMNS
    np.testing.assert_allclose(table["time_s"], [0.01, 0.02, 0.007, 0.02, 0.006], atol=1e-9)
    assert table["busy_after"].tolist() == [True, True, False, True, False]
    assert table[["n_encoder", "n_prefill_tokens", "n_decode", "ctx_tokens"]].iloc[3].tolist() == [1, 4, 2, 40]
    second = steps_between(table, 104.0, 106.0)
    assert len(second) == 2 and second["t_s"].tolist() == pytest.approx([1.0, 1.02])


def test_the_server_option_names_a_path():
    assert server_options({"schedlab": {"step_log": "/tmp/steps.csv"}}).step_log == "/tmp/steps.csv"
    assert server_options({"schedlab": {}}).step_log is None
    with pytest.raises(SchedlabError, match="step_log"):
        server_options({"schedlab": {"step_log": 3}})


def test_the_share_of_time_outside_the_engine_follows_littles_law():
    """Two requests of 2 s each over a 3 s span: 4/3 in the system at the client. The scheduler
    held one of them for 2 s (2/3 in it): half the requests' time was spent in front of it."""
    import pandas as pd

    from schedlab.backends.served.quality import outside_engine_share

    requests = pd.DataFrame({"arrival_s": [0.0, 1.0], "finish_s": [2.0, 3.0]})
    steps = pd.DataFrame({"n_running": [1, 1, 0], "n_waiting": [0, 0, 1], "time_s": [0.5, 1.0, 0.5]})
    assert outside_engine_share(requests, steps) == pytest.approx(0.5)
    busy = steps.assign(n_running=[2, 2, 2], n_waiting=[0, 0, 0], time_s=[1.0, 1.0, 0.0])
    assert outside_engine_share(requests, busy) == 0.0  # never negative


def test_the_front_end_timing_splits_client_lag_from_the_servers_answer():
    """Three requests: the client sent the last one 2 s late; the server began answering the
    second one after 1.5 s (its HTTP and API front end held it)."""
    import pandas as pd

    from schedlab.backends.served.front_end import front_end_timing

    requests = pd.DataFrame({"arrival_s": [0.0, 1.0, 2.0], "sent_s": [0.001, 1.002, 4.0],
                             "response_s": [0.011, 2.502, 4.02]})
    assert front_end_timing(requests) == pytest.approx(
        {"send_lag_p50_ms": 2.0, "send_lag_max_ms": 2000.0, "response_p50_ms": 20.0, "response_max_ms": 1500.0})


def test_finished_requests_are_logged_beside_the_steps_and_joined_to_the_trace(tmp_path):
    """The scheduler's request rows go to `<x>.requests.csv`, written before the steps when the
    engine idles; each is found again by the client's X-Request-Id inside vLLM's request id."""
    import pandas as pd

    from schedlab.backends.served.front_end import front_end_timing
    from schedlab.backends.steps.tables import read_request_log, request_timeline
    from schedlab.backends.steps.log import request_log_path

    log = StepLog(tmp_path / "server.steps.csv")
    assert log.requests_path == request_log_path(tmp_path / "server.steps.csv") == tmp_path / "server.requests.csv"
    log.request("cmpl-ab12-1-0-1f2e3d4c", 100.10, 100.12, 100.50)
    log.request("transcription-ab12-0-9a8b7c6d", 100.02, 100.03, 100.40)
    log.request("cmpl-zz99-0-0-00000000", 90.0, 90.1, 90.2)  # another replay's
    assert read_request_log(log.requests_path).empty  # buffered until the steps are written
    log.record(100.0, 100.01, (0, 4, 0, 0, 10), 1, 1, 0, False)
    rows = read_request_log(log.requests_path)
    assert rows["request_id"].tolist()[:2] == ["cmpl-ab12-1-0-1f2e3d4c", "transcription-ab12-0-9a8b7c6d"]
    requests = pd.DataFrame({"arrival_s": [0.0, 0.05, 0.3], "sent_s": [0.001, 0.051, 0.301],
                             "response_s": [0.01, 0.06, 0.31], "finish_s": [0.45, 0.56, 0.9]})
    joined = request_timeline(requests, rows, "ab12", wall_t0=100.0)
    np.testing.assert_allclose(joined["admitted_s"], [0.02, 0.10, np.nan])
    np.testing.assert_allclose(joined["first_scheduled_s"], [0.03, 0.12, np.nan])
    np.testing.assert_allclose(joined["engine_finish_s"], [0.40, 0.50, np.nan])  # request 2 never reached it
    timing = front_end_timing(joined)
    assert timing["front_in_p50_ms"] == pytest.approx(35.0) and timing["front_in_max_ms"] == pytest.approx(50.0)
    assert timing["way_out_mean_ms"] == pytest.approx(55.0)


def test_the_way_to_the_engine_core_leaves_out_the_wait_for_the_step_in_progress():
    """Two steps, 0-20 ms and 22-40 ms after the client's zero (the core adds requests between
    them). A request that arrived at 5 ms and reached the scheduler at 21 ms reached the core
    somewhere in 5-21 ms, mid-step: a way of 0-16 ms. One that arrived at 50 ms, with the engine
    idle, reached it at 52 ms: 2 ms. One that arrived 10 ms before the first step and missed it
    reached the core after that step began: 10-31 ms. One added before any step of the replay
    (the replay's first, once its predecessor left the engine idle): all of its way counts."""
    import pandas as pd

    from schedlab.backends.served.front_end import front_end_timing, way_to_core

    steps = pd.DataFrame({"t_schedule": [100.022, 100.00], "t_update": [100.04, 100.02]})  # in any order
    requests = pd.DataFrame({"arrival_s": [0.005, 0.050, -0.010, -0.030, 0.060],
                             "admitted_s": [0.021, 0.052, 0.021, -0.020, np.nan]})
    lower, upper = way_to_core(requests, steps, wall_t0=100.0)
    np.testing.assert_allclose(lower, [0.0, 0.002, 0.010, 0.010, np.nan], atol=1e-12)
    np.testing.assert_allclose(upper, [0.016, 0.002, 0.031, 0.010, np.nan], atol=1e-12)
    timing = front_end_timing(requests, steps, wall_t0=100.0)
    # Exact at 2 and 10 ms; the intervals put 1/3 of the way at 2 ms and 2/3 at 10 ms.
    assert timing["to_core_p50_ms"] == pytest.approx(10.0)
    assert timing["front_in_p50_ms"] == pytest.approx(13.0)  # to the scheduler: the step's wait included


def test_the_interval_median_is_turnbulls():
    """Exact values alone: their median. Wide intervals that all hold one value: that value.
    Exact 2 and 10 with [0, 16] and [10, 31]: self-consistency gives 2 a third of the mass and
    10 two thirds (p2 = (1 + p2) / 4, p10 = (p10 + 2) / 4), so the median is 10."""
    from schedlab.backends.served.front_end import interval_median

    exact = np.array([3.0, 1.0, 2.0])
    assert interval_median(exact, exact) == 2.0
    assert interval_median(np.array([0.0, 4.0, 2.0, 1.0]), np.array([5.0, 9.0, 6.0, 4.0])) == 4.0
    assert interval_median(np.array([2.0, 0.0, 10.0, 10.0]), np.array([2.0, 16.0, 31.0, 10.0])) == 10.0
    assert np.isnan(interval_median(np.array([np.nan]), np.array([np.nan])))


def _self_consistent_median(lower, upper):
    """The estimate by its definition, self-consistency over every end point (dense, O(n^2)),
    and whether that median is a tie (the mass below it within 1e-6 of a half)."""
    support = np.unique(np.concatenate([lower, upper]))
    inside = (support >= lower[:, None]) & (support <= upper[:, None])
    p = np.full(len(support), 1.0 / len(support))
    for _ in range(5000):
        mass = inside * p
        nxt = (mass / mass.sum(axis=1, keepdims=True)).mean(axis=0)
        if np.abs(nxt - p).max() < 1e-12:
            break
        p = nxt
    below = np.cumsum(nxt)
    k = np.searchsorted(below, 0.5 - 1e-9)
    return support[k], abs(below[k] - 0.5) < 1e-6


@pytest.mark.slow
def test_the_interval_median_on_innermost_intervals_is_the_self_consistent_one():
    """Ties, exact values and nested intervals: the innermost-interval estimate is the median
    that self-consistency over every end point reaches (where that median is not a tie)."""
    from schedlab.backends.served.front_end import interval_median

    rng = np.random.default_rng(7)
    checked = 0
    for _ in range(300):
        n = int(rng.integers(1, 40))
        value = rng.exponential(5.0, n).round(int(rng.integers(0, 2)))
        exact = rng.random(n) < rng.random()
        lower = np.where(exact, value, np.maximum(0.0, value - rng.exponential(3.0, n)).round(1))
        upper = np.where(exact, value, (value + rng.exponential(3.0, n)).round(1))
        median, tie = _self_consistent_median(lower, upper)
        if not tie:
            assert interval_median(lower, upper) == median
            checked += 1
    assert checked > 250


def test_the_interval_median_recovers_a_known_median_from_many_intervals():
    """20,000 exponential values (median 10 ln 2), each seen only as the interval of two random
    inspection times that holds it: the estimate lands within 10% of the true median (the
    estimator converges as n^(-1/3)), where the intervals' midpoints are over 20% high."""
    from schedlab.backends.served.front_end import interval_median

    rng = np.random.default_rng(0)
    n = 20_000
    value = rng.exponential(10.0, n)
    first = rng.uniform(0.0, 20.0, n)
    second = first + rng.uniform(0.0, 20.0, n)
    lower = np.where(value < first, 0.0, np.where(value <= second, first, second))
    upper = np.where(value < first, first, np.where(value <= second, second, second + 200.0))
    truth = 10.0 * np.log(2.0)
    assert interval_median(lower, upper) == pytest.approx(truth, rel=0.1)
    assert np.median((lower + upper) / 2) > 1.2 * truth
