"""Paper C's schedulers on a real vLLM engine: ``vllm serve`` with the step-plan scheduler
class (:mod:`schedlab.backends.vllm.plan`), the sweep's two-class traces replayed over HTTP by
schedlab's client with each request's class and TBT target in ``vllm_xargs``, and the sweep's
tables (summaries and prompt-length buckets; a client sees no KV timeline)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from schedlab.backends.vllm.engine import LaunchSpec
from schedlab.slai.run import by_bucket, summary
from schedlab.slai.studies import Setup


def served_sweep(setup: Setup, spec: LaunchSpec, folder: str | Path, scheduler: str, share: float, rates, seeds,
                 server_log: str | Path) -> dict[str, pd.DataFrame]:
    """One server running ``scheduler``; every (rate, seed) trace of ``setup`` replayed on it."""
    from schedlab.backends.served.run import replay_served, warm_up
    from schedlab.backends.served.server import serve_command, server_env, start_server

    rows, buckets = [], []
    cmd = serve_command(folder, spec, builder=scheduler)
    with start_server(cmd, log=server_log, env=server_env(spec)) as server:
        warm_up(server, setup.trace(rates[0], share, seeds[0]), model=spec.model, whisper=False)
        for rate in rates:
            for seed in seeds:
                trace = setup.trace(rate, share, seed)
                run = replay_served(server, trace, model=spec.model, whisper=False, warmup_s=setup.warmup_s)
                res = run.result()
                keys = {"scheduler": scheduler, "share": share, "rate": rate, "seed": seed}
                row = summary(res, trace, policy=scheduler, backend="vllm", workload="openchat", **keys)
                row.update(peak_kv_frac=float("nan"), server_ready_s=server.ready_s, **run.figures())
                rows.append(row)
                buckets.append(by_bucket(res, setup.duration_s).assign(**keys))
    return {"summary": pd.DataFrame(rows), "buckets": pd.concat(buckets, ignore_index=True)}
