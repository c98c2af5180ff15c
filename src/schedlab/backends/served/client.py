"""An asyncio HTTP client that replays a trace against a vLLM server, streaming.

Each request is sent at its trace arrival offset (from the start of the replay), on its own
connection-pool slot, and its stream is read as it comes: the time of every chunk that
carries new tokens (``usage.completion_tokens`` of vLLM's continuous usage stats) is recorded
for each of those tokens, so TTFT, token gaps and E2EL are what this client saw. Whisper
requests go to ``/v1/audio/transcriptions`` (a WAV of the clip's duration,
:mod:`schedlab.backends.served.wav`, the duration hint as ``vllm_xargs``, a JSON string form
field); decoder requests to ``/v1/completions`` (placeholder token ids, or the trace's own when
it carries sharing data, :mod:`schedlab.sharing`; ``ignore_eos``). A server that reports its
prompt-token details (``cached_tokens`` of the final usage) gives each request's cached tokens.
With ``one_at_a_time`` each request is sent when the previous one has ended, so no two overlap
and the server's cache sees the trace in its order whatever the timing. Each request carries
``X-Request-Id: <token>-<position>`` (``token`` new for each replay), which vLLM puts in its own
request id, so the scheduler's request log can be joined back to the trace
(:func:`schedlab.backends.steps.tables.request_timeline`); the client alone cannot see when the
engine first scheduled a request. A request whose connection is lost (the server closed it
before answering, a transport error) fails the replay with :class:`ConnectionLost`, which a
caller may replay again: the others' results are still complete, but not those of the replay.
The collector's heap is frozen for the replay (:func:`schedlab.compat.cpython.frozen_heap`), as
vLLM's own benchmark client (``vllm bench serve``) and server freeze theirs. :func:`replay_urls`
replays a trace across several servers too, each request sent to the server a :class:`Routing`
chooses at its arrival (:mod:`schedlab.cluster.served`: the routers of a simulated cluster).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import pandas as pd

from schedlab import progress
from schedlab.backends import placeholder_prompt
from schedlab.backends.served.wav import speech_wav
from schedlab.compat.cpython import frozen_heap
from schedlab.errors import SchedlabError
from schedlab.estimate import size_hints
from schedlab.engine.log import RequestLog
from schedlab.sharing import prompt_token_ids, sharing_column

class ConnectionLost(SchedlabError):
    """A replay in which at least one request lost its connection before its answer ended."""


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


class Routing(Protocol):
    """What chooses each request's server in a replay across several: whether it reads the
    servers' KV blocks (then :meth:`read_kv` is awaited before each choice), the choice of
    request ``i``'s server (an index into the replay's URLs) when it is sent, and the end of
    its answer."""

    reads_kv: bool

    async def read_kv(self, clients) -> None: ...

    def route(self, i: int) -> int: ...

    def finished(self, i: int) -> None: ...


async def _replay(urls: list[str], trace: pd.DataFrame, model: str, whisper: bool, timeout_s: float,
                  warmup_s: float, one_at_a_time: bool = False, routing: Routing | None = None) -> ReplayResult:
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


def replay_http(url: str, trace: pd.DataFrame, *, model: str, whisper: bool, timeout_s: float = 600.0,
                warmup_s: float = 0.0, one_at_a_time: bool = False) -> ReplayResult:
    """Replay ``trace`` against the server at ``url`` (times from the replay's start; gaps of
    requests arriving before ``warmup_s`` are not measured); with ``one_at_a_time``, each
    request at its arrival or when the one before it has ended, whichever is later."""
    if whisper and "audio_duration_s" not in trace:
        raise SchedlabError("a Whisper replay needs the trace's audio_duration_s")
    return replay_urls([url], trace, model=model, whisper=whisper, timeout_s=timeout_s, warmup_s=warmup_s,
                       one_at_a_time=one_at_a_time, stage=f"replay against {url}")


def replay_urls(urls: list[str], trace: pd.DataFrame, *, model: str, whisper: bool, timeout_s: float,
                warmup_s: float, one_at_a_time: bool, stage: str, routing: Routing | None = None) -> ReplayResult:
    """The replay against ``urls[0]``, or with ``routing`` across ``urls``, as the progress
    stage ``stage``, with the heap frozen; a request that failed fails it."""
    # checked inside its stage: a replay that failed ends the stage with its error, not its line
    with progress.stage(stage, total=len(trace)), frozen_heap():
        return _checked(asyncio.run(_replay(urls, trace, model, whisper, timeout_s, warmup_s, one_at_a_time, routing)))


def _checked(result: ReplayResult) -> ReplayResult:
    if result.errors:
        kind = ConnectionLost if result.lost == len(result.errors) else SchedlabError
        raise kind(f"{len(result.errors)} request(s) failed; first: {result.errors[0]}")
    return result


def answered(reply):
    """``reply``, unless its status is not 200: then one line naming the URL and status."""
    if reply.status_code != 200:
        raise SchedlabError(f"{reply.url} answered HTTP {reply.status_code}")
    return reply


def server_get(url: str, path: str):
    """The answer to a GET of ``path`` from the server at ``url``; one line if no server answers
    there or it answers other than 200."""
    import httpx

    try:
        return answered(httpx.get(f"{url}{path}", timeout=30.0))
    except httpx.HTTPError as exc:
        raise SchedlabError(f"no server answers at {url} ({type(exc).__name__})") from None
