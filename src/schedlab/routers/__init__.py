"""Routers: which replica of a cluster serves each request (:mod:`schedlab.cluster`).

A router is called once per request, at the request's arrival, with the replicas that can
serve it; it reads the cluster's view of its replicas as they stand then and returns one of
them. The view (``self.cluster`` once bound) offers, per replica ``r`` of
``self.cluster.replicas``:

- ``outstanding``: requests routed to it and not finished;
- ``outstanding_tokens``: their prompt tokens plus expected output tokens (the arena's job
  size: a trace's ``max_tokens``), the work the router knows it sent;
- ``n_waiting``, ``n_running``: requests waiting (at its scheduler or in its front end) and
  running;
- ``free``, ``limits.kv_capacity_blocks``, ``limits.block_size``, ``kv_frac``: its KV blocks
  (with a prefix cache, ``free`` counts the evictable cached blocks, as vLLM's pool does); a
  router that reads these sets ``reads_kv``: a simulated replica that holds a stretch of decode
  steps not yet run then shows them as the steps begun before the routing time leave them
  (nothing else a router reads changes before the stretch's last step begins), and in front of
  real servers it is given them as each server's ``/metrics`` report them before it is asked;
- ``limits``: its engine limits, which never change (a router with ``reads_state = False``
  may read these and nothing else of a replica);

and for the request, ``self.cluster.prompt[i]``, ``self.cluster.sizes[i]`` (prompt tokens,
expected output tokens) and ``self.cluster.prefix_key(i, blocks)`` (a name for the prompt's
first ``blocks`` full KV blocks, equal for two requests exactly when those tokens are; ``None``
for a prompt shorter than one block or a trace without sharing data).

Every router is registered with :func:`schedlab.registry.register_router` (in this order; a
new module here is found and registered after them) and made with the run's ``seed``; ties go to the lowest replica index, so every choice is deterministic.
"""

from schedlab.routers.base import RequestView, Router
from schedlab.routers import balance, affinity  # noqa: F401,E402 (registration order)

__all__ = ["RequestView", "Router"]
