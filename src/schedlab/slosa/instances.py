"""Multi-instance mapping: requests go, in arrival order, to the instance with the most free
KV memory (ties to the lowest index), then each instance's share is mapped on its own."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from schedlab.errors import SchedlabError


@dataclass(frozen=True)
class InstanceMemory:
    """``free_bytes`` of KV memory, of which ``usable`` survives fragmentation, at
    ``bytes_per_token`` (the model's KV bytes per token)."""

    free_bytes: float
    bytes_per_token: float
    usable: float = 0.9

    @property
    def token_capacity(self) -> float:
        """``M * u / m_tok``: the tokens the instance can hold."""
        return self.free_bytes * self.usable / self.bytes_per_token


def assign(requests: pd.DataFrame, instances: list[InstanceMemory], output_tokens=None) -> np.ndarray:
    """Instance index per request: each takes ``prompt + output`` tokens of its instance's
    capacity (``output_tokens``: the estimates the scheduler has, default the trace's)."""
    if not instances:
        raise SchedlabError("need at least one instance")
    free = np.array([inst.token_capacity for inst in instances], dtype=float)
    out = requests["output_tokens"].to_numpy(float) if output_tokens is None else np.asarray(output_tokens, float)
    need = requests["prompt_tokens"].to_numpy(float) + out
    where = np.empty(len(need), dtype=np.int64)
    for k, tokens in enumerate(need):
        i = int(np.argmax(free))
        where[k] = i
        free[i] -= tokens
    return where
