"""Paper C's schedulers on the engine: a full 35-minute run at 1.6 req/s (about 3,400 requests
and 1.4 M decode tokens, goal: under 1.5 s) per scheduler, on the calibrated Mistral-7B / RTX 6000 Ada
model and an openchat-shaped length pool (the mirror's when present).

Run with ``pytest benchmarks/bench_slai.py --benchmark-only``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from schedlab.data.openchat import LENGTHS_CSV, read_lengths_csv
from schedlab.data.sources import mirror_file
from schedlab.engine import Arena
from schedlab.latency.catalogue import hardware, model_arch
from schedlab.slai.model import calibrated_model, roofline_profile
from schedlab.simulate import serve
from schedlab.workload.openchat import openchat_trace


def length_pool() -> pd.DataFrame:
    path = mirror_file(LENGTHS_CSV)
    if path is not None:
        return read_lengths_csv(path, "mirror")
    rng = np.random.default_rng(0)  # openchat-shaped: prompt median ~1730, decode median ~415
    prompt = np.clip(rng.lognormal(7.45, 0.95, 30_000), 1, 7000).astype(int)
    return pd.DataFrame({"prompt_tokens": prompt, "output_tokens": np.clip(rng.normal(440, 200, 30_000), 1, 1024).astype(int)})


@pytest.fixture(scope="module")
def setup():
    hw, arch = hardware("RTX-6000-Ada"), model_arch("mistral-7b")
    model, _ = calibrated_model(roofline_profile(hw, arch))
    trace = openchat_trace(length_pool(), 1.6, 2100.0, 0.05, 0)
    return trace, Arena.build(model, "RTX-6000-Ada", "mistral-7b")


@pytest.mark.parametrize("scheduler", ["sarathi-fcfs", "slai-spf-dynamic", "prefill-priority", "rad", "request-level"])
def test_full_35_minute_run_at_1_6_rps(benchmark, setup, scheduler):
    trace, arena = setup
    assert 3000 < len(trace) < 3800 and trace["output_tokens"].sum() > 1.2e6
    res = benchmark.pedantic(serve, args=(trace, scheduler, arena), kwargs={"warmup_s": 120.0, "sample_s": 1.0},
                             rounds=2, iterations=1)
    assert res.requests["finish_s"].notna().all()
    best = benchmark.stats.stats.min
    benchmark.extra_info.update(requests=len(trace), decode_tokens=int(trace["output_tokens"].sum()), steps=res.steps)
    print(f"\n{scheduler}: {len(trace)} requests, {res.steps} steps in {best:.2f} s")
    assert best < 1.5
