# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Paper A — duration-aware scheduling for ASR serving
#
# *Duration Aware Scheduling for ASR Serving Under Workload Drift* (arXiv 2603.11273):
# order Whisper's waiting queue by audio duration (SJF) or by response ratio (HRRN) instead
# of arrival (FCFS). Every figure below is regenerated from the pipeline's outputs on the
# `sim` backend, with the roofline of the paper's A100 40 GB calibrated on the FCFS baseline
# only (see the calibration notebook). Paper values are shown beside ours where the paper
# reports them.
#
# **What is fitted, derived and predicted.** The calibration reads only Table 1's FCFS rows (P50
# TTFT, P50 and P90 E2EL at every rate) and the saturation point; no SJF or HRRN number enters
# it (`schedlab.fit.calibrate.baseline_rows`, tested in `tests/test_fit.py`). It matches the
# median of each FCFS cell over the trace seeds (`asr.seeds`), not one draw of arrivals. An SJF
# or HRRN number is a prediction where the order acts; where no queue forms it equals FCFS's
# fitted cell on every seed, and counts as derived (`schedlab.counting`). Every number of ours
# is the median over the seeds, with its 5-95 % band. Each rate is a run of 1,000 requests, as
# `vllm bench serve` sends by default (the section "How the paper bounded its runs" shows why).

# %% tags=["parameters"]
# The rule's declared inputs (written by the notebook rule); by default the last run's, as seen
# from this folder when the notebook is opened by hand.
manifest = "../results/notebooks/asr_duration.inputs.json"
figures_dir = "../results/figures/asr_duration"

# %%
import json

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from schedlab.examples import toy_head_of_line
from schedlab.render import read_manifest
from schedlab.asr.report import asr_findings, reported_asr_table1
from schedlab.report import (
    METRIC_WORDS,
    pct_change_vs,
    save_figure,
    scheduler_order,
    scheduler_palette,
    select,
    table_beside_reported,
)

sns.set_theme(style="whitegrid", context="notebook")
manifest = read_manifest(manifest)
inputs, backend, hardware = manifest["inputs"], manifest["backend"], manifest["hardware"]
summary = pd.read_parquet(inputs["summary"])
kappa = json.loads(inputs["kappa"].read_text())
utterances = pd.read_parquet(inputs["utterances"])
calibration = json.loads(inputs["calibration"].read_text())["meta"]["calibration"]
if backend == "vllm":
    # The real engine runs the reduced LibriSpeech sweep only (see config.yaml, vllm).
    libri = select(summary, *summary[["workload", "model"]].iloc[0])
    uniform = burst = medium = libri.iloc[:0]
else:
    libri = select(summary, "librispeech", "whisper-large-v3")
    uniform = select(summary, "uniform", "whisper-large-v3")
    burst = select(summary, "burst", "whisper-large-v3")
    medium = select(summary, "librispeech-500", "whisper-medium")
print(f"backend: {backend}; runs: {len(summary)}")
# Every policy the sweep ran, in the registry's order and colours (a plug-in's too).
POLICY_ORDER = scheduler_order(summary["policy"].unique())
palette = scheduler_palette(POLICY_ORDER)


from schedlab.report import legend_beside, nested_style, plot_beside_paper


def by_rate(table, metrics, title, name, ylabel="latency (ms)", log=False):
    """One panel per metric, one line per policy (skipped when the backend did not run it)."""
    if table.empty:
        print(f"{title}: not part of the {backend} sweep")
        return
    fig = plot_beside_paper(table, metrics, ylabel=ylabel, title=title, log=log, palette=palette)
    save_figure(fig, figures_dir, name)
    plt.show()


# %% [markdown]
# ## Paper vs ours at a glance
# Every number of Table 1, SJF's and HRRN's changes vs FCFS at 20 and 25 req/s, and the
# saturation throughput (full table at the end).

# %%
from schedlab.counting import TOLERANCE, count_line, counts, derived_rows, paper_vs_ours, seed_band
from schedlab.report import METRIC_WORDS, plot_beside_paper, runs_of, seed_bands
from schedlab.asr.report import asr_rows, by_seed, change_group, seed_changes

def words(x):
    """Metric column names (or a table's columns) in words, for panel titles."""
    return [METRIC_WORDS.get(m, m) for m in x] if isinstance(x, list) else x.rename(columns=METRIC_WORDS)


# What each overloaded FCFS row alone implies (calibration record): the engine speed at which
# FCFS's median E2E latency matches that row, and that engine's saturation throughput.
implied = {r["rate"]: r for r in calibration.get("implied_saturation", [])}
saturation_target = calibration["targets"]["saturation_rps"]


