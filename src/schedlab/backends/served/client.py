"""An asyncio HTTP client that replays a trace against a vLLM server, streaming.

Each request is sent at its trace arrival offset (from the start of the replay), on its own
connection-pool slot, and its stream is read as it comes: the time of every chunk that
carries new tokens (``usage.completion_tokens`` of vLLM's continuous usage stats) is recorded
for each of those tokens, so TTFT, token gaps and E2EL are what this client saw. Whisper
requests go to ``/v1/audio/transcriptions`` (a WAV of the clip's duration, the duration hint
as ``vllm_xargs``, a JSON string form field); decoder requests to ``/v1/completions``
(placeholder token ids, or the trace's own when it carries sharing data, :mod:`schedlab.sharing`;
``ignore_eos``). A server that reports its prompt-token details (``cached_tokens`` of the
final usage) gives each request's cached tokens; :func:`prefix_cache_counters` reads its
prefix-cache counters from ``/metrics``. With ``one_at_a_time`` each request is sent when the
previous one has ended, so no two overlap and the server's cache sees the trace in its order
whatever the timing. Each request carries ``X-Request-Id: <token>-<position>``
(``token`` new for each replay), which vLLM puts in its own request id, so the scheduler's
request log can be joined back to the trace
(:func:`schedlab.backends.steps.tables.request_timeline`); the client alone cannot see when the
engine first scheduled a request. A request whose connection is lost (the server closed it
before answering, a transport error) fails the replay with :class:`ConnectionLost`, which a
caller may replay again: the others' results are still complete, but not those of the replay.
The collector's heap is frozen for the replay (:func:`frozen_heap`), as vLLM's own benchmark
client (``vllm bench serve``) and server freeze theirs. :func:`replay_routed` replays a trace
across several servers, each request sent to the server a registered router chooses at its
arrival (the routers of :mod:`schedlab.routers`, as a simulated cluster runs them).
"""

from __future__ import annotations

import asyncio
import gc
import io
import json
import re
import time
import uuid
from collections.abc import Iterator
from contextlib import AsyncExitStack, contextmanager
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
import soundfile

from schedlab import progress, registry
from schedlab.backends import placeholder_prompt
from schedlab.data.vad import speech_sample
from schedlab.errors import SchedlabError
from schedlab.estimate import job_sizes, size_hints
from schedlab.engine.arena import EngineConfig
from schedlab.engine.log import RequestLog
from schedlab.routers import RequestView
from schedlab.sharing import prompt_token_ids, sharing_column


class ConnectionLost(SchedlabError):
    """A replay in which at least one request lost its connection before its answer ended."""


#: Whisper's window: vLLM splits longer audio into several engine requests; the clip sent is
#: capped at it (the duration hint keeps the clip's real length).
MAX_CLIP_S = 30.0


def speech_wav(duration_s: float, *, offset_s: float = 0.0) -> bytes:
    """WAV bytes of the bundled speech sample, tiled from ``offset_s`` and trimmed to
    ``duration_s`` (at most :data:`MAX_CLIP_S`)."""
    wave, rate = speech_sample()
    n = max(1, round(min(duration_s, MAX_CLIP_S) * rate))
    body = np.resize(np.roll(wave, -round(offset_s * rate) % len(wave)), n)
    buf = io.BytesIO()
    soundfile.write(buf, body, rate, format="WAV", subtype="PCM_16")
    return buf.getvalue()


@dataclass
class ReplayResult:
    """What a replay measured: the results log, the client's wall time, and per request when
    the client sent it and when the server's response began (its status and headers: vLLM
    answers a streamed request before handing it to the engine), both from the replay's start."""

    log: RequestLog
    wall_s: float
    errors: list[str]
    sent_s: np.ndarray
    response_s: np.ndarray
    #: This replay's ``X-Request-Id`` prefix, and the wall-clock time of its zero.
    token: str = ""
    wall_t0: float = float("nan")
    #: How many of ``errors`` are lost connections.
    lost: int = 0
    #: A routed replay's log per server (the requests' arrays shared, each server's token gaps).
    server_logs: list[RequestLog] | None = None

    def frame(self) -> pd.DataFrame:
        """The per-request results table with ``sent_s`` and ``response_s``: where a request's
        time before its first token went (client, HTTP and API server, or engine)."""
        return self.log.frame().assign(sent_s=self.sent_s, response_s=self.response_s)


