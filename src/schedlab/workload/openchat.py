"""Paper C's workload: Poisson arrivals, (prompt, output) pairs drawn from the openchat
length pool, and two classes: each request is ``paying`` (TBT target 0.1 s) with probability
``share``, else ``free`` (0.5 s). Arrivals, lengths and class draws use separate seeded
streams, so every scheduler and every paying share sees the same requests."""

from __future__ import annotations

import numpy as np
import pandas as pd

from schedlab.errors import SchedlabError
from schedlab.registry import register_workload
from schedlab.validation.documents import Share
from schedlab.workload.arrivals import arrival_times

TBT_TARGET_S = {"paying": 0.1, "free": 0.5}


def openchat_trace(pool: pd.DataFrame, rate: float, duration_s: float, share: float, seed: int,
                   targets: dict[str, float] | None = None) -> pd.DataFrame:
    arrivals = arrival_times(rate, rng=np.random.default_rng([seed, 0]), duration_s=duration_s)
    return openchat_requests(pool, arrivals, share, seed, targets)


def openchat_requests(pool: pd.DataFrame, arrivals: np.ndarray, share: float, seed: int,
                      targets: dict[str, float] | None = None) -> pd.DataFrame:
    """Requests at ``arrivals`` with lengths and classes drawn from their own seeded streams;
    ``targets`` (class -> TBT target, s) default to the paper's."""
    targets = targets or TBT_TARGET_S
    if not 0.0 <= share <= 1.0:
        raise SchedlabError(f"paying share must be within [0, 1], got {share}")
    if pool.empty:
        raise SchedlabError("the length pool is empty")
    n = len(arrivals)
    rows = np.random.default_rng([seed, 1]).integers(len(pool), size=n)
    paying = np.random.default_rng([seed, 2]).random(n) < share
    cls = np.where(paying, "paying", "free")
    return pd.DataFrame({
        "request_id": np.arange(n, dtype=np.int64),
        "arrival_s": np.asarray(arrivals, float),
        "prompt_tokens": pool["prompt_tokens"].to_numpy(np.int64)[rows],
        "output_tokens": pool["output_tokens"].to_numpy(np.int64)[rows],
        "slo_class": cls,
        "tbt_target_s": np.where(paying, targets["paying"], targets["free"]),
    })


@register_workload("openchat", pools=("openchat",), paper="C")
def openchat(draw, share: Share = 0.5) -> pd.DataFrame:
    """Paper C's requests: openchat_sharegpt4 lengths at the arrivals drawn, ``share`` of them
    paying (TBT target 0.1 s), the rest free (0.5 s)."""
    return openchat_requests(draw.pools["openchat"], draw.arrivals(), share, draw.seed)


def scaled_pool(pool: pd.DataFrame, factor: float, max_tokens: int) -> pd.DataFrame:
    """``pool``'s prompt and output lengths times ``factor`` (at least 1 token each), prompts
    cut so that every request fits in ``max_tokens``: paper C's length shape on an engine
    with a shorter context or a slower step."""
    if not 0.0 < factor <= 1.0:
        raise SchedlabError(f"a length scale is within (0, 1], got {factor}")
    output = np.maximum(1, np.rint(pool["output_tokens"].to_numpy(float) * factor)).astype(np.int64)
    if output.max(initial=0) >= max_tokens:
        raise SchedlabError(f"scaled outputs of up to {output.max()} tokens leave no room for a prompt in {max_tokens}")
    prompt = np.maximum(1, np.rint(pool["prompt_tokens"].to_numpy(float) * factor)).astype(np.int64)
    return pd.DataFrame({"prompt_tokens": np.minimum(prompt, max_tokens - output), "output_tokens": output})