def overload_why():
    if not implied:
        return "Fitted: no engine within 4x of the fit's speed matches these rows' median E2E latency."
    each = ", ".join(f"at {r:g} req/s one saturating at {i['saturation_rps']:.1f} req/s" for r, i in sorted(implied.items()))
    return (f"Fitted: the paper's median E2E latency alone needs, {each} (its saturation point: "
            f"{saturation_target:g} req/s): one engine of fixed step costs cannot match every overloaded row.")


#: Table 1 as the paper reports it, by (rate, policy).
paper_rows = reported_asr_table1().set_index(["rate", "policy"])


def from_light_load(table, metric, rate, ratio=False, light=1):
    """FCFS's ``metric`` at ``rate`` against its value at ``light`` req/s (a difference, or a
    ratio); NaN where either rate was not run."""
    try:
        at, base = table.loc[(rate, "fcfs"), metric], table.loc[(light, "fcfs"), metric]
    except KeyError:
        return float("nan")
    return at / base if ratio else at - base


def paper_and_model(metric, rate, ratio=False):
    """How FCFS's ``metric`` moved from 1 req/s to ``rate`` in the paper and in this run."""
    show = (lambda v: f"{v:.1f}x") if ratio else (lambda v: f"{v:+.0f} ms")
    moved = [from_light_load(t, metric, rate, ratio) for t in (paper_rows, libri)]
    return f"{show(moved[0])} in the paper, " + (f"{show(moved[1])} in the model" if pd.notna(moved[1]) else "not run here")


paper_ttft_changes = pct_change_vs(paper_rows, ["p50_ttft_ms"])["p50_ttft_ms"]
paper_changes = pct_change_vs(paper_rows, ["p50_e2el_ms", "p90_e2el_ms"])


WHY = {
    "fcfs@1": (f"Fitted: from 1 to 10 req/s the median TTFT moves {paper_and_model('p50_ttft_ms', 10)} "
               f"(to 15 req/s: {paper_and_model('p50_ttft_ms', 15)}); one front-end delay "
               f"({calibration['frontend_s'] * 1e3:.0f} ms) cannot give both the paper's light-load TTFT and that rise, "
               "so the fit splits the difference."),
    "fcfs@5": "Fitted: as at 1 req/s, the front-end delay is shared with the 10-15 req/s rows.",
    "fcfs@10": (f"Fitted: P90 E2E latency at 10 req/s against 1 req/s: {paper_and_model('p90_e2el_ms', 10, ratio=True)}; "
                "the paper's tail at moderate load is heavier than a fixed step-cost engine with its light-load speed gives. "
                f"Its median TTFT there is not spent behind other waiting requests, whose order SJF changes: in the paper SJF moves it "
                f"by {paper_ttft_changes[(10, 'sjf')]:+.0f}% at 10 req/s, against {paper_ttft_changes[(15, 'sjf')]:+.0f}% at 15 req/s, where a queue forms."),
    "fcfs@15": (f"Fitted: P90 E2E latency at 15 req/s against 1 req/s: {paper_and_model('p90_e2el_ms', 15, ratio=True)}; "
                "the paper's queueing before saturation is heavier than the model's."),
    "fcfs@20": overload_why(),
    "fcfs@25": overload_why(),
    "saturation": "Fitted: the saturation point trades against the Table 1 rows above.",
    "treatment": "Predicted: carries the FCFS error at that rate plus the policy's own.",
}
# A change vs FCFS is judged by the seeds: the paper's one run is inside our band, or the noise
# of one run's arrivals cannot explain the difference.
libri_runs = runs_of(summary, "librispeech", "whisper-large-v3") if backend != "vllm" else summary.iloc[:0]
for rate in (20, 25):
    for policy in ("sjf", "hrrn"):
        for m in ("p50_e2el_ms", "p90_e2el_ms"):
            WHY[change_group(policy, m, rate)] = (
                "Predicted: the paper's one run lies outside the range the model's trace seeds give, so the "
                "difference is the model's, not one draw's: " + ("SJF's" if policy == "sjf" else "HRRN's")
                + " reordering acts on a queue of the model's length, and the FCFS cells it is measured against are fitted.")
if backend == "vllm":
    vs_paper = None
    print("the real engine runs whisper-tiny on a CPU: no paper number applies")
else:
    vs_paper = paper_vs_ours(asr_rows(libri_runs), why=WHY)
    print(count_line(vs_paper))
    display(derived_rows(vs_paper).round(1))

# %% [markdown]
# ## Fig. 1 — the head-of-line toy example
# Three clips of 8, 4 and 2 s arrive together, served one at a time: 1 s of encoder plus
# 0.2 s per token at 5 tokens per second of audio. Computed by the simulator itself.

