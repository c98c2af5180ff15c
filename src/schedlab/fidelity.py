"""The simulators against each other and against a real engine: relative errors per run, the
engine's clean runs and their repeat spread, and the sentences the calibration notebook reads
off them."""

from __future__ import annotations

import numpy as np
import pandas as pd

from schedlab.backends.served.quality import FRONT_END_LAG, INTERFERENCE, replay_flaws
from schedlab.report import METRIC_WORDS


FIDELITY_METRICS = ["p50_ttft_ms", "p90_ttft_ms", "p50_e2el_ms", "p90_e2el_ms", "throughput_rps"]


def fidelity_errors(summary: pd.DataFrame, reference: str, candidate: str) -> pd.DataFrame:
    """Relative error (%) of ``candidate`` against ``reference`` for every run both made
    (same workload, model, policy, rate and seed), one column per metric."""
    keys = ["workload", "model", "policy", "rate", "seed"]
    ref = summary[summary["backend"] == reference].set_index(keys)[FIDELITY_METRICS]
    cand = summary[summary["backend"] == candidate].set_index(keys)[FIDELITY_METRICS]
    both = ref.index.intersection(cand.index)
    err = (cand.loc[both] / ref.loc[both] - 1) * 100
    return err.sort_index().assign(reference=reference, candidate=candidate)


def speed_ratio(summary: pd.DataFrame, fast: str = "sim", slow: str = "vllm-sim") -> pd.Series:
    """Wall time of ``slow`` over ``fast`` on the same runs."""
    keys = ["workload", "model", "policy", "rate", "seed"]
    wall = summary.pivot_table(index=keys, columns="backend", values="wall_s")
    return (wall[slow] / wall[fast]).dropna().rename(f"{slow} / {fast} wall time")


# -- the simulators against a real engine ----------------------------------------------------
#: The step-time fits the simulators run beside a served engine (``steptime_fit`` in their
#: summaries): a separate profile of the device, and the engine's own steps at the other rates.
STEP_FITS = ("profile", "own steps, rate held out")


RUN_KEYS = ["workload", "model", "policy", "rate", "seed"]


READING_METRICS = ["p50_e2el_ms", "p90_e2el_ms", "throughput_rps"]


def engine_view(summary: pd.DataFrame, threshold: float = INTERFERENCE):
    """Clean engine runs' medians over repeats (one row per run key, like the simulators'), the
    min / median / max of every repeat, the runs left out of the medians
    (:func:`~schedlab.backends.served.quality.replay_flaws`, its reason in column ``left_out``), and
    the clean runs themselves (one row per repeat)."""
    eng = summary[summary["backend"] == "vllm"]
    why = replay_flaws(eng, threshold)
    bad = eng[why != ""].assign(left_out=why[why != ""])
    clean = eng[why == ""]
    med = clean.groupby(RUN_KEYS, as_index=False)[FIDELITY_METRICS].median().assign(backend="vllm")
    spread = eng.groupby(RUN_KEYS)[FIDELITY_METRICS].agg(["min", "median", "max"])
    return pd.concat([summary[summary["backend"] != "vllm"], med], ignore_index=True), spread, bad, clean


def fit_errors(view: pd.DataFrame) -> pd.DataFrame:
    """Errors (%) of sim and vllm-sim against the engine (:func:`engine_view`'s medians), one
    block per step-time fit (column ``fit``)."""
    fits = view["steptime_fit"] if "steptime_fit" in view else pd.Series(np.nan, index=view.index)
    parts = [
        fidelity_errors(view[(view["backend"] == "vllm") | (fits == fit)], "vllm", c).assign(fit=fit)
        for fit in STEP_FITS
        for c in ("sim", "vllm-sim")
    ]
    out = pd.concat(parts)
    return out if len(out) else out.assign(fit=pd.Series(dtype=str))


def interference_note(engine_runs: pd.DataFrame, label: str, threshold: float = INTERFERENCE) -> str:
    """Whether other processes shared the machine with the engine, from its runs' summaries."""
    share = engine_runs["foreign_cpu_share"]
    bad = engine_runs[share > threshold]
    if bad.empty:
        return (f"{label}: no interference (other processes kept at most {share.max():.1%} of the cores busy, "
                f"the limit being {threshold:.0%}).")
    verdict = ("every engine run was interfered, so this run's comparison is not a result" if len(bad) == len(share)
               else "they are left out of the comparison")
    return (f"{label}: {len(bad)} of {len(share)} engine runs ran beside other CPU-heavy processes (up to "
            f"{share.max():.0%} of the cores busy, limit {threshold:.0%}): {verdict}.")


