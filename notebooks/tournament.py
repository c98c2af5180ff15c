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
from schedlab.report import legend_beside, plain_log_ticks
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
import textwrap

from matplotlib.lines import Line2D

at_top = table[table["load"] == top].assign(p50_s=lambda d: d["p50_e2el_ms"] / 1e3, p99_s=lambda d: d["p99_e2el_ms"] / 1e3,
                                           paper=lambda d: d["paper"].fillna("schedlab"))
# A paper's colour (its extension A+ a lighter shade of A's), from the colour-blind palette.
cb = sns.color_palette("colorblind", 10)
PAPER_COLOURS = {"A": cb[0], "A+": cb[9], "B": cb[2], "C": cb[3], "D": cb[4], "schedlab": (0.2, 0.2, 0.2)}
PAPERS = list(dict.fromkeys([*PAPER_COLOURS, *at_top["paper"]]))
PAPER_COLOURS |= dict(zip(PAPERS[len(PAPER_COLOURS):], cb[5:9]))
KIND_MARKERS = {"queue": "o", "batch": "X"}


def pareto_panel(ax, g, name):
    """One workload: every entrant by paper (colour) and kind (marker), the front joined and its
    members named (entrants at the same point named together). The view holds the front, FCFS
    and every entrant within twice their spread of them; one farther out is drawn on the edge it
    lies past, as an arrowhead pointing at it, and named in the title."""
    front = g[g["pareto"]].sort_values("p50_s")
    core = pd.concat([front, g[g["policy"] == "fcfs"]])
    near = pd.Series(True, index=g.index)
    for col in ("p50_s", "p99_s"):
        low, high = core[col].min(), core[col].max()
        near &= g[col] <= high + 2 * max(high - low, 0.02 * high)
    view = {}
    for col in ("p50_s", "p99_s"):
        low, high = g.loc[near, col].min(), g.loc[near, col].max()
        pad = 0.08 * max(high - low, 0.02 * high)
        view[col] = (max(low - pad, 0), high + pad)
    for (paper, kind), rows in g[near].groupby(["paper", "kind"]):
        ax.scatter(rows["p50_s"], rows["p99_s"], color=PAPER_COLOURS[paper], marker=KIND_MARKERS.get(kind, "o"), s=60,
                   zorder=3, edgecolors="white", lw=0.5)
    far = g[~near].sort_values("p50_s")
    for r in far.itertuples():
        right, above = r.p50_s > view["p50_s"][1], r.p99_s > view["p99_s"][1]
        ax.scatter(min(r.p50_s, view["p50_s"][1]), min(r.p99_s, view["p99_s"][1]), color=PAPER_COLOURS[r.paper],
                   marker=(3, 0, -45) if right and above else ">" if right else "^", s=70, clip_on=False, zorder=3)
    ax.plot(front["p50_s"], front["p99_s"], color="0.3", lw=1, zorder=2)
    names = front.groupby(["p50_s", "p99_s"], sort=False)["policy"].agg(", ".join).reset_index()
    middle = sum(view["p50_s"]) / 2
    labels = [ax.text(r.p50_s, r.p99_s, textwrap.fill(r.policy, 30, max_lines=3, placeholder=" …"), fontsize=7, zorder=4,
                      ha="right" if r.p50_s > middle else "left") for r in names.itertuples()]
    ax.set(xlim=view["p50_s"], ylim=view["p99_s"])
    title = name if far.empty else name + "\n" + textwrap.fill("beyond the edges: " + ", ".join(far["policy"]), 42)
    ax.set_title(title, fontsize=9)
    # Front labels moved apart from each other and from the points, a line back to their point.
    adjust_text(labels, ax=ax, arrowprops={"arrowstyle": "-", "color": "0.5", "lw": 0.5})


