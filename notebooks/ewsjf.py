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
# # Paper B — EWSJF: adaptive multi-queue SJF for mixed LLM workloads
#
# Requests are partitioned by prompt length into queues learned from traffic
# (Refine-and-Prune), routed by a dispatcher with bubble queues, and admitted from the queue
# whose head scores best (`score = q_index/(b+1) · (w_base + w_urg·W/C_prefill(b) +
# w_fair·log(b+1))`, weights linear in the queue's mean length), backfilling from adjacent
# queues. A Bayesian meta-optimiser (optuna's TPE) tunes the weights, `alpha` and `max_queues`
# over trials of a fixed interval while the engine runs.
#
# **Setup.** The paper serves LLaMA-2-13B-Chat with vLLM 0.11 on four A100-80GB in tensor
# parallel. Here the `sim` engine (vLLM-v1-style continuous batching, 256 sequences, 8,192
# batched tokens, paged KV of the four GPUs' memory) steps with a model fitted to the
# roofline of that model on that hardware. The paper publishes no step times, so the
# roofline's compute-bound costs are scaled by one factor, chosen so that **FCFS saturates at
# the paper's 8.45 req/s on the 30k mixed workload (Table 3's FCFS row)**; everything else
# below is a prediction. The studies run EWSJF with the parameters the tuning study settles
# on (Fig. 5), as a deployment would carry them.

# %% tags=["parameters"]
# The rule's declared inputs (written by the notebook rule); by default the last run's, as seen
# from this folder when the notebook is opened by hand.
manifest = "../results/notebooks/ewsjf.inputs.json"
figures_dir = "../results/figures/ewsjf"

# %%
import json

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from IPython.display import Markdown, display

from schedlab.render import read_manifest
from schedlab.ewsjf.report import reported_ewsjf_table3
from schedlab.report import save_figure
from schedlab.report import legend_beside, plain_log_ticks

sns.set_theme(style="whitegrid", context="notebook")
inputs = read_manifest(manifest)["inputs"]
study = {s: pd.read_parquet(inputs[s]) for s in (
    "tuning", "queues-mixed", "queues-short", "queues-long", "load", "starvation", "starvation_timeline", "sharing")}
pools = {k: pd.read_parquet(inputs[k]) for k in ("short", "long")}
calibrated = json.loads(inputs["calibrated"].read_text())
params = json.loads(inputs["params"].read_text())
# Table 3's study runs every method on each trace seed: one row per method, the median over them.
queues_mixed = study["queues-mixed"].groupby(["workload", "n", "method"], as_index=False).median(numeric_only=True)
METHODS = ["fcfs", "kmeans-5", "kmeans-10", "kmeans-30", "ewsjf"]

# %% [markdown]
# ## Paper vs ours at a glance
# Every cell of Table 3 (full table at the end), ours the median over the trace seeds with its
# 5-95 % band. The calibration reads only FCFS's req/s (the median over the seeds); no k-means
# or EWSJF number enters it, and FCFS's completion time and tok/s follow from that rate by
# arithmetic on the trace (derived).

# %%
from schedlab.ewsjf.report import ewsjf_rows
from schedlab.counting import count_line, derived_rows, paper_vs_ours

SAME_WORK = ("Predicted: every order does the same work in this linear step model, so throughput cannot rise "
             "(see the end of the notebook).")
WHY = {"fcfs": "Fitted on req/s: the median over the trace seeds is the calibration's target.",
       **{m: SAME_WORK for m in METHODS[1:]}}
vs_paper = paper_vs_ours(ewsjf_rows(study["queues-mixed"]), why=WHY)
print(count_line(vs_paper))
display(derived_rows(vs_paper).round(2))

