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
# # Paper C — throughput-optimal (RAD) and SLO-aware (SLAI) iteration-level scheduling
#
# Every scheduler is a *batch builder* on schedlab's one engine, the same one papers A, B and D
# run on (vLLM-v1-style paged KV allocation, recompute preemption, per-class token-gap
# histograms): request-level batching, prefill priority (vLLM v0 style, `prefill-priority`), Sarathi-Serve (token budget 512, FCFS or shortest-prompt-first), RAD, the appendix's
# Algorithm 2, and SLAI (budget 512, at most 128 active requests and 128 decodes per batch,
# offset fixed or dynamic). The engine model stands in for Mistral-7B-Instruct-v0.2 on one
# RTX 6000 Ada 48 GB: a roofline with the GEMM tile staircase, fitted by OLS and calibrated on
# the three batch times the SLAI artifact measured. Every scheduler comparison below is a
# prediction of that model. Requests are openchat_sharegpt4 rounds (Llama-2 token counts from
# the Sarathi-Serve artifact), paying (P99 TBT target 0.1 s) with probability p, else free
# tier (0.5 s); 35 minutes of Poisson arrivals per run, the first two minutes not measured.

# %% tags=["parameters"]
# The rule's declared inputs (written by the notebook rule); by default the last run's, as seen
# from this folder when the notebook is opened by hand.
manifest = "../results/notebooks/slai.inputs.json"
figures_dir = "../results/figures/slai"

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from schedlab.slai.model import MEASURED_CHUNKS, MEASURED_TIMES_S
from schedlab.slai.report import (FIG7, LABELS, backend_differences, capacity_gain, findings, load_sweeps,
                                  routing_capacity, routing_reading)
from schedlab.fit.chunk_times import chunk_time
from schedlab.fit.steptime import predict
from schedlab.render import read_manifest
from schedlab.report import save_figure
from schedlab.report import interval_words, legend_beside, plain_log_ticks
from schedlab.slai.report import palette as scheduler_colours
from schedlab.validation import read_steptime

sns.set_theme(style="whitegrid", context="notebook")
inputs = read_manifest(manifest)["inputs"]
sweeps = load_sweeps(inputs["sweeps"])
summary = sweeps["summary"].assign(label=lambda d: d["scheduler"].map(LABELS))
capacity = pd.concat([pd.read_parquet(p) for p in inputs["capacity"]], ignore_index=True)
params = pd.read_parquet(inputs["params"])
thr = pd.read_parquet(inputs["throughput"])
routing = pd.read_parquet(inputs["routing"])
queue = pd.read_parquet(inputs["queue"])
fit = read_steptime(inputs["fit"])
model = read_steptime(inputs["calibrated"])
profile = pd.read_parquet(inputs["profile"])
pool = pd.read_parquet(inputs["pool"])
shares = sorted(summary["share"].unique())
rates = sorted(summary["rate"].unique())
print(f"{len(summary)} runs: shares {shares}, rates {rates}, seeds {sorted(summary['seed'].unique())}")

# %% [markdown]
# ## Paper vs ours at a glance
# The numbers our spec of the paper gives: the artifact's prefill-chunk batch times and
# Sarathi-Serve (FCFS)'s serving capacity, about 1.15 req/s at every paying share. Both are
# calibration inputs, and **only the baseline's runs enter the calibration**
# (`schedlab.fit.serving`, tested in `tests/test_slai.py`): every SLAI, RAD and other number
# below is a prediction. Full table at the end.

# %%
from schedlab.counting import count_line, paper_vs_ours
from schedlab.slai.report import slai_rows

serving = model.meta["calibration"].get("serving", {})
overhead_s = serving.get("overhead_s", 0.0)
isolated_ms = dict(zip(MEASURED_CHUNKS, (chunk_time(model, np.array(MEASURED_CHUNKS)) - overhead_s) * 1e3))
WHY = {"chunk": "Three points fitted by two efficiency factors: the staircase's shape leaves this residual.",
       "capacity": "The capacity search bisects between swept rates a few times: its resolution is about 0.05 req/s; "
                   "the serving overhead is fitted to the edge at 1.15 req/s."}
