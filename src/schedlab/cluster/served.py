"""A trace replayed across real servers behind a router, in the simulated cluster's contracts.

:func:`replay_across_servers` sends each request of a decoder model's trace to one of several
running ``vllm serve`` processes, chosen by a registered router when the request is sent
(:func:`replay_routed`: the router code a simulated cluster runs, reading what the client sees
of the servers, :class:`ServedReplica`). Its results are those of :func:`run_cluster`:
the per-request table with the ``replica`` (server) each request went to, a summary over every
request and token gap, and one summary per server over its own requests and gaps.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from schedlab import registry
from schedlab.backends.served.client import ReplayResult, answered, replay_urls, server_get
from schedlab.backends.served.prometheus import KV_USAGE, kv_metrics
from schedlab.engine import EngineConfig
from schedlab.errors import SchedlabError
from schedlab.estimate import job_sizes
from schedlab.metrics import summarize
from schedlab.routers import RequestView


class ServedReplica:
    """A server as a router sees it from the client (see :mod:`schedlab.routers`): the
    requests sent to it and not yet answered, and their prompt and expected output tokens, with
    its limits (its KV blocks as its ``/metrics`` give them, :func:`replay_routed`). The client
    cannot tell the server's waiting requests from its running ones (all count as waiting). For
    a router that reads KV blocks (:attr:`schedlab.routers.Router.reads_kv`), the share in use
    is read from the server's ``/metrics`` before each request is routed: vLLM's gauge, as of
    the server's last engine step."""

    n_running = 0

    def __init__(self, limits: EngineConfig) -> None:
        self.limits = limits
        self.outstanding = 0
        self.outstanding_tokens = 0
        #: The share of its KV blocks in use, read just before a KV-reading router is asked.
        self.kv_usage: float | None = None

    @property
    def n_waiting(self) -> int:
        return self.outstanding

    @property
    def kv_frac(self) -> float:
        if self.kv_usage is None:
            raise SchedlabError("this router reads the servers' KV blocks: it must say so (reads_kv = True) to be "
                                "given them in front of real servers")
        return self.kv_usage

    @property
    def free(self) -> int:
        return round(self.limits.kv_capacity_blocks * (1.0 - self.kv_frac))


class _Routing:
    """The registered ``router`` (made with ``seed``) choosing among servers of ``limits``
    (one each), each request at the moment it is sent; ``where`` records the choices."""

    def __init__(self, trace: pd.DataFrame, router: str, limits: list[EngineConfig], seed: int) -> None:
        self.router, self.chooser = router, registry.make_router(router, seed=seed)
        self.view = RequestView(trace, job_sizes(trace, {}, "raw"), limits[0].block_size)
        self.view.replicas = [ServedReplica(each) for each in limits]
        self.chooser.bind(self.view)
        self.everyone = np.arange(len(limits))
        self.where = np.full(len(trace), -1, np.int64)
        self.reads_kv = self.chooser.reads_kv

    async def read_kv(self, clients) -> None:
        """Each server's share of KV blocks in use, as its ``/metrics`` give it now (all
        servers at once)."""
        replies = await asyncio.gather(*(client.get("/metrics") for client in clients))
        for server, reply in zip(self.view.replicas, replies):
            usage = kv_metrics(answered(reply).text, str(reply.url))["usage"]
            if usage is None:
                raise SchedlabError(f"{reply.url} has no {KV_USAGE} (a server started with --disable-log-stats?)")
            server.kv_usage = usage

    def _tokens(self, i: int) -> int:
        return int(self.view.prompt[i]) + int(self.view.sizes[i])

    def route(self, i: int) -> int:
        r = self.chooser.route(i, self.everyone)
        if r not in self.everyone:
            raise SchedlabError(f"router {self.router!r} chose server {r} for request {i}, of "
                                f"{self.everyone.size} servers")
        self.where[i] = r
        server = self.view.replicas[r]
        server.outstanding += 1
        server.outstanding_tokens += self._tokens(i)
        return int(r)

    def finished(self, i: int) -> None:
        server = self.view.replicas[self.where[i]]
        server.outstanding -= 1
        server.outstanding_tokens -= self._tokens(i)


def replay_routed(urls: list[str], trace: pd.DataFrame, router: str, *, model: str, limits: EngineConfig,
                  seed: int = 0, timeout_s: float = 600.0, warmup_s: float = 0.0,
                  one_at_a_time: bool = False) -> tuple[ReplayResult, np.ndarray]:
    """Replay ``trace`` (a decoder model's) across the servers at ``urls``, all serving
    ``model`` with ``limits``: each request goes to the server the registered ``router`` (made
    with ``seed``) chooses when it is sent, reading what the client sees of the servers
    (:class:`ServedReplica`). Each server's KV blocks are those its ``/metrics`` report (its
    cache config), which must be of ``limits.block_size`` tokens; a server that does not
    report them is taken to have ``limits``'s. Returns the replay and each request's server
    (an index into ``urls``), as :func:`schedlab.cluster.run_cluster` gives a simulated
    cluster's."""
    if not urls:
        raise SchedlabError("a routed replay needs at least one server")
    servers = []
    for url in urls:
        kv = kv_metrics(server_get(url, "/metrics").text, url)
        if kv["block_size"] is not None and kv["block_size"] != limits.block_size:
            raise SchedlabError(f"{url} has KV blocks of {kv['block_size']} tokens, not {limits.block_size}")
        servers.append(limits if kv["blocks"] is None else replace(limits, kv_capacity_blocks=kv["blocks"]))
    routing = _Routing(trace, router, servers, seed)
    result = replay_urls(list(urls), trace, model=model, whisper=False, timeout_s=timeout_s, warmup_s=warmup_s,
                         one_at_a_time=one_at_a_time, stage=f"replay across {len(urls)} servers behind {router}",
                         routing=routing)
    return result, routing.where


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
