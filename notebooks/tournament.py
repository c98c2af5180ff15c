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
# # The tournament: every paper's schedulers on shared workloads
#
# No paper compares across these families, so this is schedlab's own result. Every policy
# from the four papers plays every workload it has a meaning on:
#
# | paper | entrants | scheduler |
# |---|---|---|
# | A (duration-aware ASR) | `fcfs`, `sjf`, `hrrn` (size = audio duration x kappa; on LLM traces, the request's `max_tokens`) | continuous batching |
# | A+ (schedlab's extension of A) | `adaptive`: FCFS while the queue is shallow, SJF when it is deep, FCFS again when the P90 wait grows too long (see the ASR extensions notebook) | continuous batching |
# | B (EWSJF) | `sjf-prompt`, `ewsjf` (by prompt length), `ewsjf-uncached` (its score costs the tokens the prefix cache does not hold) | continuous batching |
# | schedlab | `sjf-uncached`: shortest job first by the prompt tokens the prefix cache does not hold | continuous batching |
# | C (Sarathi-Serve, RAD, SLAI) | `request-level`, `prefill-priority` (vLLM v0 style), `sarathi-fcfs`, `sarathi-spf`, `rad`, `slai-spf-dynamic` | batch builders |
# | D (SLO-aware SA) | `slo-sa`: the mapper re-planning the 10 oldest waiting requests whenever the waiting set changes | continuous batching |
#
# **One calibrated engine per modality.** ASR workloads run on paper A's Whisper-large-v3 /
# A100-40GB model (calibrated on the paper's FCFS baseline); there only paper A's policies have
# a meaning (Whisper prompts are 4 tokens, so prompt-length orders, prefill chunking and the LLM
# latency predictor say nothing). LLM workloads run on paper C's Mistral-7B / RTX 6000 Ada model
# (calibrated on measured chunk times). Every entrant plays on the one engine
# (`schedlab.engine`): waiting-queue policies inside vLLM v1's continuous batching, batch
# builders as its siblings, with the same step-time model, KV capacity, vLLM-style KV allocation
# and recompute preemption. Paper D's predictor is fitted to that step-time model.
#
# **Workloads.** LibriSpeech and the uniform split (ASR, Poisson); paper B's 80/20 short/long
# prompt mix; paper C's openchat pool with `paying`/`free` classes; the Azure 2023 code and
# conversation traces and the Mooncake conversation trace replayed with their real timestamps,
# time-scaled to each load; multi-turn conversations (each turn's prompt holds the earlier turns
# and answers). Mooncake and the conversations also play with vLLM's prefix cache on (section
# 5). A load is the offered rate as a fraction of the rate FCFS sustains on a backlog of the same
# requests (without the cache); replayed traces keep their bursts, so they queue at lower loads
# than Poisson ones.
#
# **Metrics.** P50/P90/P99 TTFT and E2EL, P99 TBT (every token gap), throughput, SLO attainment
# (a request is on time when it meets every target that applies: chat TTFT 10 s and TPOT 50 ms,
# code e2e 30 s — paper D's; openchat's class TBT as the TPOT target — paper C's; ASR e2e 2 s
# on LibriSpeech and 4 s on the uniform split) and paper D's G = requests on time per second
# of summed end-to-end latency.

# %% tags=["parameters"]
# The rule's declared inputs (written by the notebook rule); by default the last run's, as seen
# from this folder when the notebook is opened by hand.
manifest = "../results/notebooks/tournament.inputs.json"
figures_dir = "../results/figures/tournament"

# %%
from pathlib import Path

import matplotlib.pyplot as plt
from adjustText import adjust_text
from matplotlib.ticker import FuncFormatter, NullFormatter
import pandas as pd
import seaborn as sns
from IPython.display import Markdown, display

from schedlab.render import read_manifest
from schedlab.report import save_figure
from schedlab.tournament.report import cluster_reading, metrics_table, ranks, winners

sns.set_theme(style="whitegrid", context="notebook")
Path(figures_dir).mkdir(parents=True, exist_ok=True)
inputs = read_manifest(manifest)["inputs"]
table = pd.read_parquet(inputs["table"])
cluster = pd.read_parquet(inputs["cluster"])
workloads = list(dict.fromkeys(table["workload"]))
loads = sorted(table["load"].unique())
top = max(loads)
print(f"{len(table)} matches: {len(workloads)} workloads x loads {loads}; "
      f"{table['policy'].nunique()} entrants; requests per trace {sorted(table['offered'].unique())}")
