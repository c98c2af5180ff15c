"""``sim`` against transformers' real engine: a run folder of
:mod:`schedlab.backends.transformers.study` (its traces, per-request results and steps), the
step-time model fitted on the fitted policy's steps, and ``sim`` (transformers' batching rules,
:class:`~schedlab.builders.transformers_batching.TransformersBatching`) replaying every run of
the held-out policies and loads with it: the errors per policy and load (P50 and P90 TTFT and
E2E, throughput), and the per-request spread (``sim``'s E2E over the engine's).

Runs measured on a GPU are shipped under ``assets/transformers-runs/<hardware>/``
(:func:`shipped_runs`); the calibration notebook shows them where they are. The pipeline lists
them as it plans, so this module imports the fit and the engine only where it uses them.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from schedlab.errors import SchedlabError
from schedlab.latency.catalogue import ASSETS

RUNS = ASSETS / "transformers-runs"
METRICS = ("p50_ttft_ms", "p90_ttft_ms", "p50_e2el_ms", "p90_e2el_ms", "throughput_rps")


def shipped_runs() -> dict[str, Path]:
    """Hardware name -> folder of the GPU runs shipped with the package."""
    return {p.parent.name: p.parent for p in sorted(RUNS.glob("*/provenance.json"))}


def read_runs(folder: str | Path) -> dict:
    """A run folder's tables and provenance."""
    from schedlab.backends.transformers.study import FILES

    folder = Path(folder)
    missing = [f for f in FILES if not (folder / f).exists()]
    if missing:
        raise SchedlabError(f"{folder}: not a transformers run folder (missing {', '.join(missing)})")
    return {"traces": pd.read_parquet(folder / "traces.parquet"), "requests": pd.read_parquet(folder / "requests.parquet"),
            "steps": pd.read_parquet(folder / "steps.parquet"),
            "provenance": json.loads((folder / "provenance.json").read_text())}


def fitted_steps(runs: dict):
    """The step-time model fitted (with its knee) on the fitted policy's steps at its loads."""
    from schedlab.contracts import PROFILE_COLUMNS
    from schedlab.fit.steptime import best_knee, fit_steptime

    prov, steps = runs["provenance"], runs["steps"]
    fit = steps[(steps["policy"] == prov["fit_policy"]) & steps["load"].isin(prov["fit_loads"])]
    if fit.empty:
        raise SchedlabError("the run folder holds no steps of the fitted policy at its loads")
    profile = fit[list(PROFILE_COLUMNS)]
    return fit_steptime(profile, knee=best_knee(profile))


def sim_against_engine(runs: dict, step_time=None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """For every held-out run: the engine's and ``sim``'s summaries and ``sim``'s error (%) per
    metric (one row a run, columns ``<metric>_engine``, ``<metric>_sim``, ``<metric>_err_pct``,
    and the run's ``foreign_cpu_share`` where the study recorded it); and per request, ``sim``'s
    E2E over the engine's (``e2e_ratio``). ``sim`` runs the queue policy inside transformers'
    scheduler class of the engine's order, with the engine's limits, by the rules of the
    transformers release the engine ran."""
    from schedlab import registry
    from schedlab.builders.transformers_batching import TransformersBatching, release_of
    from schedlab.engine import Arena, EngineConfig, run
    from schedlab.engine.gaps import GapHistogram
    from schedlab.metrics import summarize

    prov = runs["provenance"]
    step_time = step_time or fitted_steps(runs)
    eng = prov["engine"]
    release = release_of(prov["versions"]["transformers"])  # sim schedules as the engine's release did
    limits = EngineConfig(max_num_seqs=eng["max_num_seqs"], max_num_batched_tokens=eng["max_num_batched_tokens"],
                          block_size=eng["block_size"], kv_capacity_blocks=eng["kv_capacity_blocks"])
    arena = Arena(step_time, limits)
    interference = {(r["policy"], r["load"]): r.get("foreign_cpu_share", np.nan) for r in prov["runs"]}
    rows, ratios = [], []
    held = runs["traces"][runs["traces"]["policy"].isin(prov["held_out"])]
    for (policy, load), trace in held.groupby(["policy", "load"], sort=False):
        trace = trace.drop(columns=["policy", "load", "rate"]).reset_index(drop=True)
        made = registry.make(policy, registry.Context(trace, arena), registry.QUEUE)
        batching = TransformersBatching(made, eng["order"], max_blocks_per_request=eng["max_blocks_per_request"],
                                        release=release)
        sim = run(trace, batching, arena).requests
        real = runs["requests"]
        real = real[(real["policy"] == policy) & (real["load"] == load)].reset_index(drop=True)
        s_sim, s_eng = summarize(sim, GapHistogram(1)), summarize(real, GapHistogram(1))  # no token gaps needed
        row = {"policy": policy, "load": load, "rate": float(real["rate"].iloc[0]),
               "foreign_cpu_share": interference.get((policy, load), np.nan)}
        for m in METRICS:
            row |= {f"{m}_engine": s_eng[m], f"{m}_sim": s_sim[m], f"{m}_err_pct": (s_sim[m] / s_eng[m] - 1) * 100}
        rows.append(row)
        e2e = {name: r.set_index("request_id").eval("finish_s - arrival_s") for name, r in (("sim", sim), ("real", real))}
        ratios.append(pd.DataFrame({"policy": policy, "load": load, "e2e_ratio": (e2e["sim"] / e2e["real"]).to_numpy()}))
    if not rows:
        raise SchedlabError("the run folder holds no run of a held-out policy")
    return pd.DataFrame(rows), pd.concat(ratios, ignore_index=True)


def spread(ratios: pd.DataFrame) -> pd.DataFrame:
    """The per-request E2E ratios' distribution per policy and load (P10, P50, P90)."""
    q = ratios.groupby(["policy", "load"])["e2e_ratio"].quantile([0.1, 0.5, 0.9]).unstack()
    return q.rename(columns=lambda p: f"p{int(round(p * 100))}").reset_index()


def reading(errors: pd.DataFrame) -> str:
    """Sentences about ``sim``'s errors, computed from them: the median absolute error of P50
    and P90 E2E over the held-out runs (the figure serving simulators publish), of all the
    metrics, the run where P50 E2E is off most, and the interference the runs met."""
    from schedlab.backends.served.quality import INTERFERENCE

    e = errors.set_index(["policy", "load"])
    absolute = lambda metrics: float(np.median(np.abs(e[[f"{m}_err_pct" for m in metrics]].to_numpy())))  # noqa: E731
    worst = e["p50_e2el_ms_err_pct"].abs().idxmax()
    share, busy = e["foreign_cpu_share"].dropna(), ""
    if len(share):
        over = int((share > INTERFERENCE).sum())
        busy = (f" Other processes kept up to {share.max():.0%} of the machine's cores busy during these runs"
                + (f"; {over} of them above the {INTERFERENCE:.0%} past which a served vLLM replay is left out as "
                   "interfered (none is left out here)." if over else "."))
    return (f"Over {len(e)} held-out runs, sim's median absolute error of P50 and P90 E2E is "
            f"{absolute(('p50_e2el_ms', 'p90_e2el_ms')):.1f}% ({absolute(METRICS):.1f}% across P50 and P90 TTFT and "
            f"E2E and throughput); P50 E2E is off most under {worst[0]} at load {worst[1]:g} "
            f"({e.loc[worst, 'p50_e2el_ms_err_pct']:+.1f}%).{busy}")
