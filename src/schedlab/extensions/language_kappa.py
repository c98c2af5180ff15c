"""Per-language kappa chosen at the endpoint vs one global kappa, on a multilingual mix.

Both estimators size a request as ``n_hat = floor(audio_duration_s * kappa)``
(:func:`schedlab.estimate.job_sizes`):

- ``per-language``: ``kappa[language]``, each fitted (:func:`fit_kappa`) on its language's pool;
- ``global``: the English kappa for every request. That is what a deployment without language
  routing runs: the paper's fit, and the language :func:`size_estimate` assumes. Any single
  kappa orders SJF's queue, and HRRN's ``wait / size``, exactly as the raw duration does (up to
  floor ties), so a pooled fit over the mix would schedule the same way.

Non-English pools are real (FLEURS) when a table is given, else stand-ins at a swept token-rate
ratio (:mod:`schedlab.workload.multilingual`); every row says which (``source``).
"""

from __future__ import annotations

import math
from dataclasses import replace
from collections.abc import Iterable, Iterator, Mapping
from types import MappingProxyType

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from schedlab.errors import SchedlabError
from schedlab.estimate import job_sizes
from schedlab.fit.kappa import fit_kappa
from schedlab.metrics import latency_columns
from schedlab.engine import Arena
from schedlab.simulate import run_summary
from schedlab.workload.arrivals import arrival_times
from schedlab.workload.multilingual import check_shares, mix_trace, stand_in_pool, utterance_pool

ESTIMATES = ("per-language", "global")
SHARES = MappingProxyType({"en": 0.5, "hi": 0.5})
RATIOS = (1.0, 1.5, 2.0, 3.0)
RATES = (4.0, 8.0, 12.0, 14.0, 16.0, 18.0, 20.0, 22.0, 25.0)
GROUPS = ("en", "non_en")

Tables = Mapping[str, "pd.DataFrame | str"]


def kappa_for(
    languages: Iterable[str], kappa: Mapping[str, float], *, default: float | None = None
) -> dict[str, float]:
    """The kappa each language is sized with: its own, else ``default``.

    A language with neither is an error: :func:`size_estimate` would silently size it by its
    ``max_tokens`` (in simulation, its true length).
    """
    out = {}
    for lang in languages:
        k = kappa.get(lang, default)
        if k is None:
            raise SchedlabError(f"no kappa for language {lang!r} and no default kappa")
        out[lang] = float(k)
    return out


def language_pools(
    utterances: pd.DataFrame, shares: Mapping[str, float], ratio: float, tables: Tables | None = None
) -> tuple[dict[str, pd.DataFrame], str]:
    """English (the utterances) and each language of ``shares``: its real table from
    ``tables`` when one is given (a string there says why not), else a stand-in at ``ratio``.
    Also the source label: ``stand-in`` if any pool is one, else ``fleurs`` (else
    ``librispeech`` for English alone)."""
    tables = tables or {}
    pools = {"en": utterance_pool(utterances)}
    source = "librispeech"
    for lang in shares:
        if lang == "en":
            continue
        table = tables.get(lang)
        if isinstance(table, pd.DataFrame):
            pools[lang] = utterance_pool(table)
            source = "fleurs" if source == "librispeech" else source
        else:
            pools[lang] = stand_in_pool(utterances, ratio)
            source = "stand-in"
    return pools, source


def estimator_kappas(pools: Mapping[str, pd.DataFrame]) -> dict[str, dict[str, float]]:
    """Estimate name -> the kappa mapping it sizes every pool language with."""
    fitted = {lang: fit_kappa(p["audio_duration_s"], p["text_tokens"])["kappa"] for lang, p in pools.items()}
    return {"per-language": fitted, "global": kappa_for(pools, {}, default=fitted["en"])}


def _configs(utterances, shares, ratios, tables) -> Iterator[tuple[float, str, dict]]:
    """(ratio, source, pools) per swept ratio; one config, ratio NaN, when nothing is a stand-in."""
    check_shares(shares)
    for r in ratios:
        if not (r > 0 and math.isfinite(r)):
            raise SchedlabError(f"token-rate ratio must be positive and finite, got {r}")
    for r in ratios:
        pools, source = language_pools(utterances, shares, r, tables)
        if source != "stand-in":
            yield math.nan, source, pools
            return
        yield float(r), source, pools


def mix(pools, shares, rate: float, *, seed: int, duration_s: float) -> pd.DataFrame:
    """The seeded multilingual trace for one rate; the same arrivals and languages for every
    ratio, estimate and policy (arrivals from ``[seed, 0]``, draws from ``[seed, 1]``)."""
    arrivals = arrival_times(rate, rng=np.random.default_rng([seed, 0]), duration_s=duration_s)
    return mix_trace(pools, shares, arrivals, rng=np.random.default_rng([seed, 1]))


