"""The router protocol (see :mod:`schedlab.routers`)."""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np


class Router(ABC):
    name: str = "router"
    #: Whether the choice reads the replicas' state. One that does not (random, round-robin)
    #: chooses the same whenever it is asked, so the cluster routes every request up front and
    #: each replica then runs its share alone, as a single engine would.
    reads_state: bool = True

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
    return int(candidates[int(np.argmin([values[r] for r in candidates]))])