# %%
toy = toy_head_of_line()
means = toy.groupby("policy")["e2el_s"].mean().reindex(scheduler_order(toy["policy"].unique()))
fig, ax = plt.subplots(figsize=(6, 3))
sns.barplot(data=toy, x="audio_duration_s", y="e2el_s", hue="policy", hue_order=list(means.index), palette=palette, ax=ax)
ax.set(xlabel="clip duration (s)", ylabel="E2EL (s)", title="toy example: latency per clip")
fig.tight_layout()
legend_beside(fig, title="scheduler")
save_figure(fig, figures_dir, "fig01_toy")
plt.show()
print(means.round(3).to_string())
print(f"SJF improves mean latency {means['fcfs'] / means['sjf']:.3f}x over FCFS (paper: ~1.4x)")

# %% [markdown]
# ## Fig. 2 — duration vs Whisper token count, with the fitted kappa
# kappa by OLS through the origin on lower-cased transcripts tokenised with Whisper's own
# tokenizer (the mirrored transcripts are upper case, which inflates counts about 1.8x).

# %%
rows = []
for lang, fit in kappa.items():
    if fit["status"] == "fitted":
        rows.append({"language": lang, "kappa (tok/s)": fit["kappa"], "SE": fit["se"],
                     "R² (uncentred)": fit["r2_uncentered"], "R² (centred)": fit["r2_centered"], "n": fit["n"]})
    else:
        rows.append({"language": lang, "status": "not reproduced offline", "reason": fit["reason"].split(" (")[0]})
display(pd.DataFrame(rows))
en = kappa["en"]["kappa"]
fig, ax = plt.subplots(figsize=(5, 4))
sns.scatterplot(data=utterances, x="duration_s", y="text_tokens", s=8, alpha=0.4, ax=ax)
xs = np.linspace(0, utterances["duration_s"].max(), 50)
ax.plot(xs, en * xs, color="k", label=f"kappa = {en:.3f} tok/s")
ax.set(xlabel="audio duration (s)", ylabel="Whisper text tokens", title="English (LibriSpeech test-clean)")
ax.legend(loc="upper left")  # tokens follow duration: short clips with many tokens, the upper left, do not occur
save_figure(fig, figures_dir, "fig02_kappa_scatter")
plt.show()

# %% [markdown]
# Spanish, Hindi and Arabic (FLEURS test) need downloads this run could not make; their rows
# above say so. With a mirror holding `fleurs_<lang>_test.tsv` they are fitted the same way.

# %% [markdown]
# ## LibriSpeech — Figs. 3 and 4, Table 1

# %%
e2el = ["p50_e2el_ms", "p90_e2el_ms"]
table1 = None if backend == "vllm" else paper_rows
def changes_by_seed(runs, metrics):
    """Each policy's change vs FCFS on each seed: their median per (rate, policy), and the band."""
    if runs.empty:
        return pct_change_vs(libri, metrics), None
    each = seed_changes(runs, metrics).reset_index()
    return each.groupby(["rate", "policy"])[metrics].median(), seed_bands(each, metrics)


if not libri.empty:
    # Lines: the median over the trace seeds; shaded: their 5-95 % band.
    fig = plot_beside_paper(libri, e2el, table1, ylabel="E2E latency (ms)", title="LibriSpeech: E2E latency vs rate",
                            log=True, palette=palette, bands=seed_bands(libri_runs, e2el))
    save_figure(fig, figures_dir, "fig03_librispeech_e2el")
    plt.show()
    change, change_bands = changes_by_seed(libri_runs, e2el)
    fig = plot_beside_paper(change, e2el, None if table1 is None else pct_change_vs(table1, e2el),
                            ylabel="change vs FCFS (%, negative = better)", title="LibriSpeech: change vs FCFS",
                            palette=palette, bands=change_bands)
    save_figure(fig, figures_dir, "fig04_librispeech_e2el_pct")
    plt.show()

# %%
metrics = ["p50_ttft_ms", "p50_e2el_ms", "p90_e2el_ms"]
if backend == "vllm":
    display(libri[metrics].unstack("policy").round(1))  # a small model on CPU: no paper values apply
else:
    display(table_beside_reported(libri, reported_asr_table1(), metrics).round(1))