def replayed_note(engine_runs: pd.DataFrame, label: str) -> str:
    """How many replays were run again because an attempt did not measure the engine
    (:func:`~schedlab.backends.served.quality.replay_flaws`, or a lost connection), why, and where,
    from the kept replays' ``attempts`` and ``replayed_for``."""
    if "attempts" not in engine_runs:
        return f"{label}: the runs do not record their attempts."
    again = engine_runs[engine_runs["attempts"] > 1]
    if again.empty:
        return f"{label}: every replay measured the engine at its first attempt."
    recorded = again["replayed_for"].fillna("") if "replayed_for" in again else pd.Series("", index=again.index)
    reasons = pd.Series([r for s in recorded for r in s.split("; ") if r], dtype=str).value_counts()
    why = ", ".join(f"{n} {reason}" for reason, n in reasons.items()) or "reasons not recorded"
    where = ", ".join(f"{p} at {r:g} req/s" for p, r in again.groupby(["policy", "rate"]).size().index)
    return (f"{label}: {len(again)} of {len(engine_runs)} replays were run again ({where}); the "
            f"{int((again['attempts'] - 1).sum())} attempts set aside: {why}.")


def front_end_note(engine_runs: pd.DataFrame, label: str, threshold: float = FRONT_END_LAG) -> str:
    """Where the served system's front end (client, HTTP and API server, output path), not the
    engine's scheduler, held the requests, from the runs' ``outside_engine_share``."""
    if "outside_engine_share" not in engine_runs or engine_runs["outside_engine_share"].isna().all():
        return f"{label}: the runs do not record the time their requests spent outside the engine."
    share = engine_runs["outside_engine_share"]
    worst = engine_runs.loc[share.idxmax()]
    head = (f"{label}: the replays' requests spent {share.min():.0%} to {share.max():.0%} of their time in the "
            f"system outside vLLM's scheduler (median {share.median():.0%}; most at {worst['rate']:g} req/s under "
            f"{worst['policy']})")
    lagged = engine_runs[share > threshold]
    if lagged.empty:
        return head + f"; at most {threshold:.0%} everywhere, so the engine's steps set the latencies."
    where = ", ".join(f"{p} at {r:g} req/s" for p, r in lagged.groupby(["policy", "rate"]).size().index)
    note = (head + f". In {len(lagged)} of {len(share)} replays ({where}) it was above {threshold:.0%}: there the "
            "served system's bottleneck was its front end, which no step-time model holds, so they are left out "
            "of the comparison and of the held-out fits' front-end time (listed below).")
    if {"send_lag_max_ms", "response_max_ms"} <= set(lagged) and lagged["send_lag_max_ms"].notna().any():
        note += (f" In those replays the client sent each request at most {lagged['send_lag_max_ms'].max():.0f} ms "
                 f"after its arrival, and the server began its answer at most {lagged['response_max_ms'].max():.0f} ms "
                 f"after it was sent (median {lagged['response_p50_ms'].median():.0f} ms; "
                 f"{engine_runs.loc[share <= threshold, 'response_p50_ms'].median():.0f} ms in the other replays); "
                 "vLLM answers a streamed request before it hands it to the engine.")
    if {"front_in_max_ms", "way_out_max_ms"} <= set(lagged) and lagged["front_in_max_ms"].notna().any():
        clean = engine_runs[share <= threshold]
        note += (f" Their requests' way in to the scheduler took up to {lagged['front_in_max_ms'].max():.0f} ms (median "
                 f"{lagged['front_in_p50_ms'].median():.0f} ms; {clean['front_in_p50_ms'].median():.0f} ms in the other "
                 f"replays), their way out from its last token up to {lagged['way_out_max_ms'].max():.0f} ms (median "
                 f"{lagged['way_out_p50_ms'].median():.0f} ms; {clean['way_out_p50_ms'].median():.0f} ms).")
    return note


