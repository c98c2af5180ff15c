"""Routers that spread requests without reading the prompt: random, round-robin, and the
least-loaded by outstanding requests, outstanding tokens or KV blocks in use."""

from __future__ import annotations

import numpy as np

from schedlab.registry import register_router
from schedlab.routers.base import Router, lowest


@register_router("random", summary="a replica drawn uniformly at random (seeded)")
class Random(Router):
    name = "random"
    reads_state = False

    def bind(self, cluster) -> None:
        super().bind(cluster)
        self.rng = np.random.default_rng([self.seed, 37])

    def route(self, i: int, candidates: np.ndarray) -> int:
        return int(candidates[self.rng.integers(candidates.size)])


@register_router("round-robin", summary="each request to the next replica in turn")
class RoundRobin(Router):
    """Replicas in turn, 0, 1, ..., N-1, 0, ...; a replica that cannot serve a request is
    skipped for it (the next one that can takes it, and the turn moves on from there)."""

    name = "round-robin"
    reads_state = False

    def bind(self, cluster) -> None:
        super().bind(cluster)
        self.turn = 0

    def route(self, i: int, candidates: np.ndarray) -> int:
        n = len(self.cluster.replicas)
        if candidates.size == n:  # every replica can serve it: the next in turn
            chosen = self.turn
        else:
            after = candidates[candidates >= self.turn]
            chosen = int(after[0]) if after.size else int(candidates[0])
        self.turn = (chosen + 1) % n
        return chosen


@register_router("least-requests", summary="the replica with the fewest outstanding requests")
class LeastRequests(Router):
    """Fewest requests routed and not finished (Vidur's and vLLM's production stack's
    least-outstanding-requests)."""

    name = "least-requests"

    def route(self, i: int, candidates: np.ndarray) -> int:
        return lowest([r.outstanding for r in self.cluster.replicas], candidates)


@register_router("least-tokens", summary="join the shortest queue by work: the fewest outstanding tokens")
class LeastTokens(Router):
    """Fewest outstanding tokens (prompt plus expected output of the requests routed and not
    finished): join the shortest queue, measured in work."""

    name = "least-tokens"

    def route(self, i: int, candidates: np.ndarray) -> int:
        return lowest([r.outstanding_tokens for r in self.cluster.replicas], candidates)


@register_router("least-kv", summary="the replica with the smallest share of its KV blocks in use")
class LeastKV(Router):
    name = "least-kv"
    reads_kv = True

    def route(self, i: int, candidates: np.ndarray) -> int:
        return lowest([r.kv_frac for r in self.cluster.replicas], candidates)