# %% [markdown]
# ## Workloads, and how they differ from the paper's
# - **mixed**: 80% short interactive, 20% long-context prompts, 32–4,096 tokens, Poisson
#   arrivals. Short prompts (32–1,023 tokens) come from the Azure 2023 LLM inference trace's
#   conversation service; long ones (1,024–4,096) from the Mooncake conversation trace and the
#   Azure code trace (both read from the offline mirror; they are downloaded otherwise). The
#   paper does not name its sources beyond "chat-like" and "long-context"; its length histogram
#   is not published, so the modes here are those of these traces.
# - **short-only** (30k) and **long-only** (10k) use the same pools.
# - **Output lengths**: the paper's tables imply about 11 output tokens per request (FCFS:
#   90.4 tok/s at 8.45 req/s), so each trace's outputs keep their source's shape but are scaled
#   to a mean of 10.7 tokens. The traces' real outputs (hundreds of tokens) would make the runs
#   decode-bound, unlike the paper's.
# - Token counts are the traces' own (their services' tokenizers), not LLaMA-2's.

# %%
desc = pd.DataFrame([
    {"pool": k, "requests": len(p), "sources": ", ".join(sorted(p["source"].unique())),
     "prompt p10": p["prompt_tokens"].quantile(0.1), "prompt p50": p["prompt_tokens"].median(),
     "prompt p90": p["prompt_tokens"].quantile(0.9)}
    for k, p in pools.items()
])
desc

# %%
fig, ax = plt.subplots(figsize=(8, 3.5))
mix = pd.concat([pools["short"].sample(8000, replace=True, random_state=0).assign(pool="short (80%)"),
                 pools["long"].sample(2000, replace=True, random_state=0).assign(pool="long (20%)")])
sns.histplot(data=mix, x="prompt_tokens", hue="pool", bins=80, multiple="stack", ax=ax)
ax.set(xlabel="prompt tokens", ylabel="requests (of 10,000)", title="mixed workload: prompt lengths")
sns.move_legend(ax, "upper left", bbox_to_anchor=(1.01, 1), frameon=False)
save_figure(fig, figures_dir, "workload_lengths")

# %% [markdown]
# ## Calibration
# The factor on compute-bound costs (prefill), i.e. the inverse of the achieved fraction of
# the roofline's FLOP/s that makes FCFS deliver the paper's throughput.

# %%
cal = calibrated["meta"]["calibration"]
pd.DataFrame([{
    "compute factor": cal["compute"], "achieved FLOP efficiency": 1 / cal["compute"],
    "target FCFS req/s": cal["targets"]["saturation_rps"],
    "calibration traces": f"{cal['n_requests']} mixed @ {cal['overload_rate']} req/s, {cal['seed_statistic']} over {len(cal['seeds'])} seeds",
    "prefill s/token": calibrated["n_prefill_tokens"], "step intercept s": calibrated["intercept"],
}]).round(6)

# %% [markdown]
# ## 1. Queue count (paper Table 3): FCFS, k-means with 5/10/30 queues, Refine-and-Prune
# One trace of 30k mixed requests arriving at 40 req/s (well above saturation, as the paper's
# completion times imply). k-means partitions are fixed; Refine-and-Prune is EWSJF's own,
# re-learned online. `queues` is the most queues a decision saw (k-means on these traces
# yields fewer distinct clusters than asked when lengths repeat).

# %%
def beside_reported(table: pd.DataFrame) -> pd.DataFrame:
    rep = reported_ewsjf_table3().set_index("method")
    ours = table.set_index("method")[["queues", "completion_s", "throughput_rps", "throughput_tok_s"]]
    both = pd.concat({"ours": ours, "paper": rep}, axis=1).swaplevel(axis=1)
    cols = ["queues", "completion_s", "throughput_rps", "throughput_tok_s"]
    return both[[(c, w) for c in cols for w in ("ours", "paper")]].loc[METHODS]


beside_reported(queues_mixed).round(2)

