"""Whether a served replay measured the engine: the acceptance rules a replay must pass before
its steps and latencies are compared with the simulators (statement, threshold, check)."""

from __future__ import annotations

import pandas as pd


#: A served replay's front end lagged when its requests spent more than this share of their time
#: in the system outside the engine's scheduler (:func:`outside_engine_share`): the served
#: system's bottleneck was then its front end, which no step-time model holds.
FRONT_END_LAG = 0.25


def front_end_lagged(runs: pd.DataFrame, lag: float = FRONT_END_LAG) -> pd.Series:
    """Per row of ``runs`` (replay summaries or step tables), whether its front end lagged: its
    ``outside_engine_share`` above ``lag`` (False where it is not recorded)."""
    if "outside_engine_share" not in runs:
        return pd.Series(False, index=runs.index)
    return runs["outside_engine_share"] > lag


#: A served replay was interfered with when other processes kept more than this share of the
#: machine's cores busy while it ran (``foreign_cpu_share``).
INTERFERENCE = 0.10
#: The client fell behind the trace when it sent a request more than this long after the
#: request's arrival offset (``send_lag_max_ms``): the replay then did not offer the trace's
#: arrivals, and is run again. The client keeps the server's scheduling priority: a client
#: that preempts the engine's OpenMP threads slows the forward pass it is measuring.
CLIENT_LAG_MS = 100.0


def replay_flaws(runs: pd.DataFrame, interference: float = INTERFERENCE, lag: float = FRONT_END_LAG,
                 client_lag_ms: float = CLIENT_LAG_MS) -> pd.Series:
    """Why each served replay (a row of ``runs``: replay summaries or step tables) does not
    measure the engine, "" where it does: other processes kept more than ``interference`` of the
    cores busy ("interference"), its requests spent more than ``lag`` of their time outside the
    engine's scheduler ("front end lagged", :func:`front_end_lagged`), or the client sent a
    request more than ``client_lag_ms`` late ("client late"). A check left unrecorded passes."""
    why = pd.Series("", index=runs.index)
    if "send_lag_max_ms" in runs:
        why[runs["send_lag_max_ms"] > client_lag_ms] = "client late"
    why[front_end_lagged(runs, lag)] = "front end lagged"
    if "foreign_cpu_share" in runs:
        why[runs["foreign_cpu_share"] > interference] = "interference"
    return why


def outside_engine_share(requests: pd.DataFrame, steps: pd.DataFrame) -> float:
    """Share of the requests' time in the system (arrival at the client to the last token
    received) that they spent outside the engine's scheduler: in the client, the HTTP server,
    the API process and the output path. Little's law on one replay: the client's mean number
    in the system (the sum of end-to-end latencies over the replay's span) against the
    scheduler's (running plus waiting as each step starts, weighted by step time). A simulator models only the
    engine, so a large share means the served system's bottleneck is its front end."""
    span = float(requests["finish_s"].max() - requests["arrival_s"].min())
    client = float((requests["finish_s"] - requests["arrival_s"]).sum()) / span
    engine = float(((steps["n_running"] + steps["n_waiting"]) * steps["time_s"]).sum()) / span
    return max(0.0, 1.0 - engine / client) if client > 0 else float("nan")