vs_paper = paper_vs_ours(slai_rows(capacity, isolated_ms), why=WHY)
print(count_line(vs_paper))

# %% [markdown]
# ## 1. Workload
# The paper's Table 1 gives prompt median 1730 / P90 5696 and decode median 415 / P90 834.

# %%
pd.DataFrame({
    "source": [pool["source"].iloc[0]] * 2,
    "tokens": ["prompt", "decode"],
    "median": [pool["prompt_tokens"].median(), pool["output_tokens"].median()],
    "P90": [pool["prompt_tokens"].quantile(0.9), pool["output_tokens"].quantile(0.9)],
    "sd": [pool["prompt_tokens"].std(), pool["output_tokens"].std()],
    "rows": [len(pool)] * 2,
})

# %% [markdown]
# ## 2. The engine model: roofline with the tile staircase, OLS fit, calibration
# The roofline is additive here (compute time plus memory time): the measured batch times grow
# by ~54 µs per prompt token from 64 tokens on, while an overlapped roofline would stay flat at
# the weight-read time up to ~380 tokens. The fit's regressors are the step features, the
# prefill attention pairs and the tile-padded token count `128·ceil(tokens/128)`; the
# calibration then scales the compute-bound and memory-bound terms (inverse achieved
# efficiencies) by non-negative least squares on the three measured points. Isolated chunk
# timings miss what a serving system adds to every batch (scheduling, sampling, CPU-GPU
# synchronisation), so a fixed per-batch overhead is then fitted on the baseline's published
# serving capacity: the overhead at which Sarathi-Serve (FCFS)'s median TTFT at 1.15 req/s is
# the capacity criterion's 0.5 s. Its interval is the overhead that puts that capacity
# 0.05 req/s higher or lower (the precision the paper's figures give).

# %%
cal = model.meta["calibration"]
coef = pd.Series({k: getattr(model, k) for k in ("intercept", "n_decode", "ctx_tokens", "prefill_pairs", "tile_tokens")})
display(pd.DataFrame({
    "chunk (tokens)": MEASURED_CHUNKS, "measured (ms)": np.array(MEASURED_TIMES_S) * 1e3,
    "model (ms)": np.array(cal["achieved_s"]) * 1e3,
}).assign(**{"error %": lambda d: (d["model (ms)"] / d["measured (ms)"] - 1) * 100}))
print(f"roofline fit R² = {fit.meta['r2']:.6f} over {fit.meta['n_rows']} batch compositions; "
      f"achieved compute efficiency {1 / cal['compute']:.0%}, bandwidth efficiency {1 / cal['memory']:.0%}"
      + "".join(f"; the {name} factor is held at the hardware's peak: the additive roofline needs more than the peak "
                "there to match the measured chunks, so the model fails at that point (no kernel runs above the peak)"
                for name in cal.get("at_peak", [])))
display(coef.to_frame("calibrated coefficient (s per unit)"))
if serving:
    lo, hi = serving["overhead_interval_s"]
    print(f"serving overhead {overhead_s * 1e3:.1f} ms per batch (interval {lo * 1e3:.1f}-{hi * 1e3:.1f} ms), "
          f"fitted on {serving['baseline']} at {serving['capacity_rps']} req/s")
    display(pd.DataFrame(serving["achieved"]).round(1))

# %%
fig, axes = plt.subplots(1, 2, figsize=(12, 4))
c = np.arange(1, 1100)
axes[0].plot(c, (chunk_time(model, c) - overhead_s) * 1e3, label="calibrated model (staircase), isolated")
axes[0].plot(c, chunk_time(model, c) * 1e3, ls="--", label="with the serving overhead")
axes[0].scatter(MEASURED_CHUNKS, np.array(MEASURED_TIMES_S) * 1e3, color="k", marker="D", zorder=3, label="paper")
axes[0].set(xlabel="prefill chunk (tokens)", ylabel="batch time (ms)", title="batch time of one prefill chunk")
axes[0].legend(loc="upper left", bbox_to_anchor=(0, -0.2), frameon=False)
axes[1].scatter(profile["time_s"] * 1e3, predict(fit, profile) * 1e3, s=6)
axes[1].set(xlabel="roofline (ms)", ylabel="fitted (ms)", title="OLS fit of the roofline profile")
save_figure(fig, figures_dir, "engine_calibration")

