"""Plug-ins and servers named: a server that answers what vLLM's API does not ends
`cluster-replay` (and the served replays, which read answers the same way) in one line naming the
server and what was wrong; a plug-in router that raises or lacks an attribute, a plug-in that
exits or is interrupted as it loads, and one that takes a name no path may hold end in one line
naming the plug-in."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pandas as pd
import pytest

from test_hostile import files, run_cli, trace_frame  # noqa: F401 (a fixture)
from test_plugins import _env, _fake_plugin

GOOD_METRICS = ('vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="257"} 1.0\n'
                'vllm:kv_cache_usage_perc{engine="0"} 0.25\n')


def _stream(chunks: list[str]) -> bytes:
    return "".join(f"data: {c}\n\n" for c in [*chunks, "[DONE]"]).encode()


#: What each hostile server answers in place of vLLM: (models, metrics, completion stream), and
#: what the error must say.
ANSWERS = {
    "models that are not JSON": (b"<html>oops</html>", GOOD_METRICS, None, "not a list of models"),
    "models as a list": (b"[1, 2]", GOOD_METRICS, None, "not a list of models"),
    "blocks that are not a number": (None, GOOD_METRICS.replace('"257"', '"many"'), None, "num_gpu_blocks is 'many'"),
    "no block but the null one": (None, GOOD_METRICS.replace('"257"', '"1"'), None, "no KV block"),
    "a block size that is not a number": (None, GOOD_METRICS.replace('"16"', '"x16"'), None, "block_size"),
    "a chunk that is not JSON": (None, GOOD_METRICS, _stream(["{oops"]), "not JSON"),
    "a chunk that is a list": (None, GOOD_METRICS, _stream(["[1, 2]"]), "not a JSON object"),
    "a usage that is text": (None, GOOD_METRICS, _stream(['{"usage": "lots"}']), "usage that is not a JSON object"),
    "a trillion tokens": (None, GOOD_METRICS, _stream(['{"usage": {"completion_tokens": 1000000000000}}']),
                          "completion_tokens 1000000000000"),
    "tokens counted backwards": (None, GOOD_METRICS, _stream(['{"usage": {"completion_tokens": 2}}',
                                                              '{"usage": {"completion_tokens": 1}}']), "after 2"),
    "tokens as text": (None, GOOD_METRICS, _stream(['{"usage": {"completion_tokens": "3"}}']), "completion_tokens 3"),
    "negative cached tokens": (None, GOOD_METRICS, _stream(['{"usage": {"completion_tokens": 1, '
                                                            '"prompt_tokens_details": {"cached_tokens": -5}}}']),
                               "cached_tokens -5"),
    "an error chunk": (None, GOOD_METRICS, _stream(['{"error": {"message": "boom"}}']), "boom"),
}


@pytest.fixture
def hostile_server():
    """A local HTTP server answering as ``ANSWERS[name]`` says; yields a function that starts one
    and gives its URL."""
    servers = []

    def start(name: str) -> str:
        models, metrics, stream, _ = ANSWERS[name]

        class Handler(BaseHTTPRequestHandler):
            def _send(self, body: bytes, kind: str = "application/json") -> None:
                self.send_response(200)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                if self.path == "/v1/models":
                    self._send(models or json.dumps({"data": [{"id": "tiny-llama"}]}).encode())
                else:
                    self._send(metrics.encode(), "text/plain")

            def do_POST(self):
                self.rfile.read(int(self.headers["content-length"]))
                self._send(stream or _stream([]), "text/event-stream")

            def log_message(self, *args):
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()


def _replay(files, urls, router="round-robin"):  # noqa: F811
    out = files["out"]
    return ["cluster-replay", "--servers", *urls, "--trace", str(files["trace"]), "--router", router, "--model",
            "tiny-llama", "--scheduler", "fcfs", "--timeout-s", "20", "--out-results", str(out / "r.parquet"),
            "--out-summary", str(out / "r.json"), "--out-replicas", str(out / "replicas.parquet")]


@pytest.mark.slow
@pytest.mark.parametrize("name", ANSWERS, ids=ANSWERS.keys())
def test_a_server_answering_garbage_is_one_line_naming_it(capsys, files, hostile_server, name):  # noqa: F811
    """(`invalid literal for int()`, `JSONDecodeError` and a loop over a trillion tokens before.)"""
    trace_frame().drop(columns=["audio_duration_s", "language"]).to_parquet(files["trace"])
    url = hostile_server(name)
    rc, _, err = run_cli(capsys, _replay(files, [url]))
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert url in err and ANSWERS[name][3] in err, err
    assert not any(files["out"].iterdir())


# -- plug-ins -------------------------------------------------------------------------------------
ROUTER_HEAD = """
from schedlab.registry import register_router
from schedlab.routers.base import Router
"""

PLUG_INS = {
    "a router that raises": ("raising-router", ROUTER_HEAD + """