# %% [markdown]
# ## How the paper bounded its runs
# The paper says 5 minutes of arrivals per rate, but an open queue offered 25 req/s for 300 s
# against an 18 req/s engine reaches a median wait near a minute, ten times Table 1's FCFS
# 5.4 s. Two bounds fit a benchmark client: a fixed number of requests per rate (`vllm bench
# serve` sends 1,000 unless told otherwise) or a cap on requests in flight (its
# `--max-concurrency`). Below, on the calibrated model, every policy at 20 and 25 req/s under
# each. Only FCFS decides, and it decides for the fixed count: with a cap, the engine's queue
# is held at the cap at any rate past saturation, so FCFS's median is the same at 20 and 25
# req/s, while with a fixed count the backlog grows with the overload for the 1,000/rate
# seconds of arrivals, so the median at 25 req/s is a multiple of the one at 20, as in Table 1
# (2.0x there). The fixed count is therefore the default (`asr.workloads.librispeech`); the
# cap is the workload `librispeech-capped`.

# %%
bounds = pd.DataFrame(calibration["bounds"])
fcfs_paper = reported_asr_table1().query("policy == 'fcfs'").set_index("rate")
shown = bounds.assign(**{f"paper {METRIC_WORDS[m]} (FCFS)": bounds["rate"].map(fcfs_paper[m]).where(bounds["policy"] == "fcfs")
                         for m in ("p50_ttft_ms", "p50_e2el_ms")})
display(shown.rename(columns=METRIC_WORDS).set_index(["bound", "rate", "policy"]).round(1))
ratio = bounds[bounds["policy"] == "fcfs"].pivot_table(index="bound", columns="rate", values="p50_e2el_ms")
print("FCFS median E2E latency, 25 req/s over 20 req/s:",
      {b: round(r, 2) for b, r in (ratio.iloc[:, -1] / ratio.iloc[:, 0]).items()},
      f"(paper: {fcfs_paper.loc[25, 'p50_e2el_ms'] / fcfs_paper.loc[20, 'p50_e2el_ms']:.2f})")

# %% [markdown]
# ## How robust is the headline to the calibration?
# SJF's change in median E2E latency vs FCFS at 25 req/s as each fitted parameter moves up to
# two standard errors from its estimate (the others held), from the calibration stage.

# %%
sens = pd.DataFrame(calibration["sensitivity"])
names = {"compute": "compute factor", "memory": "memory factor", "frontend_s": "front-end delay"}
fig, ax = plt.subplots(figsize=(6, 3.6))
for name, d in sens.groupby("parameter", sort=False):
    ax.plot(d["step_se"], d["change_pct"], marker="o", label=names[name])
paper_gain = paper_changes.loc[(25, "sjf"), "p50_e2el_ms"]
ax.axhline(paper_gain, color="k", ls="--", label="paper")
ax.set(xlabel="parameter shift (standard errors)", ylabel="SJF change in median E2E latency (%)",
       title=f"SJF vs FCFS at {sens['rate'].iloc[0]:g} req/s under calibration uncertainty")
ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
save_figure(fig, figures_dir, "sensitivity_sjf_gain")
plt.show()
print(f"Over two standard errors of every parameter SJF's change runs from {sens['change_pct'].min():+.0f} to "
      f"{sens['change_pct'].max():+.0f} % (paper {paper_gain:+.0f} %): its sign "
      f"{'never changes' if (sens['change_pct'] < 0).all() or (sens['change_pct'] > 0).all() else 'changes'}.")

# %% [markdown]
# ## How much one run's arrivals move the changes
# Past saturation a run's backlog is the overload times the run's length, and with 1,000
# requests the run's length is itself random: at 20 req/s against an ~18 req/s engine, a few
# percent more or fewer arrivals per second change the backlog by a third. SJF's tail (its P90
# is the wait of the longest clips left in that backlog) follows it. Every rate runs on every
# trace seed; below, each policy's change vs FCFS on the same seed, its median and 5-95 % band
# over the seeds at each of Table 1's rates, beside the paper's single run (a draw of the same
# kind).

# %%
if len(libri_runs):
    per_seed = seed_changes(libri_runs)
    bands = per_seed.stack().rename_axis(["rate", "policy", "seed", "metric"]).groupby(["policy", "metric", "rate"]).apply(
        lambda v: pd.Series(seed_band(v))).unstack()
    at_paper = bands[bands.index.get_level_values("rate").isin(paper_changes.index.get_level_values("rate"))]
    shown = at_paper.join(paper_changes.stack().rename_axis(["rate", "policy", "metric"]).rename("paper")
                          .reorder_levels(["policy", "metric", "rate"]), how="left")
    shown = shown.assign(paper_inside=(shown["paper"] >= shown["low"]) & (shown["paper"] <= shown["high"]))
    # Where the change is nil on every seed no queue forms: the order cannot act (derived rows).
    idle = (shown["low"].abs() <= 1e-6) & (shown["high"].abs() <= 1e-6)
    shown = shown.assign(order_acts=~idle)
    display(shown.rename(index=METRIC_WORDS, level="metric").round(1))
    acting = shown[shown["order_acts"]]
    width = (acting["high"] - acting["low"])
    widest = width.idxmax() if len(acting) else None
    outside = acting[~acting["paper_inside"]]
    print(f"Over {int(shown['seeds'].max())} trace seeds the order acts in {len(acting)} of {len(shown)} changes (in the "
          f"others no queue forms and the change is nil on every seed)."
          + ("" if widest is None else
             f" Where it acts, the paper's change lies inside our 5-95 % band for {int(acting['paper_inside'].sum())} of "
             f"{len(acting)}; the widest band is {width.max():.0f} points ({METRIC_WORDS[widest[1]]} of "
             f"{widest[0].upper()} at {widest[2]:g} req/s).")
          + ("" if outside.empty else " Outside: " + "; ".join(
              f"{pol.upper()} {METRIC_WORDS[m]} at {r:g} req/s (paper {row['paper']:+.0f} %, ours {row['low']:+.0f} to "
              f"{row['high']:+.0f} %)" for (pol, m, r), row in outside.iterrows()) + "."))