# %% [markdown]
# ## 3. Parameter studies on the engine model (paper Fig. 6)
# (a) 100 requests of 2,048 prompt tokens and 1 output token, all waiting at t = 0 (Sarathi):
# small budgets waste the fixed cost of every batch, large ones add little; (b) KV use with n
# concurrent decode requests of 2,048-token prompts (the 48 GB card holds ~118); (c) one
# prefill chunk filling a 512-token budget beside n decodes at context 513.

# %%
fig, axes = plt.subplots(1, 3, figsize=(16, 4))
b = params[params["study"] == "budget"]
ax = axes[0]
ax.plot(b["budget"], b["p50_ttft_s"], "o-", label="median TTFT (s)")
ax.set(xscale="log", xlabel="token budget", ylabel="median TTFT (s)", title="(a) token budget")
ax2 = ax.twinx()
ax2.plot(b["budget"], b["mean_batch_ms"], "s--", color="C1", label="mean batch time (ms)")
ax2.set(ylabel="mean batch time (ms)")
ax2.grid(False)
plain_log_ticks(ax.xaxis)
ax.legend(*(sum(pair, []) for pair in zip(ax.get_legend_handles_labels(), ax2.get_legend_handles_labels())),
          loc="upper left", bbox_to_anchor=(0, -0.2), frameon=False)
k = params[params["study"] == "kv"]
axes[1].plot(k["n_decode"], k["kv_frac"] * 100, "o-")
axes[1].axhline(100, color="k", lw=0.8)
axes[1].set(xlabel="concurrent decode requests", ylabel="KV memory used (%)", title="(b) KV memory")
m = params[params["study"] == "mixed"]
axes[2].plot(m["n_decode"], m["batch_ms"], "o-", label="engine model (with the serving overhead)")
chunk_512 = MEASURED_TIMES_S[MEASURED_CHUNKS.index(512)] * 1e3
axes[2].scatter([0], [chunk_512], color="k", marker="D", zorder=3, label="paper's artifact: the 512-token chunk alone")
axes[2].set(xlabel="decodes beside one prefill (budget 512)", ylabel="batch time (ms)", title="(c) mixed batch")
axes[2].legend(loc="upper left", bbox_to_anchor=(0, -0.2), frameon=False)
fig.subplots_adjust(wspace=0.5)
save_figure(fig, figures_dir, "fig6_parameters")


# %% [markdown]
# ## 4. P99 TBT per class and median TTFT vs rate (paper Figs. 7, 11, 12)
# P99 TBT is over every token generated by the class's measured requests (a bounded-memory
# histogram, within 0.6% of the exact quantile). Dashed lines: the class targets.

# %%
def tbt_ttft_panels(share, name):
    rows = summary[(summary["share"] == share) & summary["scheduler"].isin(FIG7)]
    fig, axes = plt.subplots(1, 3, figsize=(17, 4.2), sharex=True)
    for ax, col, target, title in (
        (axes[0], "p99_tbt_ms_paying", 100, "P99 TBT, paying"),
        (axes[1], "p99_tbt_ms_free", 500, "P99 TBT, free tier"),
        (axes[2], "p50_ttft_ms", 500, "median TTFT"),
    ):
        sns.lineplot(data=rows, x="rate", y=col, hue="label", marker="o", ax=ax, errorbar=None, palette=scheduler_colours(),
                     hue_order=[LABELS[s] for s in FIG7 if s in set(rows["scheduler"])], legend=ax is axes[2])
        ax.axhline(target, ls="--", color="k", lw=0.8)
        ax.set(title=f"{title} (p = {share:.0%})", xlabel="arrival rate (req/s)", ylabel=f"{title} (ms)")
    # The paper's one number here: Sarathi-Serve (FCFS)'s median TTFT reaches 0.5 s at 1.15 req/s.
    axes[2].scatter([1.15], [500], marker="D", s=60, facecolors="none", edgecolors="k", lw=1.5, zorder=4,
                    label="paper: Sarathi (FCFS) at its capacity")
    axes[2].set_yscale("log")
    plain_log_ticks(axes[2].yaxis)
    fig.tight_layout()
    legend_beside(fig, title="scheduler")
    save_figure(fig, figures_dir, name)


