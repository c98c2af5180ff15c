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
    from schedlab.backends.vllm_build import build_scheduler, make_request
    from schedlab.engine import EngineConfig

    engine = EngineConfig(max_num_seqs=2, max_num_batched_tokens=256, block_size=16, kv_capacity_blocks=64)
    sched = build_scheduler("tiny-llama", engine, policy=policy, kappa={"en": 1.0})
    sched.clock = lambda: 100.0
    output = 12
    good = [make_request(f"good{i}", 8, output, 2.0 * i, extra_args={**GOOD, "audio_duration_s": 3.0 + i}) for i in range(3)]
    bad = [make_request(f"bad{i}", 8, output, 1.0 + i, extra_args=x) for i, (x, _) in enumerate(BAD)]
    requests = sorted(good + bad, key=lambda r: r.arrival_time)
    with caplog.at_level(logging.WARNING, logger="schedlab.backends.vllm_scheduler"):
        finished = _serve(sched, requests)
    assert finished == {r.request_id for r in requests}
    # Good hints size by kappa x duration; bad ones by max_tokens, each logged once.
    assert [r.schedlab_job.size for r in good] == [3.0, 4.0, 5.0]
    assert all(r.schedlab_job.size == output for r in bad)
    warned = [rec.getMessage() for rec in caplog.records if rec.name == "schedlab.backends.vllm_scheduler"]
    assert sorted(m.split(":")[0] for m in warned) == sorted(f"request {r.request_id}" for r in bad)


def test_priority_orders_only_when_the_deployment_allows_it():
    pytest.importorskip("vllm")
    from schedlab.backends.vllm_build import build_scheduler, make_request
    from schedlab.engine import EngineConfig

    engine = EngineConfig(max_num_seqs=1, max_num_batched_tokens=256, block_size=16, kv_capacity_blocks=64)
    for allow, size in ((False, 5.0), (True, 0.0)):
        sched = build_scheduler("tiny-llama", engine, policy="sjf", kappa={})
        sched.allow_client_priority = allow
        req = make_request("a", 8, 5, 0.0, extra_args={"priority": 0})
        sched.add_request(req)
        assert req.schedlab_job.size == size