# %%
qm = queues_mixed.set_index("method").loc[METHODS]
rep = reported_ewsjf_table3().set_index("method").loc[METHODS]
plot = pd.concat([
    pd.DataFrame({"method": METHODS, "tok/s": qm["throughput_tok_s"].to_numpy(), "source": "ours (sim)"}),
    pd.DataFrame({"method": METHODS, "tok/s": rep["throughput_tok_s"].to_numpy(), "source": "paper"}),
])
fig, axes = plt.subplots(1, 2, figsize=(12, 3.8))
sns.barplot(data=plot, x="method", y="tok/s", hue="source", ax=axes[0])
axes[0].set(title="Table 3: output tokens/s, mixed 30k", xlabel="scheduler")
sns.move_legend(axes[0], "lower left", bbox_to_anchor=(0, 1.08), ncol=2, frameon=False, title=None)
sns.barplot(x=qm.index, y=qm["mean_ttft_short_ms"] / 1e3, ax=axes[1], color="C2")
axes[1].set(title="mean TTFT of short requests (same runs)", ylabel="s", xlabel="scheduler")
fig.tight_layout()
save_figure(fig, figures_dir, "table3_queue_count")

# %% [markdown]
# ## 2. Throughput vs input rate, FCFS vs EWSJF (paper Tables 4–7, Fig. 3)

# %%
load = study["load"]
thr = load.pivot_table(index=["n", "rate"], columns="method", values="throughput_tok_s")
thr["speedup_%"] = (thr["ewsjf"] / thr["fcfs"] - 1) * 100
ttft = load.pivot_table(index=["n", "rate"], columns="method", values="mean_ttft_short_ms")
thr.join(ttft.add_prefix("short TTFT ms "), how="left").round(2)

# %%
fig, axes = plt.subplots(1, 2, figsize=(12, 4))
shown = load.assign(n=load["n"].map("{:,}".format), ttft_s=load["mean_ttft_short_ms"] / 1e3).rename(
    columns={"n": "requests per run", "method": "scheduler"})
sizes = [f"{n:,}" for n in sorted(load["n"].unique())]
sns.lineplot(data=shown, x="rate", y="throughput_tok_s", hue="requests per run", hue_order=sizes, style="scheduler",
             markers=True, ax=axes[0], palette="viridis")
axes[0].set(xscale="log", xlabel="input rate (req/s)", ylabel="output tok/s", title="throughput vs rate", ylim=(0, None))
sns.lineplot(data=shown, x="rate", y="ttft_s", hue="requests per run", hue_order=sizes, style="scheduler",
             markers=True, ax=axes[1], palette="viridis", legend=False)
axes[1].set(xscale="log", yscale="log", xlabel="input rate (req/s)", ylabel="s", title="mean TTFT of short requests")
for ax in axes:
    plain_log_ticks(ax.xaxis)
plain_log_ticks(axes[1].yaxis)
fig.tight_layout()
legend_beside(fig)
save_figure(fig, figures_dir, "fig3_throughput_vs_rate")

# %% [markdown]
# ## 3. Short-only and long-only workloads vs queue count (Tables 8–9, Fig. 4), summary (Table 10)
# GPU utilisation is the engine's busy time over the run's span; tails are P95.

# %%
variants = pd.concat([study["queues-short"], study["queues-long"], queues_mixed])
cols = ["workload", "n", "method", "queues", "throughput_rps", "throughput_tok_s", "utilisation", "p95_ttft_ms", "p95_e2el_ms"]
variants[cols].round(3)

# %%
fig, axes = plt.subplots(1, 2, figsize=(12, 3.8))
for ax, kind in zip(axes, ("short", "long")):
    t = variants[variants["workload"] == kind]
    sns.barplot(data=t, x="method", y="throughput_tok_s", ax=ax, color="C0", order=METHODS)
    ax.set(title=f"{kind}-only ({int(t['n'].iloc[0]):,} requests)", xlabel="scheduler", ylabel="output tok/s")