for share, name in zip(shares, ("fig7_p5", "fig11_p50", "fig12_p95")):
    tbt_ttft_panels(share, name)

# %% [markdown]
# ### Fig. 7 on vLLM's real scheduler
# The same schedulers run inside vLLM's own `Scheduler` and KV cache manager
# (`schedlab.backends.vllm.plan`, backend `vllm-sim`): each step the builder plans on a view of
# vLLM's state and vLLM carries the plan out, on the same traces and step-time model as `sim`
# (shorter runs than the sweep's, at p = 5%). Per-request times agree to floating-point
# rounding in the tests, KV pressure and preemption included; the panels put both backends on
# the same axes and the table lists the largest differences of the Fig. 7 metrics.

# %%
fid = pd.concat([pd.read_parquet(p) for p in inputs["fidelity"]], ignore_index=True)
fid = fid.assign(label=fid["scheduler"].map(LABELS))
#: How each backend's line is drawn: sim's large open circles hold vllm-sim's small dots where the two agree.
BACKEND_STYLE = {"sim": {"ls": "-", "marker": "o", "ms": 9, "mfc": "none"}, "vllm-sim": {"ls": "--", "marker": ".", "ms": 7},
                 "vllm": {"ls": ":", "marker": "s", "ms": 5}}


def by_backend(runs, targets, name):
    """The Fig. 7 panels, one colour per scheduler and one line style per backend; ``targets``:
    the class TBT targets (ms) drawn as dashed lines."""
    from matplotlib.lines import Line2D

    order = [LABELS[s] for s in LABELS if s in set(runs["scheduler"])]
    colours = scheduler_colours()
    backends = [b for b in BACKEND_STYLE if b in set(runs["backend"])]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2), sharex=True)
    for ax, col, target, title in ((axes[0], "p99_tbt_ms_paying", targets.get("paying"), "P99 TBT, paying (ms)"),
                                   (axes[1], "p99_tbt_ms_free", targets.get("free"), "P99 TBT, free tier (ms)"),
                                   (axes[2], "p50_ttft_ms", None, "median TTFT (ms)")):
        for (label, backend), rows in runs.groupby(["label", "backend"]):
            line = rows.groupby("rate")[col].mean()
            ax.plot(line.index, line.to_numpy(), color=colours[label], **BACKEND_STYLE[backend])
        if target:
            ax.axhline(target, ls="--", color="k", lw=0.8)
        ax.set(title=title, xlabel="arrival rate (req/s)", ylabel=title)
    axes[2].set_yscale("log")
    plain_log_ticks(axes[2].yaxis)
    fig.tight_layout()
    entries = {label: Line2D([], [], color=colours[label], lw=2) for label in order}
    entries |= {backend: Line2D([], [], color="0.3", **BACKEND_STYLE[backend]) for backend in backends}
    legend_beside(fig, entries=entries)
    save_figure(fig, figures_dir, name)


by_backend(fid, {"paying": 100, "free": 500}, "fig7_vllm_sim")
diffs = backend_differences(fid)
top = diffs.iloc[0]
print(f"{len(fid) // 2} runs on each backend; largest difference of vllm-sim from sim: {top['diff_pct']:+.2g}% "
      f"({top['metric']}, {top['scheduler']} at {top['rate']:g} req/s; sim {top['sim']:.4g}, vllm-sim {top['vllm-sim']:.4g})")
diffs.head(10)