table[["workload", "modality", "capacity_rps"]].drop_duplicates().round(3)

# %% [markdown]
# ## 1. The table
# Every match, one row each (also saved as `tournament_table.csv` beside the figures). Bold
# in the Pareto column: no other entrant on that workload and load has both a lower median and
# a lower P99 end-to-end latency.

# %%
shown = metrics_table(table)
shown.to_csv(Path(figures_dir) / "tournament_table.csv", index=False)
fmt = {c: "{:.0f}" for c in shown.columns if c.endswith("_ms")}
fmt.update({"throughput_rps": "{:.2f}", "slo_attainment": "{:.3f}", "g_per_s": "{:.4f}"})
shown[shown["load"] == top].style.format(fmt).hide(axis="index")

# %% [markdown]
# ## 2. Median versus tail: the Pareto plot
# One panel per workload at the highest load; the line joins the Pareto front.

# %%
at_top = table[table["load"] == top].assign(p50_s=lambda d: d["p50_e2el_ms"] / 1e3, p99_s=lambda d: d["p99_e2el_ms"] / 1e3)
grid = sns.relplot(data=at_top, x="p50_s", y="p99_s", hue="paper", style="kind", col="workload",
                   col_wrap=4, s=70, facet_kws={"sharex": False, "sharey": False}, height=3.2)
grid.set_titles("{col_name}")
for ax, name in zip(grid.axes.flat, grid.col_names):
    g = at_top[at_top["workload"] == name]
    f = g[g["pareto"]].sort_values("p50_s")
    ax.plot(f["p50_s"], f["p99_s"], color="0.3", lw=1, zorder=0)
    labels = [ax.text(r["p50_s"], r["p99_s"], r["policy"], fontsize=6) for _, r in g.iterrows()]
    for axis, col in ((ax.xaxis, "p50_s"), (ax.yaxis, "p99_s")):
        if g[col].max() > 10 * g[col].min():  # log only where the entrants span decades
            (ax.set_xscale if axis is ax.xaxis else ax.set_yscale)("log")
            axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            axis.set_minor_formatter(NullFormatter())
    # Labels moved apart from each other and from the points, with a line back to their point.
    adjust_text(labels, ax=ax, arrowprops={"arrowstyle": "-", "color": "0.5", "lw": 0.5})
grid.set_axis_labels("P50 E2EL (s)", "P99 E2EL (s)")
grid.fig.suptitle(f"Median vs tail end-to-end latency at load {top}", y=1.02)
save_figure(grid.fig, figures_dir, "pareto")

# %% [markdown]
# ## 3. SLO attainment and G across workloads and loads

# %%
fig, axes = plt.subplots(1, 2, figsize=(14, 0.45 * table["policy"].nunique() + 2))
for ax, metric, title in zip(axes, ("slo_attainment", "g_per_s"), ("SLO attainment", "G (on time per s of summed e2e)")):
    pivot = table[table["load"] == top].pivot_table(index="policy", columns="workload", values=metric)
    scaled = pivot / pivot.max() if metric == "g_per_s" else pivot
    sns.heatmap(scaled, annot=pivot, fmt=".2f" if metric == "slo_attainment" else ".3g", cmap="viridis",
                ax=ax, cbar=False, vmin=0, vmax=1)
    ax.set_title(f"{title}, load {top}" + (" (colour: share of the workload's best)" if metric == "g_per_s" else ""))
fig.tight_layout()
save_figure(fig, figures_dir, "slo_g_heatmap")

# %%
grid = sns.relplot(data=table, x="load", y="slo_attainment", hue="policy", style="paper", col="workload",
                   col_wrap=4, kind="line", marker="o", height=3)
grid.set_axis_labels("load (fraction of FCFS backlog capacity)", "SLO attainment")
grid.set_titles("{col_name}")
save_figure(grid.fig, figures_dir, "attainment_vs_load")

# %% [markdown]
# ## 4. Who wins where
# Mean rank (1 = best) over every workload and load, on G and on P99 E2EL, and the winner of
# each workload at the highest load beside FCFS.

# %%
mean_rank = pd.DataFrame({m: ranks(table, m).mean() for m in ("g_per_s", "p99_e2el_ms", "p50_e2el_ms")})
fig, ax = plt.subplots(figsize=(8, 4))
mean_rank.sort_values("g_per_s").plot.barh(ax=ax)
ax.set_xlabel("mean rank within (workload, load); lower is better")
ax.invert_yaxis()
save_figure(fig, figures_dir, "mean_rank")
mean_rank.sort_values("g_per_s").round(2)

