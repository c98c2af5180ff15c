"""A trace replayed across real servers behind a router, in the simulated cluster's contracts.

:func:`replay_across_servers` sends each request of a decoder model's trace to one of several
running ``vllm serve`` processes, chosen by a registered router when the request is sent
(:func:`schedlab.backends.served.client.replay_routed`: the router code a simulated cluster runs,
reading what the client sees of the servers). Its results are those of :func:`run_cluster`:
the per-request table with the ``replica`` (server) each request went to, a summary over every
request and token gap, and one summary per server over its own requests and gaps.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from schedlab.backends.served.client import replay_routed, server_get
from schedlab.engine import EngineConfig
from schedlab.errors import SchedlabError
from schedlab.metrics import summarize


def _check_serves(url: str, model: str) -> None:
    """Fail before any request is sent unless the server at ``url`` answers and serves ``model``."""
    reply = server_get(url, "/v1/models")
    try:
        listed = reply.json()
    except ValueError:
        listed = None
    models = listed.get("data") if isinstance(listed, dict) else None
    if not isinstance(models, list) or not all(isinstance(m, dict) for m in models):
        raise SchedlabError(f"{url}/v1/models answered what vLLM's API does not (not a list of models: "
                            f"{reply.text[:60]!r})")
    served = [m.get("id") for m in models]
    if model not in served:
        raise SchedlabError(f"{url} serves {', '.join(map(str, served)) or 'no model'}, not {model!r}")


@dataclass
class ServedCluster:
    """A routed replay's per-request table (with ``sent_s``, ``response_s`` and ``replica``),
    its summary and its per-server summaries (a table, with ``replica``)."""

    requests: pd.DataFrame
    summary: dict
    replicas: pd.DataFrame


def replay_across_servers(urls: list[str], trace: pd.DataFrame, router: str, *, model: str, block_size: int,
                          identity: dict, seed: int = 0, timeout_s: float = 600.0,
                          one_at_a_time: bool = False) -> ServedCluster:
    """Replay ``trace`` across the servers at ``urls`` (each serving ``model`` with KV blocks of
    ``block_size`` tokens, what a prefix-aware router keys prompts by), routed by the registered
    ``router`` made with ``seed``; ``identity`` (``policy``: the servers' scheduler, and any
    other keys) goes into every summary. With ``one_at_a_time``, each request is sent at its
    arrival or when the one before it has ended, whichever is later."""
    if "audio_duration_s" in trace:
        raise SchedlabError("a replay across servers serves decoder models; this trace has audio (audio_duration_s)")
    for url in urls:
        _check_serves(url, model)
    result, where = replay_routed(list(urls), trace, router, model=model, limits=EngineConfig(block_size=block_size),
                                  seed=seed, timeout_s=timeout_s, one_at_a_time=one_at_a_time)
    frame = result.frame().assign(replica=where)
    keys = {**identity, "backend": "vllm", "via": "server", "router": router}
    summary = summarize(frame, result.log.gaps, **keys) | {"replicas": len(urls), "wall_s": result.wall_s}
    rows = [summarize(frame[frame["replica"] == r], log.gaps, **keys) | {"replica": r}
            for r, log in enumerate(result.server_logs)]
    return ServedCluster(frame, summary, pd.DataFrame(rows))
