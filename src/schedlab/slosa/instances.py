"""Multi-instance mapping: requests go, in arrival order, to the instance with the most free
KV memory (ties to the lowest index), then each instance's share is mapped on its own.

The rule is one function (:func:`largest_remaining`), used by paper D's study for a batch of
pending requests (:func:`assign`) and, as the registered router ``largest-memory``, by a
cluster of engines (:mod:`schedlab.cluster`), where a request's tokens are given back to its
instance when it finishes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from schedlab.errors import SchedlabError
from schedlab.registry import register_router
from schedlab.routers.base import Router


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
    everyone = np.arange(len(instances))
    for k, tokens in enumerate(need):
        i = largest_remaining(free, everyone)
        where[k] = i
        free[i] -= tokens
    return where


def largest_remaining(free: np.ndarray, candidates: np.ndarray) -> int:
    """Paper D's choice: the candidate instance with the most ``free`` memory (ties: the
    lowest index)."""
    return int(candidates[int(np.argmax(free[candidates]))])


@register_router("largest-memory", paper="D", params={"usable": 0.9},
                 summary="paper D's instance assignment: the replica with the most KV memory left")
class LargestMemory(Router):
    """Paper D's instance assignment as a router: each replica's KV capacity in tokens, the
    share ``usable`` that survives fragmentation (paper D's ``u``), less the prompt and
    expected output tokens of the requests routed to it and not finished."""

    name = "largest-memory"

    def __init__(self, seed: int = 0, usable: float = 0.9) -> None:
        super().__init__(seed)
        self.usable = usable

    def route(self, i: int, candidates: np.ndarray) -> int:
        free = np.array([r.limits.kv_capacity_blocks * r.limits.block_size * self.usable - r.outstanding_tokens
                         for r in self.cluster.replicas])
        return largest_remaining(free, candidates)