# %% [markdown]
# ## Calibrated on every seed, not one draw
# The same calibration fitted on the first trace seed alone (the variant `first-seed`) and on
# the median over every seed (the configured one): its parameters, and the counts of every
# paper number under each, both counted on every seed (the calibration record's runs of every
# policy at each reported rate and seed).

# %%
fits = {"first seed": json.loads(inputs["calibration_first_seed"].read_text())["meta"]["calibration"],
        "median over seeds": calibration}
params = pd.DataFrame({label: {**{f"{p}": r[p] for p in ("compute", "memory", "frontend_s")},
                               **{f"{p} 95% CI": "{:.3g}-{:.3g}".format(*r["uncertainty"][p]["ci95"]) for p in ("compute", "memory", "frontend_s")},
                               "fitted on seeds": ", ".join(map(str, r.get("fit_seeds", []))), "statistic": r.get("seed_statistic", "")}
                       for label, r in fits.items()}).T
display(params)
if backend != "vllm":
    by_fit = {label: counts(paper_vs_ours(asr_rows(r["seed_runs"]))) for label, r in fits.items()}
    shown_counts = pd.DataFrame({label: {"predicted within 15 %": "{} of {}".format(c["predicted"][0], c["predicted"][2]),
                                         "paper inside our band": "{} of {}".format(c["predicted"][1], c["predicted"][2]),
                                         "changes inside our band": "{} of {}".format(c["changes"][0], c["changes"][1]),
                                         "fitted within 15 %": "{} of {}".format(*c["fitted"]), "derived": c["derived"]}
                                 for label, c in by_fit.items()}).T
    display(shown_counts)
    one, med = (fits[k] for k in fits)
    moved = "; ".join(f"{p} {one[p]:.3g} -> {med[p]:.3g}" for p in ("compute", "memory", "frontend_s"))
    c1, c2 = by_fit["first seed"], by_fit["median over seeds"]
    print(f"From the first seed to the median over {len(med.get('fit_seeds', []))} seeds the parameters move {moved}; "
          f"predicted within 15 % moves from {c1['predicted'][0]} to {c2['predicted'][0]} of {c2['predicted'][2]}, the "
          f"paper inside our band from {c1['predicted'][1]} to {c2['predicted'][1]}, and the changes inside our band "
          f"from {c1['changes'][0]} to {c2['changes'][0]} of {c2['changes'][1]}.")

# %% [markdown]
# ## The front end, measured: does it make FCFS's TTFT rise before saturation?
# In the paper FCFS's median TTFT rises well before the engine saturates. One candidate is the
# API server: before the scheduler sees a clip, vLLM decodes its audio and computes its log-mel
# features on the host's CPU, so one API process serving requests in turn is a queue in front
# of the engine. That CPU time is measured here (`schedlab front-end-cost`: vLLM's own audio
# decoding and the model's feature extractor, on this machine's CPU) and enters the
# calibration as the station's service time, held fixed (the variant `measured-front-end`),
# instead of being fitted or left out. A host CPU of another speed scales it: the waits below
# are shown for half and twice the measured time as well.

# %%
from schedlab.fit.front_end_cost import md1_wait

fe_table = pd.read_parquet(inputs["front_end_table"])
fe_fit = json.loads(inputs["front_end_fit"].read_text())
measured_fit = json.loads(inputs["calibration_measured_front_end"].read_text())["meta"]["calibration"]
long = fe_table.melt(id_vars=["duration_s"], value_vars=["decode_ms", "features_ms", "total_ms"],
                     var_name="part", value_name="cpu_ms")
