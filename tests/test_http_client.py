"""The HTTP client against a real local server that drops connections: a lost connection fails
the replay with ConnectionLost, and a served replay is run again until one keeps them all."""

from __future__ import annotations

import gc
import math
import os
import subprocess
import sys
import time

import pytest

from schedlab.backends.served import client as http_client
from schedlab.backends.served.client import ConnectionLost, replay_http
from schedlab.backends.served.prometheus import kv_metrics
from schedlab.backends.served.server import Server
from schedlab.backends.served.run import replay_served
from schedlab.errors import SchedlabError
from traces import two_class_trace

#: An OpenAI-style streaming completions server (stdlib asyncio, HTTP/1.1 keep-alive) that
#: closes the connection of the first request of each of the first ``drops`` replays (their
#: ``X-Request-Id`` tokens) without answering, answers HTTP 500 to the first ``fails`` requests
#: it keeps, and streams every other request's ``max_tokens`` tokens, one usage chunk per token.
#: It stops on SIGINT (:meth:`Server.stop`) also when the tests run as a background job, whose
#: processes start with SIGINT ignored (the stop then waited out its 60 s).
SERVER = r"""
import asyncio, json, re, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)  # as real servers do, whatever the parent ignored
drops, fails = int(sys.argv[1]), int(sys.argv[2])
dropped, seen = set(), 0

async def handle(reader, writer):
    global seen
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            body = json.loads(await reader.readexactly(int(re.search(rb"(?i)content-length: (\d+)", head).group(1))))
            token, position = re.search(rb"(?i)x-request-id: (\S+)-(\d+)", head).groups()
            if position == b"0" and len(dropped) < drops:
                dropped.add(token)
                return
            seen += 1
            if seen <= fails:
                writer.write(b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 4\r\n\r\nboom")
            else:
                chunks = [f"data: {json.dumps({'usage': {'completion_tokens': k}})}\n\n" for k in range(1, body["max_tokens"] + 1)]
                payload = ("".join(chunks) + "data: [DONE]\n\n").encode()
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: %d\r\n\r\n" % len(payload) + payload)
            await writer.drain()
    except asyncio.IncompleteReadError:
        pass
    finally:
        writer.close()

async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()

asyncio.run(main())
"""


@pytest.fixture
def dropping_server(tmp_path):
    """Start the server above with ``(drops, fails)``; a :class:`Server` of its process."""
    procs = []

    def start(drops: int, fails: int = 0) -> Server:
        proc = subprocess.Popen([sys.executable, "-c", SERVER, str(drops), str(fails)], stdout=subprocess.PIPE,
                                text=True, start_new_session=True)
        procs.append(proc)
        port = int(proc.stdout.readline())
        return Server(proc, f"http://127.0.0.1:{port}", tmp_path / "server.log", time.monotonic())

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def _trace():
    return two_class_trace(n=12, rate=50.0, output=(1, 6), prompt=(1, 8))


def test_a_lost_connection_fails_the_replay_as_connection_lost(dropping_server):
    server = dropping_server(drops=1)
    with pytest.raises(ConnectionLost, match="1 request\\(s\\) failed.*connection lost"):
        replay_http(server.url, _trace(), model="m", whisper=False)


def test_a_replay_runs_with_the_heap_it_found_frozen(dropping_server, monkeypatch):
    """The collector walks none of the objects alive before a replay while it runs (a walk of
    the client's whole heap held its event loop for 200 ms), and all of them again after it."""
    before = [[]]  # a container the collector tracks
    reachable = []
    replay = http_client._replay

    async def watched(*args):
        reachable.append(any(o is before for o in gc.get_objects()))
        return await replay(*args)

    monkeypatch.setattr(http_client, "_replay", watched)
    replay_http(dropping_server(drops=0).url, _trace(), model="m", whisper=False)
    assert reachable == [False]
    assert any(o is before for o in gc.get_objects())
    assert gc.get_freeze_count() == 0


def test_a_replay_that_raises_leaves_the_heap_unfrozen(monkeypatch):
    async def broken(*args):
        raise RuntimeError("the event loop failed")

    monkeypatch.setattr(http_client, "_replay", broken)
    with pytest.raises(RuntimeError, match="event loop failed"):
        replay_http("http://127.0.0.1:9", _trace(), model="m", whisper=False)
    assert gc.get_freeze_count() == 0


def test_a_server_error_is_not_a_lost_connection(dropping_server):
    server = dropping_server(drops=0, fails=1)
    with pytest.raises(SchedlabError, match="HTTP 500") as err:
        replay_http(server.url, _trace(), model="m", whisper=False)
    assert not isinstance(err.value, ConnectionLost)


