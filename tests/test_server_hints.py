"""Client hints (vllm_xargs) on a server running schedlab's scheduler: checked once per
request; a bad one sizes its request by max_tokens and never breaks a step."""

from __future__ import annotations

import logging
import math

import pytest

from schedlab.errors import SchedlabError
from schedlab.validation.hints import MAX_DURATION_S, checked_hint, server_options

GOOD = {"audio_duration_s": 7.4, "language": "en"}
#: Malformed and extreme hints, each with the key its one-line error names.
BAD = [
    ({"language": ["en"], "audio_duration_s": 2}, "language"),
    ({"audio_duration_s": "7"}, "audio_duration_s"),
    ({"audio_duration_s": 1e308}, "audio_duration_s"),
    ({"audio_duration_s": math.inf}, "audio_duration_s"),
    ({"audio_duration_s": math.nan}, "audio_duration_s"),
    ({"speech_duration_s": -1.0}, "speech_duration_s"),
    ({"audio_duration_s": True}, "audio_duration_s"),
    ({"language": "x" * 10_000}, "language"),
    ({"priority": {"a": 1}}, "priority"),
    ({"priority": -1e300}, "priority"),
    ({"priority": math.nan}, "priority"),
    ({"priority": 3}, "priority"),  # fine in itself, but this server does not allow client priorities
]


def test_good_hints_pass_typed_and_unknown_keys_are_left_alone():
    assert checked_hint({**GOOD, "other_plugin": [1, 2]}, allow_priority=False) == GOOD
    assert checked_hint(None, allow_priority=False) == {}
    assert checked_hint({"priority": 2}, allow_priority=True) == {"language": "en", "priority": 2.0}
    assert checked_hint({"audio_duration_s": MAX_DURATION_S}, allow_priority=False)["audio_duration_s"] == MAX_DURATION_S


@pytest.mark.parametrize("xargs, key", BAD)
def test_bad_hint_is_one_line_naming_the_key(xargs, key):
    with pytest.raises(SchedlabError) as err:
        checked_hint(xargs, allow_priority=False)
    message = str(err.value)
    assert "\n" not in message and len(message) < 300
    assert message.startswith(f"vllm_xargs: key {key!r}")


def test_server_options_default_to_no_client_priorities():
    assert server_options(None).allow_client_priority is False
    opts = server_options({"schedlab": {"policy": "sjf", "kappa": {"en": 2.96}, "allow_client_priority": True}})
    assert opts.allow_client_priority and opts.kappa == {"en": 2.96}
    with pytest.raises(SchedlabError, match="allow_client_priority"):
        server_options({"schedlab": {"allow_client_priority": "yes"}})
    with pytest.raises(SchedlabError, match="kappa.en"):
        server_options({"schedlab": {"kappa": {"en": -1}}})


# -- through vLLM's real scheduler ------------------------------------------------------------
def _serve(sched, requests):
    """Step the scheduler (synthetic model outputs, virtual clock) until every request is done;
    returns the ids that finished."""
    from vllm.v1.outputs import ModelRunnerOutput

    for r in requests:
        sched.add_request(r)
    finished = set()
    for _ in range(500):
        out = sched.schedule()
        ids = list(out.num_scheduled_tokens)
        sampled = [[] if sched.requests[r].is_prefill_chunk else [100] for r in ids]
        res = sched.update_from_output(
            out, ModelRunnerOutput(req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)}, sampled_token_ids=sampled)
        )
        finished |= {o.request_id for e in res.values() for o in e.outputs if o.finish_reason is not None}
        if not sched.has_unfinished_requests():
            break
    return finished