long["part"] = long["part"].map({"decode_ms": "audio decoding", "features_ms": "log-mel features", "total_ms": "both"})
fig, ax = plt.subplots(figsize=(5.5, 3.5))
sns.stripplot(data=long, x="duration_s", y="cpu_ms", hue="part", dodge=True, ax=ax, native_scale=True)
grid = np.linspace(0, float(fe_table["duration_s"].max()), 50)
ax.plot(grid, fe_fit["intercept_ms"] + fe_fit["per_s_ms"] * grid, color="k", lw=1, label="OLS fit (both)")
ax.set(xlabel="clip duration (s)", ylabel="CPU time per request (ms)",
       title=f"front end per request, {fe_fit['model']}")
sns.move_legend(ax, "upper left", bbox_to_anchor=(1.01, 1), frameon=False, title=None)
save_figure(fig, figures_dir, "front_end_cost")
plt.show()

service_ms = fe_fit["service_s"] * 1e3
table_rates = sorted(paper_rows.index.get_level_values("rate").unique())
waits = pd.DataFrame({f"{k:g}x measured": {r: md1_wait(r, fe_fit["service_s"] * k) * 1e3 for r in table_rates}
                      for k in (0.5, 1, 2)}).rename_axis("rate (req/s)")
display(waits.round(1))
fcfs_ttft = {label: by_seed(r["seed_runs"]).xs("fcfs", level="policy")["p50_ttft_ms"].groupby("rate").median()
             for label, r in {"configured": calibration, "measured front end": measured_fit}.items()}
paper_fcfs = paper_rows.xs("fcfs", level="policy")["p50_ttft_ms"]
rise = pd.DataFrame({"paper": paper_fcfs, **fcfs_ttft}).rename_axis("rate (req/s)")
display(rise.round(1))
light, mid = table_rates[0], max(r for r in table_rates if r < saturation_target)
moved = {k: float(v.loc[mid] - v.loc[light]) for k, v in rise.items()}
busy = (f" The machine was busy during {fe_fit['contended'] * 100:.0f} % of the timed calls (their wall time exceeded "
        "their CPU time by half): its CPU times are less affected than its wall times, not immune; a quiet machine gives "
        "the figure to use." if fe_fit["contended"] > 0.05 else "")
wait_ms = lambda v: "without bound (the process is overloaded)" if np.isinf(v) else f"{v:.1f} ms"
light_paper, light_measured = float(rise.loc[light, "paper"]), float(rise.loc[light, "measured front end"])
if abs(light_measured / light_paper - 1) * 100 > TOLERANCE:
    verdict = (f"The measured front end does not fit the paper's light load: its service alone is {service_ms:.0f} ms of the "
               f"paper's {light_paper:.0f} ms median TTFT at {light:g} req/s, and with it the calibration gives "
               f"{light_measured:.0f} ms there, so a front end of this cost is not the paper's (its host's CPU is faster, or "
               "its API server spends less per clip), and the rise it would make is not evidence.")
elif moved["measured front end"] >= 0.5 * moved["paper"]:
    verdict = (f"The measured front end gives {moved['measured front end'] / moved['paper'] * 100:.0f} % of the paper's rise "
               "while matching its light load: a measured queue, not a fitted one, accounts for most of the TTFT rise.")
else:
    verdict = (f"The measured front end gives {moved['measured front end'] / moved['paper'] * 100:.0f} % of the paper's rise: "
               "the rest lies elsewhere (the engine's own queueing before saturation, or a cost not modelled).")
print(f"The front end costs {service_ms:.1f} ms of CPU per {fe_fit['mean_duration_s']:.1f} s clip ({fe_fit['features_ms_median']:.1f} ms "
      f"median for the log-mel features of Whisper's 30 s window, {fe_fit['decode_ms_median']:.2f} ms for decoding; "
      f"{fe_fit['per_s_ms']:+.2f} ms per second of audio, 95 % CI {fe_fit['ci95']['per_s_ms'][0]:+.2f} to "
      f"{fe_fit['ci95']['per_s_ms'][1]:+.2f}).{busy} As one first-come-first-served API process it makes requests wait "
      f"{wait_ms(waits.loc[light, '1x measured'])} on average at {light:g} req/s and {wait_ms(waits.loc[mid, '1x measured'])} at "
      f"{mid:g} req/s ({wait_ms(waits.loc[mid, '0.5x measured'])} on a CPU twice as fast, {wait_ms(waits.loc[mid, '2x measured'])} "
      f"on one half as fast). From {light:g} to {mid:g} req/s FCFS's median TTFT rises {moved['paper']:+.0f} ms in the paper, "
      f"{moved['measured front end']:+.0f} ms with the measured front end and {moved['configured']:+.0f} ms in the configured "
      f"calibration. {verdict}")
