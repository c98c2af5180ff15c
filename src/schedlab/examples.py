"""Small worked examples the notebooks and tests share."""

from __future__ import annotations

import pandas as pd

from schedlab.engine import Arena, EngineConfig, run
from schedlab.engine.steptime import StepTimeModel
from schedlab.simulate import scheduler_for


#: Paper A's toy: 5 tokens per second of audio, 1 s of encoder and 0.2 s per token.
TOY_KAPPA = 5.0
TOY_STEP = StepTimeModel(intercept=0.0, n_encoder=1.0, n_prefill_tokens=0.2, n_decode=0.2)


def toy_trace() -> pd.DataFrame:
    """Clips of 8, 4 and 2 s arriving together, in that order (one-token prompts)."""
    durations = [8.0, 4.0, 2.0]
    return pd.DataFrame(
        {
            "request_id": [0, 1, 2],
            "arrival_s": [0.0, 0.0, 0.0],
            "prompt_tokens": [1, 1, 1],
            "output_tokens": [int(d * TOY_KAPPA) for d in durations],
            "audio_duration_s": durations,
            "language": "en",
        }
    )


def toy_head_of_line(policies=("fcfs", "sjf", "hrrn")) -> pd.DataFrame:
    """Paper A's toy served one at a time: a clip of d seconds takes 1 + d seconds.
    Returns each request's E2EL per policy."""
    trace = toy_trace()
    arena = Arena(TOY_STEP, EngineConfig(max_num_seqs=1, encoder_frames=1), {"en": TOY_KAPPA})
    rows = []
    for policy in policies:
        res = run(trace, scheduler_for(policy), arena).requests
        for r in res.itertuples():
            rows.append((policy, r.request_id, r.audio_duration_s, r.finish_s - r.arrival_s))
    return pd.DataFrame(rows, columns=["policy", "request_id", "audio_duration_s", "e2el_s"])
