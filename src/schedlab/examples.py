"""Small worked examples the notebooks and tests share."""

from __future__ import annotations

import pandas as pd

from schedlab.estimate import job_sizes
from schedlab.policies import make_policy
from schedlab.sim.engine import EngineConfig, Simulator
from schedlab.sim.steptime import StepTimeModel


def toy_head_of_line(policies=("fcfs", "sjf", "hrrn")) -> pd.DataFrame:
    """Paper A's toy: clips of 8, 4 and 2 s arrive together (in that order) and are served one
    at a time, each costing 1 s of encoder plus 0.2 s per token at 5 tokens per second of
    audio, so a clip of d seconds takes 1 + d seconds. Returns each request's E2EL per policy.
    """
    durations = [8.0, 4.0, 2.0]
    kappa = 5.0
    trace = pd.DataFrame(
        {
            "request_id": [0, 1, 2],
            "arrival_s": [0.0, 0.0, 0.0],
            "prompt_tokens": [1, 1, 1],
            "output_tokens": [int(d * kappa) for d in durations],
            "audio_duration_s": durations,
            "language": "en",
        }
    )
    step = StepTimeModel(intercept=0.0, n_encoder=1.0, n_prefill_tokens=0.2, n_decode=0.2)
    engine = EngineConfig(max_num_seqs=1, encoder_frames=1)
    sizes = job_sizes(trace, {"en": kappa})
    rows = []
    for policy in policies:
        res = Simulator(trace, make_policy(policy), step, engine, sizes).run().requests
        for r in res.itertuples():
            rows.append((policy, r.request_id, r.audio_duration_s, r.finish_s - r.arrival_s))
    return pd.DataFrame(rows, columns=["policy", "request_id", "audio_duration_s", "e2el_s"])