def _request_kwargs(trace: pd.DataFrame, model: str, whisper: bool, token: str) -> list[dict]:
    """Per request, the ``httpx`` arguments of its POST (built before the clock starts)."""
    hints = size_hints(trace)
    shared = not whisper and sharing_column(trace) is not None
    out = []
    for i, (row, hint) in enumerate(zip(trace.itertuples(index=False), hints)):
        n_out = int(row.output_tokens)
        if whisper:
            data = {
                "model": model,
                "language": hint["language"],
                "stream": "true",
                "stream_include_usage": "true",
                "stream_continuous_usage_stats": "true",
                "temperature": "0",
                "max_completion_tokens": str(n_out),
                "vllm_xargs": json.dumps(hint),
            }
            wav = speech_wav(float(row.audio_duration_s), offset_s=1.7 * i)
            out.append({"url": "/v1/audio/transcriptions", "data": data,
                        "files": {"file": (f"{i}.wav", wav, "audio/wav")}})
        else:
            body = {
                "model": model,
                "prompt": (prompt_token_ids(trace, range(i, i + 1))[0].tolist() if shared
                           else placeholder_prompt(int(row.prompt_tokens))),
                "max_tokens": n_out,
                "ignore_eos": True,
                "temperature": 0,
                "stream": True,
                "stream_options": {"include_usage": True, "continuous_usage_stats": True},
                "vllm_xargs": hint,
            }
            out.append({"url": "/v1/completions", "json": body})
        out[-1]["headers"] = {"X-Request-Id": f"{token}-{i}"}
    return out


class NotVllm(SchedlabError):
    """An answer that is not what vLLM's API returns (what was wrong, without the server)."""


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _chunk(payload: str) -> dict:
    """A stream chunk (the text after ``data: ``) as vLLM sends one: a JSON object."""
    try:
        chunk = json.loads(payload)
    except (ValueError, RecursionError):
        raise NotVllm(f"a stream chunk that is not JSON ({payload[:60]!r})") from None
    if not isinstance(chunk, dict):
        raise NotVllm(f"a stream chunk that is not a JSON object ({payload[:60]!r})")
    return chunk


def _usage(chunk: dict, seen: int, asked: int, prompt: int | None) -> tuple[int, int | None]:
    """A chunk's count of tokens generated so far (from ``seen`` up to the ``asked``) and its
    cached prompt tokens (None: not said; at most ``prompt`` when given)."""
    usage = chunk.get("usage") or {}
    details = (usage.get("prompt_tokens_details") or {}) if isinstance(usage, dict) else None
    if not isinstance(usage, dict) or not isinstance(details, dict):
        raise NotVllm(f"a usage that is not a JSON object ({str(chunk.get('usage'))[:60]!r})")
    count, cached = usage.get("completion_tokens", seen), details.get("cached_tokens")
    if not _whole(count) or not seen <= count <= asked:
        raise NotVllm(f"completion_tokens {str(count)[:30]} after {seen}, for {asked} tokens asked")
    if cached is not None and (not _whole(cached) or not 0 <= cached <= (prompt if prompt is not None else cached)):
        raise NotVllm(f"cached_tokens {str(cached)[:30]} for a prompt of {prompt} tokens")
    return count, cached


async def _one(client, i: int, kwargs: dict, log: RequestLog, t0: float, errors: list[str], response_s: np.ndarray) -> None:
    seen, url = 0, str(client.base_url).rstrip("/")
    asked = int(log.trace["output_tokens"].iat[i])
    prompt = int(log.trace["prompt_tokens"].iat[i]) if kwargs["url"] == "/v1/completions" else None
    async with client.stream("POST", **kwargs) as resp:
        response_s[i] = time.monotonic() - t0
        if resp.status_code != 200:
            errors.append(f"request {i}: {url} answered HTTP {resp.status_code}: {(await resp.aread())[:300]!r}")
            return
        async for line in resp.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            now = time.monotonic() - t0
            try:
                chunk = _chunk(line[6:])
                if "error" in chunk:
                    errors.append(f"request {i}: {url} answered an error: {str(chunk['error'])[:300]}")
                    return
                count, cached = _usage(chunk, seen, asked, prompt)
            except NotVllm as e:
                errors.append(f"request {i}: {url} answered what vLLM's API does not: {e}")
                return
            if cached is not None:
                log.cached[i] = cached
            for _ in range(count - seen):
                log.tokens(np.array([i]), now)
            seen = count
    log.finish[i] = time.monotonic() - t0
    progress.requests_done(1)
    if seen != int(log.trace["output_tokens"].iat[i]):
        errors.append(f"request {i}: {seen} tokens, the trace says {int(log.trace['output_tokens'].iat[i])}")


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
            usage = kv_metrics(_answered(reply).text, str(reply.url))["usage"]
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