@pytest.mark.slow
def test_a_served_replay_that_lost_a_connection_is_run_again(dropping_server, capsys):
    trace = _trace()
    run = replay_served(dropping_server(drops=2), trace, model="m", whisper=False)
    # Each drop fails one whole replay: the third keeps every connection.
    assert run.attempts == 3 and run.figures()["attempts"] == 3
    assert capsys.readouterr().err.count("lost a connection, replaying again") == 2
    assert run.requests["finish_s"].notna().all()
    assert (run.requests["request_id"].to_numpy() == trace["request_id"].to_numpy()).all()


def test_a_served_replay_gives_up_after_its_attempts(dropping_server):
    with pytest.raises(ConnectionLost):
        replay_served(dropping_server(drops=2), _trace(), model="m", whisper=False, attempts=2)


@pytest.mark.slow
def test_a_served_replay_judged_not_to_measure_the_engine_is_run_again(dropping_server, capsys):
    """Attempt 1 loses a connection, attempt 2 is judged flawed, attempt 3 is kept; the kept
    run says why the others were set aside."""
    judged = []

    def flaw(run):
        judged.append(run.token)
        return "client late" if len(judged) == 1 else ""

    run = replay_served(dropping_server(drops=1), _trace(), model="m", whisper=False, flaw=flaw)
    assert run.attempts == 3 and run.rejected == ("connection lost", "client late")
    assert run.figures()["replayed_for"] == "connection lost; client late"
    assert len(set(judged)) == 2 and run.token == judged[-1]  # each attempt a replay of its own
    assert "does not measure the engine (client late), replaying again" in capsys.readouterr().err


def test_a_replay_flawed_at_every_attempt_keeps_the_last(dropping_server):
    run = replay_served(dropping_server(drops=0), _trace(), model="m", whisper=False, attempts=2,
                        flaw=lambda run: "front end lagged")
    assert run.attempts == 2 and run.rejected == ("front end lagged",)
    assert run.requests["finish_s"].notna().all()
    with pytest.raises(SchedlabError, match="at least 1"):
        replay_served(dropping_server(drops=0), _trace(), model="m", whisper=False, attempts=0)


@pytest.mark.slow
def test_the_last_attempt_after_two_flawed_runs_on_a_fresh_server(dropping_server, capsys):
    """Two flawed attempts on the first server, the third on the server `restart` started
    (the old one stopped); one flawed attempt and a clean one restart nothing."""
    first, restarted = dropping_server(drops=0), []

    def restart(old):
        old.stop()
        restarted.append(dropping_server(drops=0))
        return restarted[-1]

    on = []

    def flaw(run):
        on.append(run.server)
        return "front end lagged" if run.server is first else ""

    run = replay_served(first, _trace(), model="m", whisper=False, flaw=flaw, restart=restart)
    assert len(restarted) == 1 and first.proc.poll() is not None
    assert on == [first, first, restarted[0]] and run.server is restarted[0]
    assert run.attempts == 3 and run.rejected == ("front end lagged", "front end lagged (server restarted)")
    assert "replay 3 of 3 on a fresh server" in capsys.readouterr().err
    assert run.requests["finish_s"].notna().all()

    verdicts = iter(["client late", ""])
    run = replay_served(restarted[0], _trace(), model="m", whisper=False, restart=restart,
                        flaw=lambda run: next(verdicts))
    assert len(restarted) == 1 and run.attempts == 2 and run.server is restarted[0]


def test_a_served_replay_records_how_long_tasks_waited_for_a_core_io_and_memory(dropping_server, monkeypatch):
    from pathlib import Path

    from schedlab.backends.served.host_counters import PRESSURE, machine_stall_s

    before = machine_stall_s()
    run = replay_served(dropping_server(drops=0), _trace(), model="m", whisper=False)
    after = machine_stall_s()
    figures = run.figures()
    for resource in PRESSURE:
        if Path(f"/proc/pressure/{resource}").exists():  # Linux with pressure stall information
            assert before[resource] <= before[resource] + run.stall_s[resource] <= after[resource]
            assert 0.0 <= figures[f"{resource}_wait_share"] <= 1.0 + 1e-9
    # Without the kernel's figures: NaN, never an error.
    real = Path.read_text

    def no_pressure(self, *args, **kwargs):
        if "pressure" in str(self):
            raise FileNotFoundError(self)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", no_pressure)
    assert all(math.isnan(v) for v in machine_stall_s().values())