def fidelity_reading(errs: pd.DataFrame, saturation: float, label: str, candidate: str = "sim",
                     repeats: pd.DataFrame | None = None) -> str:
    """Sentences about ``candidate``'s errors against the engine (one fit's rows of
    :func:`fit_errors`), computed from them: the largest errors below 80% of the engine's
    highest throughput and at every rate, where P50 E2EL is off most and which way. With
    ``repeats`` (the engine's clean runs, one row per repeat), a miss of the target below 80% is
    set beside the span of the engine's own repeats at that run and metric."""
    e = errs[errs["candidate"] == candidate].reset_index()
    if e.empty:
        return f"{label}: no clean engine run to compare with."
    below = e[e["rate"] <= 0.8 * saturation]
    out = [f"{label}: the engine's highest measured throughput is {saturation:.2f} req/s."]
    for name, part in (("up to 80% of it", below), ("at every rate", e)):
        if part.empty:
            out.append("No swept rate is below 80% of it.")
            continue
        worst = part[READING_METRICS].abs().max()
        where = part.loc[part["p50_e2el_ms"].abs().idxmax()]
        sign = "slower" if where["p50_e2el_ms"] > 0 else "faster"
        verdict = "within" if worst.max() <= 10 else "outside"
        out.append(
            f"{name[0].upper() + name[1:]}, {candidate}'s largest |error| is {worst['p50_e2el_ms']:.1f}% on P50 E2EL, "
            f"{worst['p90_e2el_ms']:.1f}% on P90 E2EL and {worst['throughput_rps']:.1f}% on throughput "
            f"({verdict} the 10% target); P50 E2EL is off most at {where['rate']:g} req/s under "
            f"{where['policy']}, where {candidate} is {sign} than the engine."
        )
    out.append(f"{candidate}'s P50 E2EL is above the engine's in {(e['p50_e2el_ms'] > 0).mean():.0%} of the compared runs.")
    if repeats is not None and len(below) and below[READING_METRICS].abs().max().max() > 10:
        out.append(repeat_span(below, repeats))
    return " ".join(out)


def repeat_span(errs: pd.DataFrame, repeats: pd.DataFrame) -> str:
    """One sentence: the largest |error| in ``errs`` (rows of :func:`fit_errors`) and how far
    apart the engine's own ``repeats`` of that run lie on that metric (max - min, % of median)."""
    cells = errs.melt(id_vars=RUN_KEYS, value_vars=READING_METRICS, var_name="metric", value_name="error")
    worst = cells.loc[cells["error"].abs().idxmax()]
    same = np.logical_and.reduce([repeats[k] == worst[k] for k in RUN_KEYS])
    values = repeats.loc[same, worst["metric"]]
    span = (values.max() - values.min()) / values.median() * 100
    return (f"The largest miss, {worst['error']:+.1f}% on {METRIC_WORDS[worst['metric']]} at {worst['rate']:g} req/s "
            f"under {worst['policy']}, sits beside the engine's own {len(values)} clean repeats there, which span "
            f"{span:.0f}% of their median ({values.min():.4g} to {values.max():.4g}).")


def fit_comparison(errs: pd.DataFrame, label: str, candidate: str = "sim") -> str:
    """One sentence: the median |error| of ``candidate`` with each fit, and which is closer."""
    e = errs[errs["candidate"] == candidate]
    med = e.groupby("fit")[READING_METRICS].apply(lambda d: d.abs().median())
    if not set(STEP_FITS) <= set(med.index):
        return f"{label}: the two fits cannot be compared (no clean engine run beside one of them)."
    prof, own = med.loc[STEP_FITS[0]], med.loc[STEP_FITS[1]]
    closer = "closer to" if own["p50_e2el_ms"] < prof["p50_e2el_ms"] else "no closer to"
    return (f"{label}: with the engine's own steps (each rate simulated with a fit of the other rates' steps) "
            f"{candidate}'s median |error| is {own['p50_e2el_ms']:.1f}% on P50 E2EL, {own['p90_e2el_ms']:.1f}% on "
            f"P90 E2EL and {own['throughput_rps']:.1f}% on throughput, against {prof['p50_e2el_ms']:.1f}%, "
            f"{prof['p90_e2el_ms']:.1f}% and {prof['throughput_rps']:.1f}% with the profile's fit: {closer} the "
            f"engine on the median.")