async def _replay(urls: list[str], trace: pd.DataFrame, model: str, whisper: bool, timeout_s: float,
                  warmup_s: float, one_at_a_time: bool = False, routing: _Routing | None = None) -> ReplayResult:
    """The replay against ``urls[0]``, or with ``routing`` against the server it chooses for
    each request."""
    import httpx

    token = uuid.uuid4().hex[:16]
    kwargs = _request_kwargs(trace, model, whisper, token)
    log = RequestLog(trace, warmup_s)
    # routed, each server's token gaps apart (one table of requests, as a simulated cluster's)
    logs = [log.sharing() for _ in urls] if routing is not None else [log]
    errors: list[str] = []
    lost: list[str] = []
    arrival = trace["arrival_s"].to_numpy(float)
    sent, response = np.full(len(trace), np.nan), np.full(len(trace), np.nan)
    # An idle connection is dropped well before the server's keep-alive timeout (uvicorn's 5 s,
    # also httpx's default expiry): a request sent on a connection the server is closing at that
    # moment fails with a ReadError, which a low-rate replay's gaps of 5 s and more did hit.
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None, keepalive_expiry=1.0)
    async with AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(httpx.AsyncClient(base_url=url, timeout=timeout_s, limits=limits))
                   for url in urls]
        t0, wall_t0 = time.monotonic(), time.time()

        # routed in trace order: requests due at the same time wake in no set order
        routed = [asyncio.Event() for _ in range(len(trace))] if routing is not None else []

        async def at_arrival(i: int) -> None:
            await asyncio.sleep(max(0.0, arrival[i] - (time.monotonic() - t0)))
            r = 0
            if routing is not None:
                if i:
                    await routed[i - 1].wait()
                if routing.reads_kv:
                    await routing.read_kv(clients)
                r = routing.route(i)
                routed[i].set()
            sent[i] = time.monotonic() - t0
            try:
                await _one(clients[r], i, kwargs[i], logs[r], t0, errors, response)
            except httpx.TransportError as exc:
                lost.append(f"request {i}: connection lost ({type(exc).__name__})")
            except httpx.HTTPError as exc:  # an answer httpx cannot read (its encoding, its redirects)
                errors.append(f"request {i}: {urls[r]} answered what HTTP cannot read ({type(exc).__name__}: {exc})")
            finally:
                if routing is not None:
                    routing.finished(i)

        if one_at_a_time:
            for i in range(len(trace)):
                await at_arrival(i)
        else:
            await asyncio.gather(*(at_arrival(i) for i in range(len(trace))))
        wall = time.monotonic() - t0
    if routing is not None:
        log.gather(logs)
    return ReplayResult(log, wall, errors + lost, sent, response, token, wall_t0, lost=len(lost),
                        server_logs=logs if routing is not None else None)


