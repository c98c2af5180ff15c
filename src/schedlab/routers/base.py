"""The router protocol (see :mod:`schedlab.routers`) and what a router reads of the requests."""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod

import numpy as np
import pandas as pd

from schedlab.sharing import flat_prompt_tokens, sharing_column

#: Requests whose prompt tokens are read at once when their prefixes are named.
_KEY_BATCH = 4096


class Router(ABC):
    name: str = "router"
    #: Whether the choice reads the replicas' state. One that does not (random, round-robin)
    #: chooses the same whenever it is asked, so the cluster routes every request up front and
    #: each replica then runs its share alone, as a single engine would.
    reads_state: bool = True
    #: Whether the choice reads the replicas' KV blocks (``free``, ``kv_frac``). In front of
    #: real servers these are read from each server's ``/metrics`` before such a router is asked.
    reads_kv: bool = False

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def bind(self, cluster) -> None:
        """Called once before the run, with the cluster whose replicas this router reads."""
        self.cluster = cluster

    @abstractmethod
    def route(self, i: int, candidates: np.ndarray) -> int:
        """The replica (an index into ``cluster.replicas``) that serves request ``i`` (trace
        position), one of ``candidates`` (the replicas that can serve it, ascending)."""


def lowest(values, candidates: np.ndarray) -> int:
    """The candidate with the lowest value (ties: the lowest index)."""
    return min(candidates.tolist(), key=values.__getitem__)  # the first of equal minima


def prefix_keys(trace: pd.DataFrame, tokens: int, block_size: int) -> tuple[np.ndarray, np.ndarray]:
    """For each request, a 64-bit name of its prompt's first ``min(tokens, prompt)`` tokens
    cut to whole blocks of ``block_size`` (equal names: equal tokens), and whether it has one
    (a prompt of at least one block, in a trace with sharing data)."""
    n = len(trace)
    keys, has = np.zeros(n, np.uint64), np.zeros(n, bool)
    if sharing_column(trace) is None:
        return keys, has
    for start in range(0, n, _KEY_BATCH):
        stop = min(start + _KEY_BATCH, n)
        flat, offsets = flat_prompt_tokens(trace, start, stop)
        for k in range(stop - start):
            m = min(tokens, int(offsets[k + 1] - offsets[k])) // block_size * block_size
            if m:
                head = flat[offsets[k]:offsets[k] + m].astype(np.int64).tobytes()
                keys[start + k] = int.from_bytes(hashlib.blake2b(head, digest_size=8).digest(), "little")
                has[start + k] = True
    return keys, has


class RequestView:
    """What a router reads of the requests (see :mod:`schedlab.routers`): ``prompt`` and
    ``sizes`` (expected output tokens) by trace position, and :meth:`prefix_key`. A cluster's
    view adds its ``replicas``."""

    def __init__(self, trace: pd.DataFrame, sizes: np.ndarray, block_size: int) -> None:
        self.trace = trace
        self.prompt = trace["prompt_tokens"].to_numpy(np.int64)
        self.sizes = sizes
        self.block_size = block_size
        self._keys: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def prefix_key(self, i: int, blocks: int) -> int | None:
        """A name for request ``i``'s first ``blocks`` full KV blocks, or ``None`` when it has none."""
        if blocks not in self._keys:
            self._keys[blocks] = prefix_keys(self.trace, blocks * self.block_size, self.block_size)
        keys, has = self._keys[blocks]
        return int(keys[i]) if has[i] else None