@pytest.mark.parametrize("policy", ["sjf", "hrrn"])
def test_scheduler_serves_every_request_whatever_the_hints(policy, caplog):
    pytest.importorskip("vllm")
    from schedlab.backends.vllm.build import build_scheduler, make_request
    from schedlab.engine import EngineConfig

    engine = EngineConfig(max_num_seqs=2, max_num_batched_tokens=256, block_size=16, kv_capacity_blocks=64)
    sched = build_scheduler("tiny-llama", engine, policy=policy, kappa={"en": 1.0})
    sched.clock = lambda: 100.0
    output = 12
    good = [make_request(f"good{i}", 8, output, 2.0 * i, extra_args={**GOOD, "audio_duration_s": 3.0 + i}) for i in range(3)]
    bad = [make_request(f"bad{i}", 8, output, 1.0 + i, extra_args=x) for i, (x, _) in enumerate(BAD)]
    requests = sorted(good + bad, key=lambda r: r.arrival_time)
    with caplog.at_level(logging.WARNING, logger="schedlab.backends.vllm.scheduler"):
        finished = _serve(sched, requests)
    assert finished == {r.request_id for r in requests}
    # Good hints size by kappa x duration; bad ones by max_tokens, each logged once.
    assert [r.schedlab_job.size for r in good] == [3.0, 4.0, 5.0]
    assert all(r.schedlab_job.size == output for r in bad)
    warned = [rec.getMessage() for rec in caplog.records if rec.name == "schedlab.backends.vllm.scheduler"]
    assert sorted(m.split(":")[0] for m in warned) == sorted(f"request {r.request_id}" for r in bad)


def test_priority_orders_only_when_the_deployment_allows_it():
    pytest.importorskip("vllm")
    from schedlab.backends.vllm.build import build_scheduler, make_request
    from schedlab.engine import EngineConfig

    engine = EngineConfig(max_num_seqs=1, max_num_batched_tokens=256, block_size=16, kv_capacity_blocks=64)
    for allow, size in ((False, 5.0), (True, 0.0)):
        sched = build_scheduler("tiny-llama", engine, policy="sjf", kappa={})
        sched.allow_client_priority = allow
        req = make_request("a", 8, 5, 0.0, extra_args={"priority": 0})
        sched.add_request(req)
        assert req.schedlab_job.size == size


# -- hints vLLM changes before the scheduler sees them ------------------------------------------
import asyncio  # noqa: E402
import json  # noqa: E402

import httpx  # noqa: E402

from schedlab.backends.vllm.hints import CoercedHints  # noqa: E402
from schedlab.validation.hints import NUMERIC_HINTS, coerced_hints  # noqa: E402


async def _echo(scope, receive, send):
    """An ASGI app that answers with the body it received."""
    body, more = b"", True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": body})


def _post(caplog, **request) -> httpx.Response:
    async def go():
        transport = httpx.ASGITransport(app=CoercedHints(_echo))
        async with httpx.AsyncClient(transport=transport, base_url="http://server") as client:
            return await client.post(**request)

    with caplog.at_level(logging.WARNING, logger="schedlab.backends.vllm.hints"):
        return asyncio.run(go())


@pytest.mark.parametrize("key", NUMERIC_HINTS)
@pytest.mark.parametrize("value", [True, False])
def test_each_numeric_hint_sent_as_a_boolean_is_logged_json_and_form(caplog, key, value):
    """vLLM's request models read `true` as 1 and `false` as 0 before the scheduler sees the
    hint: the middleware logs each such hint, in a JSON body (completions) and in the form field
    of a transcription, and passes the body on unchanged."""
    xargs = {key: value, "language": "en", "tbt_target_s" if key != "tbt_target_s" else "priority": 0.5}
    body = {"model": "m", "prompt": [1, 2], "vllm_xargs": xargs}
    r = _post(caplog, url="/v1/completions", json=body)
    assert r.status_code == 200 and json.loads(r.content) == body
    form = {"model": "m", "vllm_xargs": json.dumps(xargs)}
    r = _post(caplog, url="/v1/audio/transcriptions", data=form, files={"file": ("a.wav", b"RIFF" + b"\0" * 64)})
    assert r.status_code == 200 and b'name="vllm_xargs"' in r.content
    warned = [rec.getMessage() for rec in caplog.records]
    assert len(warned) == 2, warned
    assert all(f"vllm_xargs key {key!r} is {json.dumps(value)}, which vLLM reads as {int(value)}" in w for w in warned)


def test_numbers_and_bodies_without_booleans_pass_without_a_warning(caplog):
    for xargs in ({"audio_duration_s": 1, "language": "en"}, {"language": "true"}, {"other": True}):
        r = _post(caplog, url="/v1/completions", json={"prompt": [1], "vllm_xargs": xargs})
        assert r.status_code == 200
    r = _post(caplog, url="/v1/completions", content=b"not json, true")
    assert r.status_code == 200 and r.content == b"not json, true"
    assert not caplog.records
    assert coerced_hints({"priority": True, "tbt_target_s": 1.0, "language": True}) == ["priority"]