# %% [markdown]
# ### Fig. 7 on a real engine
# With `--config backend=vllm`, Sarathi-Serve (FCFS) and SLAI (SPF, dynamic) also serve a
# reduced sweep on a real vLLM engine (`vllm serve` with `SchedlabPlanScheduler`, the tiny
# decoder; config `slai.engine`), driven over HTTP by schedlab's client with each request's class
# and TBT target in `vllm_xargs`. Lengths are the openchat pool scaled to that engine and the
# targets to its step time; `sim` and `vllm-sim` replay the same traces with the step model
# fitted to that engine's profile. The reading below is computed from these runs.

# %%
if "engine" in inputs:
    eng = pd.concat([pd.read_parquet(p) for p in inputs["engine"]], ignore_index=True)
    eng = eng.assign(label=eng["scheduler"].map(LABELS))
    targets = {c: float(eng[f"tbt_target_ms_{c}"].iloc[0]) for c in ("paying", "free")}
    by_backend(eng, targets, "fig7_engine")
    real = eng[eng["backend"] == "vllm"].set_index(["scheduler", "rate"])
    for rate in sorted(real.index.get_level_values("rate").unique()):
        slai, sarathi = real.loc[("slai-spf-dynamic", rate)], real.loc[("sarathi-fcfs", rate)]
        print(f"{rate:g} req/s on the engine: SLAI's paying P99 TBT {slai['p99_tbt_ms_paying']:.0f} ms "
              f"({'within' if slai['tbt_ok_paying'] else 'over'} its {targets['paying']:.0f} ms target), free tier "
              f"{slai['p99_tbt_ms_free']:.0f} ms against Sarathi's {sarathi['p99_tbt_ms_free']:.0f} ms; median TTFT "
              f"{slai['p50_ttft_ms']:.0f} vs {sarathi['p50_ttft_ms']:.0f} ms.")
    busy = real["foreign_cpu_share"].max()
    print(f"Interference: other processes kept up to {busy:.0%} of the cores busy during these replays"
          + (" - the engine's numbers are not a clean measurement." if busy > 0.1 else "."))
    errors = {b: backend_differences(eng, base="vllm", other=b) for b in ("sim", "vllm-sim")}
    for b, d in errors.items():
        top = d.iloc[0]
        print(f"{b} against the engine: largest error {top['diff_pct']:+.0f}% ({top['metric']}, {top['scheduler']} "
              f"at {top['rate']:g} req/s); median |error| {d['diff_pct'].abs().median():.0f}%.")
    display(errors["sim"])
else:
    print("No real-engine runs here: they run with `snakemake --config backend=vllm`.")

# %% [markdown]
# ## 5. KV memory over time (paper Fig. 8)
# SLAI (SPF) with offsets fixed 10, fixed 5 and dynamic (5 below 96% KV use, else 10), p = 5%,
# at 1.6 req/s (the paper's peak) and at the highest rate of the sweep.

# %%
tl = sweeps["timeline"]
offsets = ["slai-spf-fixed10", "slai-spf-fixed5", "slai-spf-dynamic"]
peak_rates = sorted({min(rates, key=lambda r: abs(r - 1.6)), max(rates)})
fig, axes = plt.subplots(1, len(peak_rates), figsize=(7 * len(peak_rates), 4), squeeze=False)
for ax, rate in zip(axes[0], peak_rates):
    rows = tl[(tl["share"] == shares[0]) & (tl["rate"] == rate) & tl["scheduler"].isin(offsets) & (tl["seed"] == tl["seed"].min())]
    sns.lineplot(data=rows.assign(label=rows["scheduler"].map(LABELS), kv=rows["kv_frac"] * 100),
                 x="t_s", y="kv", hue="label", hue_order=[LABELS[s] for s in offsets], palette=scheduler_colours(), ax=ax,
                 lw=0.8)
    ax.axhline(96, ls="--", color="k", lw=0.8, label="96 %: the dynamic offset's switch")
    ax.set(xlabel="time (s)", ylabel="KV memory used (%)", title=f"{rate:g} req/s, p = {shares[0]:.0%}")