def fidelity_table(summary: pd.DataFrame, candidate: str = "sim") -> pd.DataFrame:
    """The results page's fidelity table: one row per (policy, rate, fit) of a served study's
    ``summary`` (engine and simulators), with ``candidate``'s error (%) on each of
    :data:`READING_METRICS` against the median of the engine's clean repeats, beside that median,
    the clean repeats' min and max, their number (``repeats``), and whether the rate is at most
    80% of the engine's highest measured throughput (``below_80``: where the 10% target applies)."""
    view, _, _, clean = engine_view(summary)
    errs = fit_errors(view)
    errs = errs[errs["candidate"] == candidate].reset_index()
    if errs.empty:
        return pd.DataFrame()
    saturation = view.loc[view["backend"] == "vllm", "throughput_rps"].max()
    reps = clean.groupby(RUN_KEYS)[READING_METRICS].agg(["min", "median", "max", "count"])
    rows = []
    for e in errs.itertuples(index=False):
        r = reps.loc[tuple(getattr(e, k) for k in RUN_KEYS)]
        row = {"policy": e.policy, "rate": float(e.rate), "fit": e.fit, "below_80": bool(e.rate <= 0.8 * saturation),
               "repeats": int(r[(READING_METRICS[0], "count")])}
        for m in READING_METRICS:
            row |= {f"{m}_engine": r[(m, "median")], f"{m}_min": r[(m, "min")], f"{m}_max": r[(m, "max")],
                    f"{m}_error_pct": getattr(e, m)}
        rows.append(row)
    return pd.DataFrame(rows).sort_values(["fit", "policy", "rate"], ignore_index=True)


# -- where a simulator's latency differs from the engine's --------------------------------------
#: The parts of a request's end-to-end latency both sides measure, in order.
LATENCY_PARTS = ("to first scheduled", "service", "way out")


def latency_parts(requests: pd.DataFrame, frontend_s: float = 0.0, output_s: float = 0.0) -> pd.DataFrame:
    """Each request's end-to-end latency in three parts (seconds): arrival to its first
    scheduling (the way in and the wait for the scheduler), its service (first scheduled to the
    last token leaving the engine) and the way out to the client. A served replay's table
    carries ``engine_finish_s`` (the scheduler's request log); a simulator's adds its model's
    ``output_s`` to the last token, which is taken back out here (``frontend_s`` lies inside the
    first part on both sides)."""
    engine_finish = requests["engine_finish_s"] if "engine_finish_s" in requests else requests["finish_s"] - output_s
    parts = pd.DataFrame({
        "to first scheduled": requests["first_scheduled_s"] - requests["arrival_s"],
        "service": engine_finish - requests["first_scheduled_s"],
        "way out": requests["finish_s"] - engine_finish,
    })
    return parts.assign(e2e=requests["finish_s"] - requests["arrival_s"]).set_axis(requests["request_id"].to_numpy())


def latency_split(engine: pd.DataFrame, sim: pd.DataFrame, output_s: float) -> pd.Series:
    """A simulator's minus the engine's latency over the same trace, part by part
    (:func:`latency_parts`): the median over the engine's measured requests of each part's
    difference, and of the end-to-end one (``e2e``), in ms. The parts' medians need not add up
    to the end-to-end median."""
    measured = engine[engine["measured"]] if "measured" in engine else engine
    eng = latency_parts(measured)
    own = latency_parts(sim, output_s=output_s).reindex(eng.index)
    return ((own - eng).median() * 1e3).rename("sim - engine (ms)")


def step_error_by_batch(steps: pd.DataFrame, model) -> pd.DataFrame:
    """A step-time model against the engine's steps that only decode, by decode batch size: how
    many, the measured and the predicted mean step (ms), the error (%), and the median time
    between one step's end and the next one's start (ms; inside the measured step, see
    :func:`schedlab.backends.steps.tables.step_table`)."""
    decode = steps[steps["n_prefill_tokens"] == 0]
    pairs = decode["prefill_pairs"].to_numpy(float) if "prefill_pairs" in decode else 0
    predicted = model(decode["n_encoder"].to_numpy(float), decode["n_prefill_tokens"].to_numpy(float),
                      decode["n_decode"].to_numpy(float), decode["ctx_tokens"].to_numpy(float), pairs)
    table = decode.assign(predicted=predicted, between=decode["time_s"] - (decode["t_update"] - decode["t_schedule"]))
    out = table.groupby("n_decode").agg(steps=("time_s", "size"), measured_ms=("time_s", "mean"),
                                         predicted_ms=("predicted", "mean"), between_ms=("between", "median"))
    out[["measured_ms", "predicted_ms", "between_ms"]] *= 1e3
    return out.assign(error_pct=(out["predicted_ms"] / out["measured_ms"] - 1) * 100)
