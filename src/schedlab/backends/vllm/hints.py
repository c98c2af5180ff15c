"""An ASGI middleware for ``vllm serve`` (``--middleware schedlab.backends.vllm.hints.CoercedHints``)
that logs a warning for each hint vLLM changes before schedlab's scheduler sees it.

vLLM's request models type ``vllm_xargs`` values as str, int or float, so a JSON ``true`` sent
as ``tbt_target_s`` or ``audio_duration_s`` reaches the scheduler as 1 (``false`` as 0), where
no check can tell it from a number the client meant. This middleware reads each POST body as
it arrives (JSON, or the ``vllm_xargs`` field of a multipart form: the transcription
endpoint), logs every numeric hint that is a boolean (:func:`schedlab.validation.hints.coerced_hints`)
and passes the request on unchanged. A body without ``vllm_xargs`` and without ``true`` or
``false`` is passed on after one byte search, so the front end's time is not changed.
"""

from __future__ import annotations

import json
import re

from schedlab.backends import server_logger
from schedlab.validation.hints import coerced_hints

logger = server_logger(__name__)

#: The ``vllm_xargs`` field of a multipart form body (its value up to the next boundary).
FORM_FIELD = re.compile(rb'name="vllm_xargs"\r\n(?:[^\r\n]*\r\n)*?\r\n(.*?)\r\n--', re.S)


def sent_xargs(body: bytes) -> dict | None:
    """A request body's ``vllm_xargs`` as the client sent it (None: none, or not readable)."""
    try:
        if body.lstrip()[:1] == b"{":
            xargs = json.loads(body).get("vllm_xargs")
        else:
            found = FORM_FIELD.search(body)
            xargs = json.loads(found.group(1)) if found else None
    except (ValueError, AttributeError, RecursionError):
        return None
    return xargs if isinstance(xargs, dict) else None


class CoercedHints:
    """Logs, per request, each numeric hint sent as a boolean (see the module docstring)."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("method") != "POST":
            return await self.app(scope, receive, send)
        messages, body = [], b""
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        if b"vllm_xargs" in body and (b"true" in body or b"false" in body):
            xargs = sent_xargs(body)
            for key in coerced_hints(xargs):
                logger.warning("request to %s: vllm_xargs key %r is %s, which vLLM reads as %d; send a number",
                               scope.get("path", "?"), key, json.dumps(xargs[key]), int(xargs[key]))
        pending = iter(messages)

        async def replay():
            for message in pending:
                return message
            return await receive()

        return await self.app(scope, replay, send)