fig.tight_layout()
save_figure(fig, figures_dir, "fig4_variants")

# %% [markdown]
# ## 4–5. The meta-optimiser beside a run (Figs. 2 and 5)
# One run of mixed traffic at ~83% of FCFS's saturation; each trial lasts a fixed interval of
# the engine's clock (the paper: 10–15 minutes). Trial 0 runs the built-in parameters, the
# next few are random (TPE's start-up), then TPE proposes; after the last trial the best
# parameters stay. The reward is `R = 0.5·C + 0.25·L − 0.25·S − U` (compactness, load balance,
# queue proliferation, mean slowdown over the slowdown of the means; see
# `schedlab.ewsjf.reward`). A trial's reward is noisy: each sees different arrivals.
# Relative priority (Fig. 2) is the score of a short (256), medium (1,024) and long (3,072)
# token head after a 10 s wait under each trial's parameters, normalised to sum to 1.

# %%
tun = study["tuning"]
fig, axes = plt.subplots(1, 2, figsize=(12, 3.8))
axes[0].plot(tun["trial"], tun["reward"], "o-", label="trial reward")
axes[0].plot(tun["trial"], tun["best_reward"], "k--", label="best so far")
axes[0].set(xlabel="trial", ylabel="reward", title="Fig. 5: optimiser convergence")
axes[0].legend(loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
prio = tun.melt(id_vars="trial", value_vars=["priority_short", "priority_medium", "priority_long"], var_name="queue", value_name="priority")
prio["queue"] = prio["queue"].str.removeprefix("priority_")
sns.lineplot(data=prio, x="trial", y="priority", hue="queue", marker="o", ax=axes[1])
axes[1].set(title="Fig. 2: relative priority of short/medium/long", ylabel="share of score")
sns.move_legend(axes[1], "upper left", bbox_to_anchor=(1.01, 1), frameon=False, title="queue's head")
fig.tight_layout()
save_figure(fig, figures_dir, "fig2_fig5_tuning")

# %%
n0 = 4
print(f"mean reward of the first {n0} trials {tun['reward'][:n0].mean():.3f}, of the last {n0} {tun['reward'][-n0:].mean():.3f}; "
      f"best {tun['reward'].max():.3f} at trial {int(tun['reward'].idxmax())}")
pd.Series(params, name="tuned parameters").to_frame()

# %% [markdown]
# ## 6. SJF starvation: long prompts waiting over time (Fig. 6), and 7. short requests' TTFT
# 20k mixed requests at two rates (just below and above FCFS's saturation). Greedy SJF by
# prompt length admits a long prompt only when no shorter one waits; EWSJF's urgency term
# grows with the wait, so every request is eventually admitted (`tests/test_ewsjf.py`
# derives and checks the bound).

# %%
tl = study["starvation_timeline"]
rates = sorted(tl["rate"].unique())
fig, axes = plt.subplots(2, len(rates), figsize=(6 * len(rates), 7), squeeze=False)
for j, rate in enumerate(rates):
    t = tl[(tl["rate"] == rate) & (tl["task"] == "long")]
    sns.lineplot(data=t, x="time_s", y="oldest_wait_s", hue="method", ax=axes[0, j], legend=j == 0)
    axes[0, j].set(title=f"{rate:g} req/s: oldest waiting long prompt", xlabel="time (s)", ylabel="age (s)")
    sns.lineplot(data=t, x="time_s", y="waiting", hue="method", ax=axes[1, j], legend=False)
    axes[1, j].set(title="long prompts waiting", xlabel="time (s)", ylabel="requests")
fig.tight_layout()
legend_beside(fig, title="scheduler")
save_figure(fig, figures_dir, "fig6_starvation")

# %%
st = study["starvation"]
tab = st.pivot_table(index="rate", columns="method", values=["mean_ttft_short_ms", "mean_ttft_long_ms", "p95_ttft_ms", "throughput_tok_s"])
tab.round(1)

# %%
fig, ax = plt.subplots(figsize=(7, 3.8))
sns.barplot(data=st.assign(rate=st["rate"].map("{:g}".format)), x="rate", y="mean_ttft_short_ms", hue="method", ax=ax)
ax.set(yscale="log", ylabel="ms", xlabel="input rate (req/s)", title="mean TTFT of short requests")
plain_log_ticks(ax.yaxis)
sns.move_legend(ax, "upper left", bbox_to_anchor=(1.01, 1), frameon=False, title="scheduler")
save_figure(fig, figures_dir, "fig7_short_ttft")

# %% [markdown]
# ## 8. Could vLLM's prefix cache explain Table 3? Predictions against the sharing level
# In the linear step model every order does the same work (see below), so the k-means and EWSJF
# rows cannot beat FCFS. One mechanism by which an order *changes* the work is vLLM's prefix
# cache, on by default in the paper's vLLM 0.11 (and on in this study's engine): requests from
# one source (questions on one long document) have similar prompt lengths, so length-homogeneous
# queues serve them close together, while their document's blocks are still cached; FCFS serves
# them as they come, spread over the run, after eviction. The paper does not say how much its
# long prompts share, so the sharing level is not fitted: at each level (each long document asked
# 1, 2, ... times, at random places in the 30k trace; 1 = nothing shared) FCFS alone is
# calibrated to Table 3's 8.45 req/s, as everywhere in this notebook, and every other row is
# predicted. `ewsjf-uncached` is EWSJF whose score costs a head's uncached tokens.

# %%
sh = study["sharing"].copy()
level = "questions_per_doc"
fcfs_time = sh[sh["method"] == "fcfs"].set_index(level)["completion_s"]
sh["change_%"] = (sh["completion_s"] / sh[level].map(fcfs_time) - 1) * 100
rep3 = reported_ewsjf_table3().set_index("method")
paper_change = (rep3["completion_s"] / rep3.at["fcfs", "completion_s"] - 1) * 100
curve = sh.pivot_table(index=level, columns="method", values="change_%")[[m for m in METHODS[1:] + ["ewsjf-uncached"] if m in set(sh["method"])]]
hits = sh.pivot_table(index=level, columns="method", values="prefix_cache_hit_rate")
display(pd.concat({"completion time vs FCFS (%)": curve, "prefix-cache hit rate": hits[["fcfs", "kmeans-30", "ewsjf"]]},
                  axis=1).round(3))
sh.groupby(level)[["compute"]].first().rename(columns={"compute": "calibrated compute factor"}).T.round(2)

# %%
fig, axes = plt.subplots(2, 1, figsize=(8, 7.5), sharex=True)
for i, m in enumerate(curve.columns):
    axes[0].plot(curve.index, curve[m], "o-", color=f"C{i}", label=f"{m} (predicted)")
    if m in paper_change:
        axes[0].axhline(paper_change[m], color=f"C{i}", ls="--", lw=1)
axes[0].set(xscale="log", ylabel="completion time vs FCFS (%)",
            title="predictions (lines) beside the paper's rows (dashed)")
axes[0].legend(loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
for m in ("fcfs", "kmeans-30", "ewsjf"):
    axes[1].plot(hits.index, hits[m], "o-", label=m)
axes[1].set(xscale="log", xlabel="questions per long document (1 = no sharing)", ylabel="prompt tokens found cached",
            title="prefix-cache hit rate (first admissions)")
axes[1].legend(loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
for ax in axes:  # one tick per level run
    ax.set_xticks(curve.index, [f"{q:g}" for q in curve.index])
    ax.xaxis.set_minor_locator(plt.NullLocator())
fig.tight_layout()
save_figure(fig, figures_dir, "sharing_curve")


# %%
def level_reaching(m: str):
    """The smallest level (interpolated in log-level) at which method ``m``'s predicted change
    reaches the paper's, or None within the levels run."""
    c, target = curve[m], paper_change[m]
    reached = c[c <= target]
    if reached.empty:
        return None
    hi = reached.index[0]
    below = c[c.index < hi]
    if below.empty:
        return float(hi)
    lo = below.index[-1]
    w = (target - c[lo]) / (c[hi] - c[lo])
    return float(np.exp(np.log(lo) + w * (np.log(hi) - np.log(lo))))


verdict = []
need = {}
for m in [m for m in METHODS[1:] if m in curve]:
    q = level_reaching(m)
    need[m] = q
    best = curve[m].min()
    if q is None:
        verdict.append(f"- **{m}**: the paper's {paper_change[m]:+.1f}% is not reached at any level up to "
                       f"{curve.index.max():g} questions per document (best {best:+.1f}%, at {curve[m].idxmin():g}).")
    else:
        fcfs_hit = float(np.interp(np.log(q), np.log(hits.index), hits["fcfs"]))
        verdict.append(f"- **{m}**: the paper's {paper_change[m]:+.1f}% needs each long document asked about {q:.0f} times "
                       f"({1 - 1 / q:.0%} of long prompts repeating a document; FCFS would then find {fcfs_hit:.1%} of prompt tokens cached, "
                       f"{m} {float(np.interp(np.log(q), np.log(hits.index), hits[m])):.1%}).")
order_paper = list(paper_change.drop("fcfs").sort_values().index)
order_ours = {q: list(curve.loc[q, order_paper].sort_values().index) for q in curve.index if q > 1}
same_order = [q for q, o in order_ours.items() if o == order_paper]
reached = [m for m, q in need.items() if q is not None]
if not reached:
    conclusion = (f"No row of Table 3 is reached at the sharing levels tested (up to {curve.index.max():g} questions per "
                  "long document): within them the prefix cache cannot explain the paper's gains in this engine.")
elif len(reached) < len(need) or not same_order:
    missing = [m for m in need if need[m] is None]
    limits = ([f"not for {', '.join(missing)}"] if missing else []) + (
        [f"at no level in the paper's order ({' < '.join(order_paper)} by completion time)"] if not same_order else [])
    ewsjf_behind = all(curve.loc[q, "ewsjf"] > curve.loc[q, [m for m in curve if m.startswith("kmeans")]].min()
                       for q in curve.index if q > 1)
    conclusion = (f"The cache can produce gains of the paper's size for {', '.join(reached)} (if its long documents were each "
                  f"asked the number of times above), but {' and '.join(limits)}; so the cache does not explain Table 3 "
                  "as a whole: the row the paper's claim rests on, EWSJF's, "
                  + ("gains less than the best k-means row at every level." if ewsjf_behind else "is not explained."))
else:
    conclusion = (f"The cache reproduces every row, in the paper's order, at {', '.join(f'{need[m]:.0f}' for m in need)} "
                  "questions per document.")
display(Markdown("\n".join(verdict) + "\n\n" + conclusion + "\n\nWhether such sharing is plausible: the paper describes "
                 "its long prompts only as long-context requests and reports no prefix-cache hit rate, so nothing in it says its "
                 "documents repeat; the levels above are what they would have to be."))

# %% [markdown]
# ## 9. The throughput claim on a real engine
# Does the order move a real engine's throughput? The mixed workload is replayed in overload
# through `vllm serve` with schedlab's scheduler class, once per policy (FCFS, SJF by prompt
# length, EWSJF as a user deploys it: its queues learnt from the requests it sees), on the local
# vLLM engine with the paper's engine scaled to it so that its binding limits keep their ratios
# (`schedlab.ewsjf.scaled`: prompts and the prefill budget times the ratio of the two KV caches,
# 256 sequences, outputs as they are). sim replays the same trace with a step-time model fitted
# to the FCFS server's own steps (no policy's throughput enters it). A replay that did not
# measure the engine (other processes busy, the front end lagging) is left out.

# %%
from schedlab.backends.served.quality import replay_flaws
from schedlab.ewsjf.report import engine_throughput, engine_verdict

def engine_study(inputs) -> None:
    """The table, figure and verdict of the engine runs, from their replays' summaries."""
    replays = pd.DataFrame([json.loads(p.read_text()) for folder in inputs["engine_runs"]
                            for p in sorted(folder.glob("rate*_rep*.json"))])
    flaws = replay_flaws(replays)
    if (flaws != "").any():
        display(replays.loc[flaws != "", ["policy", "repeat", "foreign_cpu_share", "outside_engine_share"]]
                .assign(left_out=flaws[flaws != ""]))
    clean = replays[flaws == ""]
    missing = [p for p in dict.fromkeys(replays["policy"]) if p not in set(clean["policy"])]
    if missing:  # a policy with no clean replay has no number
        print(f"No replay of {', '.join(missing)} measured the engine (see above).")
    if "fcfs" not in set(clean["policy"]):
        print("Without a clean FCFS replay there is no baseline to hold the others against.")
        return
    sims = pd.DataFrame([json.loads(p.read_text()) for p in inputs["engine_sim"]])
    table = engine_throughput(clean, sims)
    display(table.round(2))
    fig, ax = plt.subplots(figsize=(6, 3.2))
    table[["engine req/s", "sim req/s"]].rename(columns=lambda c: c.split()[0]).plot.bar(
        ax=ax, rot=0, color=["tab:blue", "tab:orange"])
    ax.errorbar(np.arange(len(table)) - 0.125, table["engine req/s"],
                yerr=[table["engine req/s"] - table["engine min"], table["engine max"] - table["engine req/s"]],
                fmt="none", color="k", capsize=3)
    ax.set(xlabel="policy", ylabel="throughput (req/s)", title="scaled mixed workload in overload")
    fig.tight_layout()
    legend_beside(fig, title="backend")
    save_figure(fig, figures_dir, "engine_throughput")
    plt.show()
    if "ewsjf" in table.index:
        display(Markdown(engine_verdict(table)))


if "engine_runs" not in inputs:
    print("Not run: `ewsjf.engine.enabled` is off in this run's config.")
else:
    engine_study(inputs)

# %% [markdown]
# ## Do the paper's findings hold here?

# %%
top = load[load["rate"] == load["rate"].max()].pivot_table(index="n", columns="method", values="throughput_tok_s")
low = load[load["rate"] == load["rate"].min()].pivot_table(index="n", columns="method", values="throughput_tok_s")
gain_top = float((top["ewsjf"] / top["fcfs"] - 1).mean() * 100)
gain_low = float((low["ewsjf"] / low["fcfs"] - 1).mean() * 100)
above = st[st["rate"] == max(rates)].set_index("method")
sjf_age = tl[(tl["task"] == "long") & (tl["rate"] == max(rates))].groupby("method")["oldest_wait_s"].max()
pd.DataFrame([
    ("EWSJF raises token throughput over FCFS, more as the rate rises", f"{gain_low:+.1f}% at the lowest rate, {gain_top:+.1f}% at the highest",
     gain_top > 5 and gain_top > gain_low),
    ("EWSJF cuts short requests' mean TTFT vs FCFS", f"{above.loc['ewsjf', 'mean_ttft_short_ms'] / above.loc['fcfs', 'mean_ttft_short_ms']:.2f}x of FCFS at {max(rates):g} req/s",
     above.loc["ewsjf", "mean_ttft_short_ms"] < above.loc["fcfs", "mean_ttft_short_ms"]),
    ("Greedy SJF starves long prompts; EWSJF's oldest long wait stays below SJF's", f"max age: SJF {sjf_age['sjf-prompt']:.0f} s, EWSJF {sjf_age['ewsjf']:.0f} s",
     sjf_age["ewsjf"] < sjf_age["sjf-prompt"]),
], columns=["claim", "here", "holds"])

# %%
# The readings below are chosen by this run's numbers.
paper_tokens = reported_ewsjf_table3().set_index("method").eval("throughput_tok_s / throughput_rps")
flat = abs(gain_top) < 1 and abs(gain_low) < 1
throughput = (
    f"**Throughput.** EWSJF's output tokens/s against FCFS: {gain_low:+.1f}% at the lowest rate, {gain_top:+.1f}% at the "
    "highest. " + (
        "It does not rise here, and cannot in this engine model: a step costs a fixed overhead plus terms linear in its "
        "prefill tokens, decodes and context, and under saturation every step is full (8,192 batched tokens), so the "
        "total busy time of a trace is the same in any admission order (unless the order changes the work, as a prefix "
        "cache can: section 8 tests that, without tuning). The paper's +30-54% must come from effects the linear step "
        "model lacks (attention cost that grows with each sequence's square length, kernel efficiency of homogeneous "
        "batches, fewer preemptions in its real engine) or from how its runs were measured"
        if flat else
        "It moves here, so the order changes the work this engine does on this trace"))
throughput += (f"; the paper's tokens per request also differ between methods ({paper_tokens['fcfs']:.1f} for FCFS, "
               f"{paper_tokens['ewsjf']:.1f} for Refine-and-Prune), which a fixed trace cannot do. FCFS's req/s is the "
               "calibration target: ours is its median over the trace seeds.")
short_cut = above.loc["ewsjf", "mean_ttft_short_ms"] < above.loc["fcfs", "mean_ttft_short_ms"]
sjf_cut = above.loc["sjf-prompt", "mean_ttft_short_ms"] < above.loc["ewsjf", "mean_ttft_short_ms"] if "sjf-prompt" in above.index else False
ages = sjf_age["ewsjf"] < sjf_age["sjf-prompt"]
latency = (f"**Latency.** At {max(rates):g} req/s EWSJF's mean TTFT of short requests is "
           f"{above.loc['ewsjf', 'mean_ttft_short_ms'] / above.loc['fcfs', 'mean_ttft_short_ms']:.2f}x FCFS's"
           + (" (the order changes who waits, at the cost of long prompts)" if short_cut else " (no gain for short requests)")
           + (f"; greedy SJF cuts it further ({above.loc['sjf-prompt', 'mean_ttft_short_ms'] / above.loc['fcfs', 'mean_ttft_short_ms']:.2f}x)" if sjf_cut else "")
           + (f", but SJF's oldest long prompt waits {sjf_age['sjf-prompt']:.0f} s against EWSJF's {sjf_age['ewsjf']:.0f} s: "
              "EWSJF's urgency term keeps admitting long prompts as they age." if ages else
              f"; EWSJF's oldest long prompt waits {sjf_age['ewsjf']:.0f} s, not less than SJF's {sjf_age['sjf-prompt']:.0f} s."))
display(Markdown(throughput + "\n\n" + latency))

# %% [markdown]
# ## Paper vs ours
# Every number of Table 3, ours from this run's queue-count study: the median over the trace
# seeds and its 5-95 % band (`fitted`: the calibration's input; `derived`: follows from it by
# arithmetic; `predicted`: neither).

# %%
print(count_line(vs_paper))
with pd.option_context("display.max_colwidth", None):
    display(vs_paper.round(2))


# %% [markdown]
# ## This run's numbers
# The paper-vs-ours table, written beside the manifest (`ewsjf.numbers.json`) for the pipeline's
# results page.

# %%
from schedlab.render import write_numbers

sharing_levels = curve.round(3).assign(fcfs_hit_rate=hits["fcfs"]).reset_index().to_dict("records")
write_numbers(manifest, paper_vs_ours=vs_paper, sharing={"levels": sharing_levels, "conclusion": conclusion})