# %%
best_g = winners(table[table["load"] == top], "g_per_s")
best_tail = winners(table[table["load"] == top], "p99_e2el_ms")
lines = [f"- **{r.workload}**: best G `{r.policy}` (paper {r.paper}) {r.g_per_s:.3g}/s vs FCFS {r.fcfs:.3g}/s; "
         f"best P99 E2EL `{t.policy}` {t.p99_e2el_ms / 1e3:.1f} s vs FCFS {t.fcfs / 1e3:.1f} s"
         for r, t in zip(best_g.itertuples(), best_tail.itertuples())]
display(Markdown(f"At load {top}:\n\n" + "\n".join(lines)))

# %% [markdown]
# ## 5. The prefix cache on and off
# The workloads whose prompts share tokens play twice: with vLLM's prefix cache off (`mooncake`,
# `multi-turn`) and on (`-cache`), on the very same traces (loads are fractions of FCFS's
# capacity without the cache in both). With the cache a prompt's cached prefix is not computed
# again, so the engine does less work: its FCFS capacity on a backlog rises (`capacity on`). The
# table gives each entrant's hit rate (prompt tokens found cached at first admission, as vLLM's
# counters count them) and its P50 TTFT, P99 E2EL and G with the cache against without, at the
# highest load; `sjf-uncached` and `ewsjf-uncached` order by the tokens the cache does not hold
# (without a cache they are SJF by prompt and EWSJF).

# %%
cache_pairs = [w for w in workloads if f"{w}-cache" in workloads]
cache_table = pd.DataFrame()
if cache_pairs:
    rows = []
    for w in cache_pairs:
        off = table[(table["workload"] == w) & (table["load"] == top)].set_index("policy")
        on = table[(table["workload"] == f"{w}-cache") & (table["load"] == top)].set_index("policy")
        for policy in on.index.intersection(off.index):
            rows.append({"workload": w, "policy": policy, "paper": on.at[policy, "paper"],
                         "capacity off": off.at[policy, "capacity_rps"], "capacity on": on.at[policy, "capacity_cached_rps"],
                         "hit rate": on.at[policy, "prefix_cache_hit_rate"],
                         "P50 TTFT off (s)": off.at[policy, "p50_ttft_ms"] / 1e3, "P50 TTFT on (s)": on.at[policy, "p50_ttft_ms"] / 1e3,
                         "P99 E2EL off (s)": off.at[policy, "p99_e2el_ms"] / 1e3, "P99 E2EL on (s)": on.at[policy, "p99_e2el_ms"] / 1e3,
                         "G off": off.at[policy, "g_per_s"], "G on": on.at[policy, "g_per_s"]})
    cache_table = pd.DataFrame(rows)
    cache_table.to_csv(Path(figures_dir) / "prefix_cache_table.csv", index=False)
    both = pd.concat([table[table["workload"].isin(cache_pairs)].assign(cache="off"),
                      table[table["workload"].isin([f"{w}-cache" for w in cache_pairs])]
                      .assign(cache="on", workload=lambda d: d["workload"].str.removesuffix("-cache"))])
    both = both.assign(p50_ttft_s=both["p50_ttft_ms"] / 1e3)
    grid = sns.catplot(data=both[both["load"] == top], x="p50_ttft_s", y="policy", hue="cache", col="workload",
                       kind="point", linestyle="none", dodge=0.3, height=0.3 * both["policy"].nunique() + 1.5,
                       aspect=1.2, sharex=False, log_scale=(True, False))
    grid.set_titles("{col_name}")
    grid.set_axis_labels(f"P50 TTFT (s, log scale), load {top} of the capacity without the cache", "")
    grid.fig.suptitle("The prefix cache off and on: the same traces", y=1.02)
    save_figure(grid.fig, figures_dir, "prefix_cache")
    display(cache_table.round(3))
    lines = []
    for w, g in cache_table.groupby("workload", sort=False):
        g = g.set_index("policy")
        best_off, best_on = g["P50 TTFT off (s)"].idxmin(), g["P50 TTFT on (s)"].idxmin()
        lines.append(f"- **{w}**: {g['hit rate'].median():.0%} of prompt tokens found cached (median over entrants); "
                     f"FCFS's capacity {g['capacity off'].iloc[0]:.2f} req/s without the cache, "
                     f"{g['capacity on'].iloc[0]:.2f} with it; the lowest P50 TTFT is {best_off}'s without the "
                     f"cache and {best_on}'s with it.")
    display(Markdown(f"At load {top}:\n\n" + "\n".join(lines)))

