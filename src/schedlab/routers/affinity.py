"""Prefix affinity: requests whose prompts open with the same tokens go to the same replica,
whose prefix cache then holds them, as llm-d's prefix scorer and vLLM's production-stack
router aim to."""

from __future__ import annotations

import bisect
import hashlib
import math

import numpy as np

from schedlab.registry import register_router
from schedlab.routers.base import Router, lowest


def ring_point(label: str) -> int:
    """A point on the 64-bit hash ring, the same in every process (not Python's ``hash``)."""
    return int.from_bytes(hashlib.blake2b(label.encode(), digest_size=8).digest(), "little")


@register_router("prefix-affinity", params={"blocks": 4, "load_bound": 1.25, "vnodes": 64},
                 summary="consistent hashing of the prompt's first KV blocks, with a load bound")
class PrefixAffinity(Router):
    """Consistent hashing with bounded loads (Mirrokni, Thorup and Zadimoghaddam, SODA 2018)
    of the prompt's first ``blocks`` full KV blocks: each replica owns ``vnodes`` points of a
    hash ring; a request goes to the owner of the first point at or after its prefix's point,
    unless that replica already holds ``ceil(load_bound * (outstanding + 1) / N)`` outstanding
    requests (``outstanding``: the cluster's), in which case the next point's owner is asked,
    and so on round the ring. Adding a replica moves only the prefixes its points take over. A
    prompt shorter than one block, or a trace without sharing data, has no prefix to keep
    together: such a request goes to the replica with the fewest outstanding requests."""

    name = "prefix-affinity"

    def __init__(self, seed: int = 0, blocks: int = 4, load_bound: float = 1.25, vnodes: int = 64) -> None:
        super().__init__(seed)
        self.blocks, self.load_bound, self.vnodes = blocks, load_bound, vnodes

    def bind(self, cluster) -> None:
        super().bind(cluster)
        points = sorted((ring_point(f"replica {r} point {v}"), r)
                        for r in range(len(cluster.replicas)) for v in range(self.vnodes))
        self.points = [p for p, _ in points]
        self.owners = [r for _, r in points]

    def route(self, i: int, candidates: np.ndarray) -> int:
        replicas = self.cluster.replicas
        outstanding = [r.outstanding for r in replicas]
        key = self.cluster.prefix_key(i, self.blocks)
        if key is None:
            return lowest(outstanding, candidates)
        bound = math.ceil(self.load_bound * (sum(outstanding) + 1) / len(replicas))
        allowed = set(candidates.tolist())
        start = bisect.bisect_left(self.points, key)
        for k in range(len(self.points)):
            r = self.owners[(start + k) % len(self.points)]
            if r in allowed and outstanding[r] < bound:
                return r
        # every replica that can serve it is at the bound: the least loaded of them
        return lowest(outstanding, candidates)