fig.tight_layout()
legend_beside(fig, title="SLAI (SPF), offset")
save_figure(fig, figures_dir, "fig8_kv_memory")
summary[(summary["share"] == shares[0]) & summary["scheduler"].isin(offsets)].pivot_table(
    index="rate", columns="scheduler", values=["peak_kv_frac", "preemptions", "p50_ttft_ms"])

# %% [markdown]
# ## 6. Median TTFT (log) and the prompt-length buckets at peak load (paper Fig. 9)
# Served: requests finished within the 35-minute arrival window. SPF serves short prompts first,
# so its median falls while long prompts wait longer.

# %%
bk = sweeps["buckets"]
peak = peak_rates[0]
fig, axes = plt.subplots(1, 3, figsize=(18, 4.2))
rows = summary[(summary["share"] == shares[0]) & summary["scheduler"].isin(FIG7)]
fig7_order = [LABELS[s] for s in FIG7 if s in set(rows["scheduler"])]
sns.lineplot(data=rows, x="rate", y="p50_ttft_ms", hue="label", hue_order=fig7_order, palette=scheduler_colours(), marker="o",
             ax=axes[0], errorbar=None, legend=False)
axes[0].set(yscale="log", xlabel="arrival rate (req/s)", ylabel="median TTFT (ms)", title=f"median TTFT, p = {shares[0]:.0%}")
b = bk[(bk["share"] == shares[0]) & (bk["rate"] == peak) & bk["scheduler"].isin(FIG7) & (bk["seed"] == bk["seed"].min())]
b = b.assign(label=b["scheduler"].map(LABELS), bucket=b["bucket"].map(interval_words))
sns.barplot(data=b, x="bucket", y="served", hue="label", hue_order=fig7_order, palette=scheduler_colours(), ax=axes[1],
            legend=False)
axes[1].set(xlabel="prompt tokens", ylabel="requests served", title=f"served by prompt length, {peak:g} req/s")
sns.barplot(data=b, x="bucket", y="mean_ttft_ms", hue="label", hue_order=fig7_order, palette=scheduler_colours(), ax=axes[2])
axes[2].set(yscale="log", xlabel="prompt tokens", ylabel="mean TTFT (ms)", title=f"mean TTFT by prompt length, {peak:g} req/s")
for ax in (axes[0], axes[2]):
    plain_log_ticks(ax.yaxis)
for ax in axes[1:]:
    ax.tick_params(axis="x", rotation=30)
fig.tight_layout()
legend_beside(fig, title="scheduler")
save_figure(fig, figures_dir, "fig9_ttft_buckets")

# %% [markdown]
# ## 7. SLAI (SPF with paying-first priority, dynamic): mean TTFT per class (paper Fig. 10)

# %%
pri = summary[summary["scheduler"] == "slai-spf-priority-dynamic"]
long = pd.concat([pri.assign(**{"user class": c}, ttft=pri[f"mean_ttft_ms_{c}"]) for c in ("paying", "free")])
g = sns.relplot(data=long, x="rate", y="ttft", hue="user class", col="share", kind="line", marker="o", errorbar=None,
                height=3.6)
g.set(yscale="log", xlabel="arrival rate (req/s)", ylabel="mean TTFT (ms)")
g.set_titles("paying share {col_name}")
save_figure(g.figure, figures_dir, "fig10_priority")

# %% [markdown]
# ## 8. Serving capacity
# The highest rate whose median TTFT is at most 0.5 s while both classes meet their P99 TBT
# target, bisected three times between the sweep's rates, or above its top rate by rates 1.25x
# higher. `at least`: still within capacity at the highest rate tried; `below`: outside it at
# the lowest.

# %%
cap = capacity.assign(label=capacity["scheduler"].map(LABELS))
display(cap.pivot_table(index="label", columns="share", values="capacity_rps"))
display(capacity_gain(capacity))
shown = cap[cap["capacity_rps"] > 0]
missing = sorted(set(cap["label"]) - set(shown["label"]))
if missing:
    print(f"no capacity within the rates tried (no bar): {', '.join(missing)}")