@register_router("raiser")
class Raiser(Router):
    def route(self, i, candidates):
        return 1 // 0
""", ["--router", "raiser"], "router 'raiser' (raising-router, raising): route raised ZeroDivisionError"),
    "a router that fails as it is made": ("unmade-router", ROUTER_HEAD + """
@register_router("unmade")
class Unmade(Router):
    def __init__(self, seed=0):
        raise RuntimeError("no config")
    def route(self, i, candidates):
        return 0
""", ["--router", "unmade"], "router 'unmade' (unmade-router, unmade): __init__ raised RuntimeError: no config"),
    "a router that reads what is not there": ("reader-router", ROUTER_HEAD + """
@register_router("reader")
class Reader(Router):
    def route(self, i, candidates):
        return self.cluster.nothing_of_the_kind
""", ["--router", "reader"], "route raised AttributeError"),
    "a router without reads_state": ("bare-router", """
from schedlab.registry import register_router
@register_router("bare")
class Bare:
    def __init__(self, seed=0): pass
    def bind(self, cluster): pass
    def route(self, i, candidates): return 0
""", ["--router", "bare"], "plug-in 'bare' (bare-router, bare) failed to load: rejected: "),
    "a plug-in that exits as it loads": ("exiting-plugin", """
import sys
sys.exit(0)
""", ["--router", "exiting"], "plug-in 'exiting' (exiting-plugin, exiting) failed to load: SystemExit"),
    "a name no path may hold": ("evil-router", ROUTER_HEAD + """
@register_router("../../evil name")
class Evil(Router):
    def route(self, i, candidates):
        return 0
""", ["--router", "../../evil name"], "is not a router name"),
}


@pytest.mark.slow
@pytest.mark.parametrize("dist, source, option, message", PLUG_INS.values(), ids=PLUG_INS.keys())
def test_a_broken_plug_in_router_is_one_line_naming_it(files, tmp_path, dist, source, option, message):  # noqa: F811
    site = tmp_path / "site"
    module = dist.split("-")[0] if dist != "raising-router" else "raising"
    _fake_plugin(site, dist, module, source)
    out = files["out"]
    argv = ["cluster", "--trace", str(files["trace"]), "--replicas", "2", *option, "--policy", "fcfs", "--steptime",
            str(files["steptime"]), "--hardware", "A100-40GB", "--model", "whisper-tiny",
            "--out-results", str(out / "r.parquet"), "--out-summary", str(out / "r.json"),
            "--out-replicas", str(out / "p.parquet")]
    proc = subprocess.run([sys.executable, "-m", "schedlab.cli", *argv], capture_output=True, text=True,
                          env=_env(site), timeout=300)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert message in proc.stderr, proc.stderr
    assert not any(out.iterdir())
    if dist == "exiting-plugin":  # the listing goes on, the plug-in set aside in one line
        listed = subprocess.run([sys.executable, "-m", "schedlab.cli", "schedulers"], capture_output=True, text=True,
                                env=_env(site), timeout=300)
        assert "round-robin" in listed.stdout and listed.stderr.count("\n") == 1 and message in listed.stderr


@pytest.mark.slow
def test_a_plug_in_router_that_works_runs_behind_its_guard(files, tmp_path):  # noqa: F811
    """The guard changes nothing of a router that keeps the protocol: the same run as its
    built-in twin."""
    site = tmp_path / "site"
    _fake_plugin(site, "twin-router", "twin", """
from schedlab.routers.balance import RoundRobin
from schedlab.registry import register_router
register_router("twin")(type("Twin", (RoundRobin,), {}))
""")
    results = {}
    for router in ("round-robin", "twin"):
        out = files["dir"] / router
        argv = ["cluster", "--trace", str(files["trace"]), "--replicas", "2", "--router", router, "--policy", "fcfs",
                "--steptime", str(files["steptime"]), "--hardware", "A100-40GB", "--model", "whisper-tiny",
                "--out-results", str(out / "r.parquet"), "--out-summary", str(out / "r.json"),
                "--out-replicas", str(out / "p.parquet")]
        proc = subprocess.run([sys.executable, "-m", "schedlab.cli", *argv], capture_output=True, text=True,
                              env=_env(site), timeout=300)
        assert proc.returncode == 0, proc.stderr
        results[router] = pd.read_parquet(out / "r.parquet")
    assert results["twin"].equals(results["round-robin"])