@contextmanager
def frozen_heap() -> Iterator[None]:
    """The objects alive on entry frozen out of the garbage collector's reach until exit: a
    collection of the oldest generation then walks only what the replay made. Unfrozen, such a
    collection walked the client's whole heap (pandas, httpx, schedlab) and held the event loop
    for 200 ms on a busy 2-core machine, halfway into a replay at 25 req/s: eight requests went
    out late (the latest by 245-365 ms), and the tokens of every stream open then were read as
    late. Not re-entrant: an inner exit thaws what an outer entry froze."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def replay_http(url: str, trace: pd.DataFrame, *, model: str, whisper: bool, timeout_s: float = 600.0,
                warmup_s: float = 0.0, one_at_a_time: bool = False) -> ReplayResult:
    """Replay ``trace`` against the server at ``url`` (times from the replay's start; gaps of
    requests arriving before ``warmup_s`` are not measured); with ``one_at_a_time``, each
    request at its arrival or when the one before it has ended, whichever is later."""
    if whisper and "audio_duration_s" not in trace:
        raise SchedlabError("a Whisper replay needs the trace's audio_duration_s")
    # checked inside its stage: a replay that failed ends the stage with its error, not its line
    with progress.stage(f"replay against {url}", total=len(trace)), frozen_heap():
        return _checked(asyncio.run(_replay([url], trace, model, whisper, timeout_s, warmup_s, one_at_a_time)))


def _checked(result: ReplayResult) -> ReplayResult:
    if result.errors:
        kind = ConnectionLost if result.lost == len(result.errors) else SchedlabError
        raise kind(f"{len(result.errors)} request(s) failed; first: {result.errors[0]}")
    return result


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
    with progress.stage(f"replay across {len(urls)} servers behind {router}", total=len(trace)), frozen_heap():
        result = _checked(asyncio.run(_replay(list(urls), trace, model, False, timeout_s, warmup_s, one_at_a_time,
                                              routing)))
    return result, routing.where


#: The server's prefix-cache counters (vLLM's Prometheus names; a counter is exposed with
#: ``_total``), the gauge of the share of KV blocks in use, and the gauge whose labels carry the
#: cache's configuration.
PREFIX_COUNTERS = {"queries": "vllm:prefix_cache_queries_total", "hits": "vllm:prefix_cache_hits_total"}
KV_USAGE = "vllm:kv_cache_usage_perc"
CACHE_CONFIG = "vllm:cache_config_info"

#: A sample of the Prometheus text format: name, labels, value, optional timestamp.
_SAMPLE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+-?\d+)?\s*")
_LABEL = re.compile(r'(?:^|,)\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def _samples(text: str, names: set[str]) -> Iterator[tuple[str, dict[str, str], float]]:
    """The samples of the metrics ``names`` in a Prometheus text exposition: name, labels, value
    (other lines are not read)."""
    for line in text.splitlines():
        match = _SAMPLE.fullmatch(line) if line.split("{", 1)[0].split(" ", 1)[0] in names else None
        try:
            value = float(match[3]) if match is not None else None
        except ValueError:
            continue
        if value is not None:
            yield match[1], dict(_LABEL.findall(match[2] or "")), value


def _answered(reply):
    """``reply``, unless its status is not 200: then one line naming the URL and status."""
    if reply.status_code != 200:
        raise SchedlabError(f"{reply.url} answered HTTP {reply.status_code}")
    return reply


def server_get(url: str, path: str):
    """The answer to a GET of ``path`` from the server at ``url``; one line if no server answers
    there or it answers other than 200."""
    import httpx

    try:
        return _answered(httpx.get(f"{url}{path}", timeout=30.0))
    except httpx.HTTPError as exc:
        raise SchedlabError(f"no server answers at {url} ({type(exc).__name__})") from None


def prefix_cache_counters(url: str) -> dict:
    """The server's prefix-cache counters from its ``/metrics`` (summed over its engines):
    ``queries`` and ``hits`` (tokens of first admissions, as vLLM counts them), and
    ``num_gpu_blocks`` (its KV blocks, vLLM's null block included) from its cache config."""
    import httpx

    out = {key: 0 for key in PREFIX_COUNTERS}
    metric_keys = {metric: key for key, metric in PREFIX_COUNTERS.items()}
    for name, labels, value in _samples(httpx.get(f"{url}/metrics", timeout=30.0).text, {*metric_keys, CACHE_CONFIG}):
        if name in metric_keys:
            if not 0 <= value < 2**63:
                raise SchedlabError(f"{url}/metrics: {name} is {value}, not a count")
            out[metric_keys[name]] += int(value)
        elif "num_gpu_blocks" in labels:
            out["num_gpu_blocks"] = _label_count(labels, "num_gpu_blocks", f"{url}/metrics")
    return out


def _label_count(labels: dict[str, str], key: str, source: str) -> int:
    """A label of the cache config that counts something (blocks, tokens): a whole number >= 1."""
    text = labels[key]
    if not text.isdigit() or not 1 <= int(text) < 2**63:
        raise SchedlabError(f"{source}: {CACHE_CONFIG}'s {key} is {text[:30]!r}, not a count")
    return int(text)


def kv_metrics(text: str, source: str = "the server") -> dict:
    """From a server's ``/metrics`` text (``source``: its URL, for errors): ``usage``, the share
    of its KV blocks in use as of its last engine step (vLLM's gauge: blocks neither free nor
    cached and evictable, over all but its null block; the mean over its engines), ``blocks``,
    that many blocks (one engine's), and ``block_size``, their tokens; each ``None`` where the
    server does not report it. A usage that is not a number in 0..1, or a count that is not a
    whole number of at least 1 (2 blocks: the null block and one), fails."""
    usage, blocks, block_size = [], None, None
    for name, labels, value in _samples(text, {KV_USAGE, CACHE_CONFIG}):
        if name == KV_USAGE:
            if not 0.0 <= value <= 1.0:
                raise SchedlabError(f"{source}'s {KV_USAGE} is {value}, not a share in 0..1")
            usage.append(value)
        elif "num_gpu_blocks" in labels:
            blocks = _label_count(labels, "num_gpu_blocks", source) - 1
            if blocks < 1:
                raise SchedlabError(f"{source}: {CACHE_CONFIG} gives no KV block beside vLLM's null block")
            block_size = _label_count(labels, "block_size", source) if "block_size" in labels else None
    return {"usage": sum(usage) / len(usage) if usage else None, "blocks": blocks, "block_size": block_size}