if backend != "vllm":
    measured_counts = {label: counts(paper_vs_ours(asr_rows(r["seed_runs"])))
                       for label, r in {"configured": calibration, "measured front end": measured_fit}.items()}
    display(pd.DataFrame({label: {"FCFS cells (fitted) within 15 %": "{} of {}".format(*c["fitted"]),
                                  "predicted within 15 %": "{} of {}".format(c["predicted"][0], c["predicted"][2]),
                                  "paper inside our band": "{} of {}".format(c["predicted"][1], c["predicted"][2]),
                                  "changes inside our band": "{} of {}".format(c["changes"][0], c["changes"][1])}
                          for label, c in measured_counts.items()}).T)
    on, off = measured_counts["measured front end"], measured_counts["configured"]
    print(f"With the measured front end {on['fitted'][0]} of {on['fitted'][1]} FCFS cells are within 15 % "
          f"({off['fitted'][0]} in the configured calibration), and {on['predicted'][0]} of {on['predicted'][2]} SJF and HRRN "
          f"cells are predicted within 15 % ({off['predicted'][0]}).")

# %% [markdown]
# ## Uniform-duration split — Figs. 5 and 6, Table 2
# Equal shares of 5, 10, ..., 30 s clips built from real LibriSpeech clips (mean 17.5 s).

# %%
by_rate(words(uniform), words(["p50_e2el_ms", "p90_e2el_ms"]), "Uniform split: E2EL vs rate", "fig05_uniform_e2el", log=True)
by_rate(words(pct_change_vs(uniform, ["p50_e2el_ms", "p90_e2el_ms"])), words(["p50_e2el_ms", "p90_e2el_ms"]),
        "Uniform split: % change vs FCFS", "fig06_uniform_e2el_pct", ylabel="% vs FCFS")
uniform.loc[uniform.index.get_level_values("rate").isin([1, 5, 10, 15, 20, 25, 30]), metrics].unstack("policy").round(1)

# %% [markdown]
# ## Fig. 7 — request throughput vs offered rate

# %%
thr = pd.concat({"librispeech": libri, "uniform": uniform})["throughput_rps"].rename_axis(["workload", "rate", "policy"]).reset_index()
workloads = list(dict.fromkeys(thr["workload"]))
paper_saturation = calibration["targets"]["saturation_rps"]
top = thr["rate"].max()
fig, axes = plt.subplots(1, len(workloads), figsize=(4.6 * len(workloads) + 2, 3.6), sharey=True, squeeze=False)
for ax, workload in zip(axes[0], workloads):
    rows = thr[thr["workload"] == workload]
    for k, p in enumerate(scheduler_order(rows["policy"].unique())):
        r = rows[rows["policy"] == p]
        ax.plot(r["rate"], r["throughput_rps"], color=palette[p], label=p.upper(), **nested_style(k))
    ax.plot([0, top], [0, top], ls=":", color="grey", label="offered rate")
    if workload == "librispeech":
        ax.axhline(paper_saturation, color="k", ls="--", lw=1, label=f"paper: saturates near {paper_saturation:g} req/s")
    ax.set(title={"librispeech": "LibriSpeech", "uniform": "uniform split"}.get(workload, workload),
           xlabel="offered rate (req/s)")
axes[0][0].set_ylabel("completed requests per s")
fig.tight_layout()
legend_beside(fig)
save_figure(fig, figures_dir, "fig07_throughput")
plt.show()
thr.groupby(["workload", "policy"])["throughput_rps"].max().unstack().round(2)

# %% [markdown]
# ## Figs. 8–11 — TTFT scaling and % change, both workloads

# %%
ttft = ["p50_ttft_ms", "p90_ttft_ms"]
if not libri.empty:
    fig = plot_beside_paper(libri, ttft, table1, ylabel="TTFT (ms)", title="LibriSpeech: TTFT vs rate", log=True,
                            palette=palette, bands=seed_bands(libri_runs, ttft))
    save_figure(fig, figures_dir, "fig08_librispeech_ttft")
    plt.show()
    ttft_change, ttft_bands = changes_by_seed(libri_runs, ttft)
    fig = plot_beside_paper(ttft_change, ttft, None if table1 is None else pct_change_vs(table1, ["p50_ttft_ms"]),
                            ylabel="change vs FCFS (%)", title="LibriSpeech: TTFT change vs FCFS", palette=palette,
                            bands=ttft_bands)
    save_figure(fig, figures_dir, "fig09_librispeech_ttft_pct")
    plt.show()
