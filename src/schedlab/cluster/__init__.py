"""A cluster of engines behind a router, in one simulation.

:func:`run_cluster` serves a trace on N replicas, each schedlab's engine with its own arena
(step-time model, limits, KV blocks: identical or different hardware and models) and its own
scheduler, advanced by one event loop in time order. Each request is routed at its arrival
time by a registered router (:mod:`schedlab.routers`) reading the replicas as they stand
then; the replica's front end and scheduler take it from there, exactly as a single engine
would (:mod:`.replica`). A router that reads no replica's state (random, round-robin) routes
every request before any replica runs, and each replica is then the single engine on its share.
The results are the usual contracts: one per-request table with the
``replica`` each request ran on, a cluster-wide summary and one per replica.
:func:`~schedlab.cluster.served.replay_across_servers` gives the same for a trace replayed across
real ``vllm serve`` processes by the same router code (:mod:`.served`).
"""

from schedlab.cluster.run import ClusterResult, cluster_summary, run_cluster

__all__ = ["ClusterResult", "cluster_summary", "run_cluster"]