def group_latency(requests: pd.DataFrame, language: np.ndarray) -> dict:
    """P50/P90 E2EL and P50 TTFT of English and of non-English requests."""
    lat = latency_columns(requests)
    english = np.asarray(language) == "en"
    out = {}
    for group, mask in zip(GROUPS, (english, ~english)):
        e2el, ttft = lat["e2el_ms"].to_numpy()[mask], lat["ttft_ms"].to_numpy()[mask]
        out[f"n_{group}"] = int(mask.sum())
        for name, x, q in (("e2el", e2el, 50), ("e2el", e2el, 90), ("ttft", ttft, 50)):
            x = x[np.isfinite(x)]
            out[f"p{q}_{name}_ms_{group}"] = float(np.percentile(x, q)) if x.size else math.nan
    return out


def kappa_study(
    utterances: pd.DataFrame,
    arena: Arena,
    *,
    ratios=RATIOS,
    shares: Mapping[str, float] = SHARES,
    rates=RATES,
    tables: Tables | None = None,
    seed: int = 0,
    duration_s: float = 300.0,
    policies=("fcfs", "sjf", "hrrn"),
) -> pd.DataFrame:
    """One row per (ratio, estimate, policy, rate): :func:`~schedlab.simulate.run_summary`'s summary, the run's
    ``ratio`` (NaN when no pool is a stand-in), ``source``, ``estimate``, ``kappa_global`` and
    the estimate's ``kappa_<lang>``, and :func:`group_latency`'s English / non-English columns.

    ``utterances`` is LibriSpeech's table (``duration_s``, ``text_tokens``); ``tables`` is
    :func:`~schedlab.workload.multilingual.fleurs_tables` for the non-English languages of
    ``shares``. Feeds the multilingual figure: P50 and P90 E2EL vs rate, hue = estimate, one
    panel per ratio and policy; and the same with ``p50_e2el_ms_en`` / ``p50_e2el_ms_non_en``
    to show who gains and who loses.
    """
    rows = []
    for ratio, source, pools in _configs(utterances, shares, ratios, tables):
        kappas = estimator_kappas(pools)
        for rate in rates:
            trace = mix(pools, shares, rate, seed=seed, duration_s=duration_s)
            for estimate in ESTIMATES:
                kappa = kappas[estimate]
                for policy in policies:
                    identity = {"workload": "multilingual", "rate": rate, "seed": seed}
                    result, summary = run_summary(trace, policy, replace(arena, kappa=kappa), identity=identity)
                    rows.append({
                        **summary,
                        "ratio": ratio,
                        "source": source,
                        "estimate": estimate,
                        "kappa_global": kappas["global"]["en"],
                        **{f"kappa_{lang}": k for lang, k in kappa.items()},
                        **group_latency(result.requests, trace["language"].to_numpy()),
                    })
    return pd.DataFrame(rows)


def estimate_quality(
    utterances: pd.DataFrame,
    *,
    ratios=RATIOS,
    shares: Mapping[str, float] = SHARES,
    tables: Tables | None = None,
    seed: int = 0,
    n_requests: int = 5000,
) -> pd.DataFrame:
    """How well each estimate's n_hat tracks the true output length, per ratio: Spearman rank
    correlation and the median signed relative error ``n_hat / tokens - 1``, over all requests
    and per group (``en``, ``non_en``). Feeds the companion figure: Spearman vs ratio, hue =
    estimate (``group = all``); within a language both estimates rank alike, so only the
    pooled ranking and the non-English bias differ."""
    rows = []
    for ratio, source, pools in _configs(utterances, shares, ratios, tables):
        arrivals = arrival_times(1.0, rng=np.random.default_rng([seed, 0]), n_requests=n_requests)
        trace = mix_trace(pools, shares, arrivals, rng=np.random.default_rng([seed, 1]))
        tokens = trace["output_tokens"].to_numpy(float)
        english = (trace["language"] == "en").to_numpy()
        for estimate, kappa in estimator_kappas(pools).items():
            n_hat = job_sizes(trace, kappa)
            for group, mask in (("all", np.ones_like(english)), ("en", english), ("non_en", ~english)):
                rows.append({
                    "ratio": ratio,
                    "source": source,
                    "estimate": estimate,
                    "group": group,
                    "n": int(mask.sum()),
                    "spearman": float(spearmanr(n_hat[mask], tokens[mask]).statistic) if mask.sum() > 1 else math.nan,
                    "median_rel_error": float(np.median(n_hat[mask] / tokens[mask] - 1)) if mask.any() else math.nan,
                })
    return pd.DataFrame(rows)