by_rate(words(uniform), words(["p50_ttft_ms", "p90_ttft_ms"]), "Uniform split: TTFT vs rate", "fig10_uniform_ttft", log=True)
by_rate(words(pct_change_vs(uniform, ["p50_ttft_ms", "p90_ttft_ms"])), words(["p50_ttft_ms", "p90_ttft_ms"]),
        "Uniform split: TTFT % change vs FCFS", "fig11_uniform_ttft_pct", ylabel="% vs FCFS")

# %% [markdown]
# ## Fig. 12 — a burst of 500 requests at t = 0

# %%
bm = ["p50_ttft_ms", "p50_e2el_ms", "p50_tpot_ms", "p50_itl_ms"]
if burst.empty:
    print(f"burst: not part of the {backend} sweep")
else:
    b = burst[bm].reset_index().melt(["rate", "policy"], var_name="metric")
    b["metric"] = b["metric"].map(lambda m: METRIC_WORDS.get(m, m))
    g = sns.catplot(data=b, x="policy", y="value", col="metric", kind="bar", order=POLICY_ORDER, palette=palette,
                    hue="policy", sharey=False, height=3, aspect=0.8, legend=False)
    g.set_axis_labels("", "ms")
    g.set_titles("{col_name}")
    save_figure(g.figure, figures_dir, "fig12_burst")
    plt.show()
    display(pd.concat({"ms": burst[bm], "% vs FCFS": pct_change_vs(burst, bm)}, axis=1).round(1))

# %% [markdown]
# In a burst every request has waited equally long, so HRRN's ratio `1 + wait / n_hat` is
# largest for the smallest n_hat: after the first step HRRN makes exactly SJF's choices (at
# t = 0 all ratios are 1 and ties go to the earliest arrival). Identical HRRN and SJF bars are
# therefore a property of the policies, not a plotting slip. The medians move little: the
# engine admits one clip per step (its encoder budget), so the median request is admitted at
# about the 250th step whatever the order; SJF only shortens what follows admission.

# %% [markdown]
# ## Fig. 13 — whisper-medium, 500 requests per rate
# Same hardware and the same calibration factors as whisper-large-v3: a prediction, not a fit.

# %%
spread = medium[["p25_e2el_ms", "p90_e2el_ms"]].groupby("rate").agg(lambda v: (v.max() / v.min() - 1) * 100).max().max()
by_rate(words(medium), words(["p25_e2el_ms", "p90_e2el_ms"]),
        f"whisper-medium: E2EL vs rate (the policies within {spread:.1g} % of each other)", "fig13_medium_e2el", log=True)

# %% [markdown]
# ## The paper's qualitative findings, checked at the highest LibriSpeech rate

# %%
findings = asr_findings(libri)
findings

# %% [markdown]
# ## Notes on what differs from the paper
# - **Run length at overload.** Each rate is 1,000 requests (see "How the paper bounded its
#   runs"); the uniform split runs the same way. whisper-medium keeps the paper's 500.
# - **HRRN's units.** `R = (wait + n_hat) / n_hat = 1 + wait / n_hat`: expressing n_hat in
#   tokens or in seconds of service (any constant per-token time) rescales `wait / n_hat`
#   by a constant and leaves HRRN's order, and its victim choice, unchanged. The unit question
#   the paper leaves open therefore has no effect here (tested in `tests/test_policies.py`).
# - **The throughput ceiling** comes from the engine's admission: with 2048 batched tokens
#   (vLLM's serving default on a < 70 GiB GPU) the encoder budget admits one 1500-frame clip per
#   step, so throughput is one request per step at saturation, whatever the order.

# %%
print(json.dumps({k: calibration[k] for k in ("compute", "memory", "frontend_s", "uncertainty", "achieved")}, indent=2))

# %% [markdown]
# ## Paper vs ours
# Every number the paper reports for this workload, ours from this run: the median over the
# trace seeds (`ours`) and its 5-95 % band (`low`, `high`). `fitted` rows are the calibration's
# inputs (FCFS only); `derived` rows equal a fitted cell (`reason` says why); `predicted` rows
# are neither. An absolute number is within when ours is within 15 % of the paper's, and
# `in_band` when the paper's value lies inside our band; a change vs FCFS matches only when the
# paper's change lies inside our band. Where a row does not match, `why` says why.

# %%
if vs_paper is not None:
    print(count_line(vs_paper))
    with pd.option_context("display.max_rows", 200, "display.max_colwidth", None):
        display(vs_paper.round(1))


# %% [markdown]
# ## This run's numbers
# The paper-vs-ours table, written beside the manifest (`asr_duration.numbers.json`) for the
# pipeline's results page.

# %%
from schedlab.render import write_numbers

write_numbers(manifest, paper_vs_ours=vs_paper,
              seed_fits=None if backend == "vllm" else {"parameters": params.reset_index(names="fit"),
                                                         "counts": shown_counts.reset_index(names="fit")})