def test_interference_is_a_share_of_the_window_the_counters_were_read_over():
    """Other processes' CPU time (the machine's less the server's and the client's) over the
    replay's window ``started..ended`` times the cores: 6 CPU-seconds of 10 s on 2 cores is 0.3,
    whatever the replay's own (shorter) wall time; never above 1 for counters read inside it."""
    from schedlab.backends.served.run import ServedRun

    run = ServedRun(None, None, {}, wall_s=9.0, server_cpu_s=5.0, client_cpu_s=1.0, machine_cpu_s=12.0,
                    started=100.0, ended=110.0)
    assert run.window_s == 10.0
    assert run.foreign_cpu_share(cores=2) == pytest.approx(0.3)
    assert ServedRun(None, None, {}, 9.0, 0.0, 0.0, machine_cpu_s=20.0, started=100.0,
                     ended=110.0).foreign_cpu_share(cores=2) == pytest.approx(1.0)


def test_a_served_replay_reads_its_counters_inside_its_window(dropping_server, monkeypatch):
    """Every CPU and stall counter of a replay is read between ``started`` and ``ended``, so
    the shares taken over that window are shares of what was counted."""
    import schedlab.backends.served.run as vs

    read_at = []

    def timed(counter):
        def read(*args, **kwargs):
            read_at.append(time.time())
            return counter(*args, **kwargs)
        return read

    counters = ("machine_busy_cpu_s", "machine_stall_s", "thread_waited_s", "major_faults", "machine_steal_s")
    for name in counters:
        monkeypatch.setattr(vs, name, timed(getattr(vs, name)))
    server = dropping_server(drops=0)
    monkeypatch.setattr(server, "cpu_seconds", timed(server.cpu_seconds))
    run = replay_served(server, _trace(), model="m", whisper=False)
    assert len(read_at) == 2 * (len(counters) + 1)  # each, and the server's CPU, before and after
    assert run.started <= min(read_at) and max(read_at) <= run.ended
    assert 0.0 <= run.foreign_cpu_share() <= 1.0
    figures = run.figures()
    assert 0.0 <= figures["client_waited_s"] <= run.window_s
    assert figures["client_major_faults"] >= 0
    assert 0.0 <= figures["steal_s"] <= run.window_s * os.cpu_count()


def test_a_thread_kept_from_its_core_counts_its_wait():
    """This thread and a spinning process share one core for a second: the thread's wait for
    the core (what would make a replay's client send late) is counted, a good part of that
    second and no more than the time it took."""
    from schedlab.backends.served.host_counters import thread_waited_s

    was = os.sched_getaffinity(0)
    core = min(was)
    hog = subprocess.Popen([sys.executable, "-c", f"import os; os.sched_setaffinity(0, {{{core}}}); "
                            "print('spinning', flush=True)\nwhile True: pass"], stdout=subprocess.PIPE, text=True)
    try:
        assert hog.stdout.readline().strip() == "spinning"
        os.sched_setaffinity(0, {core})
        start, before = time.monotonic(), thread_waited_s()
        while time.monotonic() < start + 1.0:
            pass
        waited, took = thread_waited_s() - before, time.monotonic() - start
    finally:
        os.sched_setaffinity(0, was)
        hog.kill()
        hog.wait()
    assert 0.2 < waited <= took


#: A server's /metrics as vLLM exposes them (two engines; the lines a KV reader needs, and others).
METRICS = """# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="tiny-llama"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="tiny-llama"} 0.75
vllm:num_requests_running{engine="0",model_name="tiny-llama"} 3.0
vllm:cache_config_info{block_size="32",engine="0",kv_cache_dtype_skip_layers="['a', 'b']",num_gpu_blocks="256"} 1.0
vllm:prefix_cache_queries_total{engine="0",model_name="tiny-llama"} 640.0
"""


def test_a_servers_kv_blocks_are_read_from_its_metrics():
    """The share in use is the engines' mean; the blocks leave out vLLM's null block; what a
    server does not report is None; a sample's timestamp is not its value."""
    assert kv_metrics(METRICS) == {"usage": 0.5, "blocks": 255, "block_size": 32}
    assert kv_metrics(METRICS.replace("} 0.25", "} 0.25 1764201600000")) == kv_metrics(METRICS)
    for name, key in (("vllm:kv_cache_usage_perc", "usage"), ("vllm:cache_config_info", "blocks")):
        text = "\n".join(line for line in METRICS.splitlines() if not line.startswith(name))
        assert kv_metrics(text)[key] is None
    for bad in ("NaN", "1.5"):
        with pytest.raises(SchedlabError, match="not a share in 0..1"):
            kv_metrics(METRICS.replace("} 0.75", f"}} {bad}"))