panels = list(dict.fromkeys(at_top["workload"]))
columns = 4
rows_n = -(-len(panels) // columns)
fig, axes = plt.subplots(rows_n, columns, figsize=(4 * columns, 3.9 * rows_n), squeeze=False)
for ax, name in zip(axes.flat, panels):
    pareto_panel(ax, at_top[at_top["workload"] == name], name)
    ax.set(xlabel="P50 E2EL (s)", ylabel="P99 E2EL (s)")
for ax in axes.flat[len(panels):]:
    ax.set_visible(False)
fig.suptitle(f"Median vs tail end-to-end latency at load {top}: the Pareto front of each workload", y=1.0)
fig.tight_layout()
entries = {f"paper {p}" if p != "schedlab" else "schedlab": Line2D([], [], ls="", marker="o", color=c, ms=7)
           for p, c in PAPER_COLOURS.items() if p in set(at_top["paper"])}
entries |= {f"{kind} scheduler": Line2D([], [], ls="", marker=m, color="0.3", ms=7) for kind, m in KIND_MARKERS.items()}
entries["Pareto front"] = Line2D([], [], color="0.3", lw=1)
entries["beyond the edge (named above the panel)"] = Line2D([], [], ls="", marker=">", color="0.3", ms=7)
legend_beside(fig, entries=entries)
save_figure(fig, figures_dir, "pareto")

# %% [markdown]
# ## 3. SLO attainment and G across workloads and loads

# %%
# Both in percent, so every number is at most three digits and its cell is sized to hold it.
at_load = table[table["load"] == top]
shares = {"SLO attainment (%)": at_load.pivot_table(index="policy", columns="workload", values="slo_attainment") * 100}
g_wide = at_load.pivot_table(index="policy", columns="workload", values="g_per_s")
shares["G, % of the workload's best"] = g_wide / g_wide.max() * 100
n_rows, n_cols = g_wide.shape
fig, axes = plt.subplots(1, 2, figsize=(2 * 0.55 * n_cols + 3.5, 0.32 * n_rows + 2.4), sharey=True)
for ax, (title, values) in zip(axes, shares.items()):
    sns.heatmap(values[list(dict.fromkeys(at_load["workload"]))], annot=True, fmt=".0f", annot_kws={"fontsize": 8},
                cmap="viridis", vmin=0, vmax=100, cbar=False, ax=ax)
    ax.set(title=title, xlabel="", ylabel="")
    ax.tick_params(axis="x", rotation=90)
    ax.grid(False)
axes[0].set_ylabel("entrant")
fig.suptitle(f"Load {top}; the table above gives G itself")
fig.tight_layout()
save_figure(fig, figures_dir, "slo_g_heatmap")

# %%
# Colour by paper, and within a paper a marker and dashes per entrant: fifteen entrants stay apart.
played = table.assign(paper=table["paper"].fillna("schedlab"))
entrants = played[["paper", "policy"]].drop_duplicates().sort_values("paper", key=lambda p: p.map(PAPERS.index), kind="stable")
style = {}
for paper, members in entrants.groupby("paper", sort=False):
    for k, policy in enumerate(members["policy"]):
        style[policy] = {"color": PAPER_COLOURS[paper], "marker": "osD^vPX*"[k % 8], "ls": ("-", "--", ":", "-.")[k % 4]}
fig, axes = plt.subplots(rows_n, columns, figsize=(3.4 * columns, 2.8 * rows_n), sharex=True, sharey=True, squeeze=False)
for ax, name in zip(axes.flat, panels):
    for policy, rows in played[played["workload"] == name].sort_values("load").groupby("policy", sort=False):
        ax.plot(rows["load"], rows["slo_attainment"], ms=5, label=f"{policy} ({rows['paper'].iloc[0]})", **style[policy])
    ax.set_title(name)
for ax in axes.flat[len(panels):]:
    ax.set_visible(False)
    axes.flat[list(axes.flat).index(ax) - columns].xaxis.set_tick_params(labelbottom=True)  # the panel above shows the ticks
for ax in axes[:, 0]:
    ax.set_ylabel("SLO attainment")
fig.supxlabel("load: offered rate as a fraction of FCFS's capacity on a backlog of the same requests")
fig.tight_layout()
legend_beside(fig, entries={f"{p} ({paper})": Line2D([], [], ms=5, **style[p]) for paper, p in entrants.itertuples(index=False)},
              title="entrant (paper)")
save_figure(fig, figures_dir, "attainment_vs_load")

# %% [markdown]
# ## 4. Who wins where
# Mean rank (1 = best) over every workload and load, on G and on P99 E2EL, and the winner of
# each workload at the highest load beside FCFS.

# %%
mean_rank = pd.DataFrame({m: ranks(table, m).mean() for m in ("g_per_s", "p99_e2el_ms", "p50_e2el_ms")})
fig, ax = plt.subplots(figsize=(8, 0.3 * len(mean_rank) + 1.5))
mean_rank.sort_values("g_per_s").rename(columns={"g_per_s": "G", "p99_e2el_ms": "P99 E2EL", "p50_e2el_ms": "P50 E2EL"}).plot.barh(ax=ax)
ax.set(xlabel="mean rank within (workload, load); lower is better", ylabel="entrant")
ax.invert_yaxis()
ax.legend(title="ranked by", loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
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
    plain_log_ticks(*(ax.xaxis for ax in grid.axes.flat))
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
grid = sns.relplot(data=at.rename(columns={"policy": "scheduler per replica"}), x="p50_s", y="p99_s", hue="router",
                   style="scheduler per replica", col="workload", s=70,
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