fig, ax = plt.subplots(figsize=(9, 4))
sns.barplot(data=shown.assign(share=shown["share"].map("{:.0%}".format)), x="share", y="capacity_rps", hue="label",
            hue_order=[LABELS[s] for s in LABELS if s in set(shown["scheduler"])], palette=scheduler_colours(), ax=ax)
ax.axhline(1.15, color="k", ls="--", label="paper: Sarathi-Serve (FCFS), 1.15 req/s")
ax.set(xlabel="paying share", ylabel="serving capacity (req/s)")
fig.tight_layout()
legend_beside(fig, title="scheduler")
save_figure(fig, figures_dir, "capacity")

# %% [markdown]
# ### How robust is SLAI's capacity gain to the calibration?
# SLAI (SPF, dynamic)'s capacity gain over Sarathi-Serve (FCFS) at 5 % paying users, with the
# serving overhead at the low end of its interval, at its estimate and at the high end (from
# the calibration stage, on the sweep's rates with three bisections).

# %%
if "sensitivity" in serving:
    sens = pd.DataFrame(serving["sensitivity"])
    fig, ax = plt.subplots(figsize=(6, 3.4))
    ax.plot(sens["overhead_s"] * 1e3, sens["gain_pct"], marker="o")
    for _, r in sens.iterrows():
        ax.annotate(f"{r['sarathi-fcfs']:.2f} -> {r['slai-spf-dynamic']:.2f} req/s", (r["overhead_s"] * 1e3, r["gain_pct"]),
                    textcoords="offset points", xytext=(6, -6), va="top", fontsize="small")
    ax.margins(x=0.3, y=0.2)  # room for the labels inside the panel
    ax.set(xlabel="serving overhead per batch (ms)", ylabel="SLAI capacity gain (%)",
           title="SLAI (SPF, dynamic) vs Sarathi-Serve (FCFS), 5 % paying")
    save_figure(fig, figures_dir, "sensitivity_capacity_gain")
    plt.show()

# %% [markdown]
# ## 9. Throughput optimality (from the paper's theory)
# Highest stable arrival rate = completions per second with a backlog of requests (every
# scheduler here serves FCFS), on three engine models: the calibrated one; the theory's batch
# time (the same staircase, per-token and attention terms but no fixed per-batch cost); and
# the theory's batch time with KV memory for `tile_col` = 128 of the longest requests.
# Total work is the same under every schedule except tile padding, so the theory's optimum is
# a schedule that never pads: RAD with long cycles reaches it when memory lets 128 requests
# decode together, while on the calibrated model its prefill-only batches of 128 tokens each
# pay the fixed cost (the weight read, ~15 ms), and with N = 128 every cycle ends with a tail
# of shrinking decode batches. Sarathi-Serve's full 512-token batches pad nothing either.

# %%
display(thr.pivot_table(index="scheduler", columns="engine_model", values="saturation_rps"))
g = sns.catplot(data=thr.assign(label=thr["scheduler"].map(LABELS)), x="engine_model", y="saturation_rps",
                hue="label", kind="bar", palette=scheduler_colours(), height=4, aspect=2.2)
g.set(xlabel="engine model", ylabel="highest stable rate (req/s)")
g.legend.set_title("scheduler")
save_figure(g.figure, figures_dir, "throughput_optimality")

# %%
q = queue[queue["engine_model"] == "calibrated"]
g = sns.relplot(data=q.assign(label=q["scheduler"].map(LABELS), load=q["factor"].map(lambda f: f"{f:g} x capacity")),
                x="t_s", y="waiting", hue="label", col="load", kind="line", palette=scheduler_colours(), height=3.8, aspect=1.4,
                lw=0.9)
g.set(xlabel="time (s)", ylabel="waiting requests")
g.set_titles("{col_name}")
g.legend.set_title("scheduler")
save_figure(g.figure, figures_dir, "queue_around_capacity")