# %% [markdown]
# ## 6. A cluster of engines: routers and per-replica schedulers
# The cluster study plays routers against per-replica schedulers on LLM workloads: each run
# serves one trace on a cluster of identical engines (the tournament's LLM engine), every
# replica running the same scheduler, every request routed at its arrival (`schedlab
# cluster`). Loads are fractions of the replicas' summed FCFS capacity. The table gives every
# run at the highest load and the largest cluster (also saved as `cluster_table.csv`); the
# figure puts median against tail end-to-end latency, one panel per workload, colour by router
# and marker by scheduler, the line joining the Pareto front.

# %%
c_top, c_big = cluster["load"].max(), cluster["replicas"].max()
cluster.to_csv(Path(figures_dir) / "cluster_table.csv", index=False)
shown = cluster[(cluster["load"] == c_top) & (cluster["replicas"] == c_big)]
cols = ["workload", "router", "policy", "p50_ttft_ms", "p50_e2el_ms", "p99_e2el_ms", "p99_itl_ms", "slo_attainment",
        "prefix_cache_hit_rate", "pareto"]
display(shown[cols].sort_values(["workload", "p99_e2el_ms"]).style.format(
    {c: "{:.0f}" for c in cols if c.endswith("_ms")} | {"slo_attainment": "{:.3f}", "prefix_cache_hit_rate": "{:.2f}"})
    .hide(axis="index"))
at = shown.assign(p50_s=shown["p50_e2el_ms"] / 1e3, p99_s=shown["p99_e2el_ms"] / 1e3)
grid = sns.relplot(data=at, x="p50_s", y="p99_s", hue="router", style="policy", col="workload", s=70,
                   facet_kws={"sharex": False, "sharey": False}, height=3.4)
grid.set_titles("{col_name}")
for ax, name in zip(grid.axes.flat, grid.col_names):
    f = at[(at["workload"] == name) & at["pareto"]].sort_values("p50_s")
    ax.plot(f["p50_s"], f["p99_s"], color="0.3", lw=1, zorder=0)
grid.set_axis_labels("P50 E2EL (s)", "P99 E2EL (s)")
grid.fig.suptitle(f"{c_big} replicas at load {c_top}: routers x per-replica schedulers", y=1.02)
save_figure(grid.fig, figures_dir, "cluster_pareto")
display(Markdown("\n".join(f"- {line}" for line in cluster_reading(cluster))))

# %% [markdown]
# ## 7. Reading the results
# - On ASR traffic paper A's duration-aware orders (and the adaptive switch) are the whole field; SJF gains the median at
#   high load and pays in the P99, HRRN sits between (paper A's claim, here on the tournament's
#   SLO metrics).
# - On LLM traffic the largest differences come from *batch composition*, not admission order:
#   chunked prefill (Sarathi, SLAI) keeps P99 TBT near one decode step where vLLM-style prefill
#   priority stalls running decodes for whole prompts; request-level batching and RAD's
#   long cycles keep token gaps short but queue new requests behind whole batches or cycles,
#   and lose on TTFT, E2EL and SLO attainment.
# - Ordering by a size signal (SJF by `max_tokens`, SJF by prompt, EWSJF, Sarathi-SPF) helps the
#   median where short and long requests mix and the queue is deep (Azure code, Mooncake); on
#   the Azure conversation trace and openchat, time to first token is a small part of the
#   end-to-end latency, so the admission orders nearly coincide there.
# - `slo-sa` re-plans only the oldest 10 waiting requests (paper D's decision size); with deep
#   queues those are all late already, so it stays close to FCFS: paper D's mapper is a batch
#   decision, and using it online needs a larger window or admission control.
# - Throughput is nearly equal among work-conserving entrants at a given load: it is the
#   offered rate until saturation.


# %% [markdown]
# ## This run's numbers
# The winners at the highest load, the mean ranks and the cluster study's reading, written beside the manifest
# (`tournament.numbers.json`) for the pipeline's results page.

# %%
from schedlab.render import write_numbers

write_numbers(manifest, load=top, best_g=best_g, best_p99=best_tail, mean_rank=mean_rank,
              prefix_cache=cache_table.to_dict("records"), cluster=cluster_reading(cluster))
