"""Paper B's workloads: a bimodal mix of short interactive and long-context prompts.

- short pool: the Azure 2023 conversation trace's prompts of 32..1023 tokens (chat traffic);
- long pool: the Mooncake conversation trace and the Azure 2023 code trace, prompts of
  1024..4096 tokens (long-context traffic).
Requests draw (prompt, output) pairs from the pools with replacement; arrivals are Poisson.
Output lengths keep each source's shape but are scaled so the trace's mean is
``mean_output`` tokens (paper B's tables imply about 11 output tokens per request).

Sharing (for the prefix cache): with ``questions_per_doc`` q > 1 the long requests are
document QA, as long-context benchmarks pose them: each long prompt is a document (its length
drawn from the long pool, less the question) and a question of 16..128 tokens of its own, and
each document is asked q times, at random places among the long requests (the shared-prefix
form of :mod:`schedlab.sharing`). Short requests share nothing. q = 1 is the trace without
sharing data, as before.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from schedlab.data.llm_traces import azure_lengths, mooncake_lengths
from schedlab.errors import SchedlabError
from schedlab.registry import OWN, register_pool, register_workload
from schedlab.validation.documents import Positive, PositiveInt, Share
from schedlab.workload.arrivals import arrival_times
from schedlab.workload.shared_prefixes import QUESTION_TOKENS

SHORT = (32, 1024)
LONG = (1024, 4097)
#: Output tokens per request implied by paper B's Table 3 (FCFS: 90.4 tok/s / 8.45 req/s).
MEAN_OUTPUT = 90.4 / 8.45
KINDS = ("mixed", "short", "long")
#: What a pool of paper B's holds.
POOL_COLUMNS = ("prompt_tokens", "output_tokens")


def _within(pool: pd.DataFrame, bounds: tuple[int, int]) -> pd.DataFrame:
    keep = pool[(pool["prompt_tokens"] >= bounds[0]) & (pool["prompt_tokens"] < bounds[1])]
    return keep.reset_index(drop=True)


@register_pool("short", columns=POOL_COLUMNS)
def short_pool() -> pd.DataFrame:
    """Paper B's short prompts: the Azure 2023 conversation trace's of 32 to 1,023 tokens."""
    return _within(azure_lengths("conv"), SHORT)


@register_pool("long", columns=POOL_COLUMNS)
def long_pool() -> pd.DataFrame:
    """Paper B's long prompts: the Mooncake conversation trace's and the Azure 2023 code trace's
    of 1,024 to 4,096 tokens."""
    return _within(pd.concat([mooncake_lengths(), azure_lengths("code")], ignore_index=True), LONG)


def pools() -> tuple[pd.DataFrame, pd.DataFrame]:
    """The short and the long pool: prompt_tokens, output_tokens, source."""
    return short_pool(), long_pool()


def trace(
    kind: str,
    short: pd.DataFrame,
    long: pd.DataFrame,
    n: int,
    rate: float,
    seed: int,
    *,
    short_share: float = 0.8,
    mean_output: float | None = MEAN_OUTPUT,
    questions_per_doc: int = 1,
) -> pd.DataFrame:
    """``n`` requests at ``rate`` req/s: ``mixed`` (``short_share`` short), ``short`` or ``long``
    only, outputs scaled to ``mean_output`` (``None``: the pools' own lengths); long prompts
    are documents asked ``questions_per_doc`` times each (see the module docstring).
    The same (kind, n, rate, seed, questions_per_doc) gives the same trace."""
    if kind not in KINDS:
        raise SchedlabError(f"unknown workload kind {kind!r}; choose {', '.join(KINDS)}")
    if n < 1:
        raise SchedlabError(f"need at least one request, got {n}")
    if short.empty or long.empty:
        raise SchedlabError("the short and long pools must not be empty")
    share = {"mixed": short_share, "short": 1.0, "long": 0.0}[kind]
    rng = np.random.default_rng([seed, n, 11])
    is_short = rng.random(n) < share
    s_rows, l_rows = rng.integers(len(short), size=n), rng.integers(len(long), size=n)

    def pick(column: str) -> np.ndarray:
        return np.where(is_short, short[column].to_numpy()[s_rows], long[column].to_numpy()[l_rows])

    prompt, raw = pick("prompt_tokens"), pick("output_tokens").astype(float)
    scale = 1.0 if mean_output is None else mean_output / raw.mean()
    output = np.maximum(1, np.round(raw * scale)).astype(np.int64)
    out = pd.DataFrame({
        "request_id": np.arange(n),
        "arrival_s": arrival_times(rate, rng=np.random.default_rng([seed, n, 12]), n_requests=n),
        "prompt_tokens": prompt.astype(np.int64),
        "output_tokens": output,
        "task": np.where(is_short, "short", "long"),
    })
    if questions_per_doc < 1:
        raise SchedlabError(f"questions_per_doc must be >= 1, got {questions_per_doc}")
    return out if questions_per_doc == 1 else _documents(out, long, questions_per_doc, seed)


def _documents(out: pd.DataFrame, long: pd.DataFrame, q: int, seed: int) -> pd.DataFrame:
    """The long requests as questions on documents asked ``q`` times each."""
    rng = np.random.default_rng([seed, len(out), 13, q])
    at = np.flatnonzero((out["task"] == "long").to_numpy())
    n_docs = -(-at.size // q)
    question = rng.integers(QUESTION_TOKENS[0], QUESTION_TOKENS[1] + 1, size=at.size)
    doc_len = np.maximum(1, long["prompt_tokens"].to_numpy(np.int64)[rng.integers(len(long), size=n_docs)]
                         - (QUESTION_TOKENS[0] + QUESTION_TOKENS[1]) // 2)
    doc = rng.permutation(np.repeat(np.arange(n_docs), q))[: at.size]
    prompt = out["prompt_tokens"].to_numpy(np.int64).copy()
    prefix_id, prefix_tokens = np.zeros(len(out), np.int64), np.zeros(len(out), np.int64)
    prompt[at] = doc_len[doc] + question
    prefix_id[at], prefix_tokens[at] = doc, doc_len[doc]
    return out.assign(prompt_tokens=prompt, prefix_id=prefix_id, prefix_tokens=prefix_tokens)


@register_workload("mixed", pools=("short", "long"), arrivals=OWN, paper="B")
def mixed(draw, short_share: Share = 0.8, questions_per_doc: PositiveInt = 1,
          mean_output: Positive | None = None) -> pd.DataFrame:
    """Paper B's mix: ``short_share`` short prompts, the rest long, Poisson arrivals; outputs as
    in the pools, or scaled to a mean of ``mean_output`` tokens (paper B's studies: 10.7); long
    prompts are documents asked ``questions_per_doc`` times each."""
    return trace("mixed", draw.pools["short"], draw.pools["long"], draw.n_requests, draw.rate, draw.seed,
                 short_share=short_share, mean_output=mean_output, questions_per_doc=questions_per_doc)


@register_workload("documents", pools=("short", "long"), arrivals=OWN, paper="B")
def documents(draw, questions_per_doc: PositiveInt = 8, short_share: Share = 0.8,
              mean_output: Positive | None = None) -> pd.DataFrame:
    """Paper B's mix whose long prompts are documents, each asked ``questions_per_doc`` times,
    as its sharing study asks them: a document, then a question of 16 to 128 tokens of its own."""
    return mixed(draw, short_share, questions_per_doc, mean_output)