# %% [markdown]
# ### Routing across identical engines
# The paper proves that, under its conditions, random routing across identical nodes keeps the
# system throughput-optimal. Clusters of 1 to 8 engines of the calibrated model (`schedlab
# cluster`'s event loop: every engine is the one above, each request routed at its arrival),
# each running Sarathi-Serve (FCFS) or RAD, are offered Poisson arrivals at multiples of one
# engine's saturation throughput (the backlog runs above) per engine, routed at random or to the
# engine with the fewest outstanding requests (join the shortest queue). Left: the rate served
# per engine at the highest load, as a share of one engine's at that load; right: the median
# TTFT at the highest load below saturation.

# %%
cap = routing_capacity(routing)
below = routing[routing["factor"] < 1]
below = below[below["factor"] == below["factor"].max()] if not below.empty else below
fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
for (scheduler, router), rows in cap.groupby(["scheduler", "router"], sort=False):
    axes[0].plot(rows["replicas"], rows["per_single"], marker="o", label=f"{LABELS.get(scheduler, scheduler)}, {router}")
for (scheduler, router), rows in below.groupby(["scheduler", "router"], sort=False):
    axes[1].plot(rows["replicas"], rows["p50_ttft_ms"] / 1e3, marker="o", label=f"{LABELS.get(scheduler, scheduler)}, {router}")
axes[0].set(xlabel="engines", ylabel="served per engine / one engine's", xscale="log", xticks=sorted(cap["replicas"].unique()),
            title=f"capacity per engine at {cap['factor'].max():g}x saturation")
axes[1].set(xlabel="engines", ylabel="median TTFT (s)", xscale="log", yscale="log", xticks=sorted(cap["replicas"].unique()),
            title=f"latency at {below['factor'].max():g}x saturation" if not below.empty else "no load below saturation")
for ax in axes:
    ax.xaxis.set_major_formatter(plt.ScalarFormatter())
axes[1].legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small", frameon=False)
fig.tight_layout()
save_figure(fig, figures_dir, "routing_capacity")
plt.show()
for sentence in routing_reading(routing):
    print(sentence)

# %% [markdown]
# ## 10. The paper's findings on this engine model

# %%
findings(summary, capacity, share=shares[0])

# %% [markdown]
# **Absolute rates.** The calibrated model reproduces the measured prefill-chunk times and,
# through the fitted per-batch serving overhead, Sarathi-Serve (FCFS)'s published capacity;
# the other schedulers' capacities and latencies are predictions of that model.
#
# **SLAI and Sarathi on vLLM's scheduler.** Not adapted yet: schedlab's vLLM scheduler class
# (`backends/vllm/scheduler.py`) orders the waiting queue and names preemption victims, but the
# decode-deferral work it builds on has not landed. vLLM 0.32.0's `Scheduler` already skips a
# running request's decode while `request.next_decode_eligible_step` is ahead of its step
# counter. An SLAI adapter needs (1) to set that field each step for the non-critical decodes it
# holds back (and leave it for critical ones, earliest last schedulable time first, up to the
# decode limit); (2) each request's previous-token time and TBT target (the target through
# `SamplingParams.extra_args`, as paper A passes its job size); (3) a running mean of step times
# for the offset and the KV cache manager's usage for the dynamic offset; (4) a waiting queue
# ordered FCFS, SPF or paying-first, with started (chunked) prefills kept ahead of new ones, as
# vLLM's running list already does. Sarathi-Serve is vLLM with chunked prefill and
# `max_num_batched_tokens` = 512 plus the same waiting-queue orders.

# %% [markdown]
# ## Paper vs ours
# Every number of the paper this notebook reproduces, ours from this run (both calibration
# inputs; the paper's treatment numbers are predictions the notebook shows above).

# %%
print(count_line(vs_paper))
with pd.option_context("display.max_colwidth", None):
    display(vs_paper.round(2))


# %% [markdown]
# ## This run's numbers
# The paper-vs-ours table and the routing study's reading, written beside the manifest
# (`slai.numbers.json`) for the pipeline's
# results page.

# %%
from schedlab.render import write_numbers

write_numbers(manifest, paper_vs_ours=vs_paper, routing=routing_reading(routing))
