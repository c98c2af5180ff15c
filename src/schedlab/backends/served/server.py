"""``vllm serve`` with schedlab's scheduler class: its command line, start-up and shutdown.

The server is vLLM's own OpenAI-compatible server, started as a user would start it (the
``vllm`` command), with the model folder, dummy weights and the engine limits of an
:class:`~schedlab.backends.vllm.engine.LaunchSpec`. On CPU the KV cache is given in bytes
(``--kv-cache-memory-bytes``), which the CPU backend takes instead of reading
``--gpu-memory-utilization`` as a share of the NUMA node's memory (whose default, 0.92, it
refuses on a small machine); the same flag sizes the cache on a GPU.

Whisper's transcription endpoint has no ``ignore_eos``: ``NoStopTokens``, a logits
processor given with ``--logits-processors``, keeps the model's end-of-text tokens from being
sampled, so every request generates exactly its ``max_completion_tokens``, as the trace says.
Decoder models run without a tokenizer (``--skip-tokenizer-init``): prompts are token ids.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path


from schedlab.backends.vllm.engine import (
    ASYNC_PLAN_SCHEDULER,
    ASYNC_SCHEDULER,
    PLAN_SCHEDULER,
    SCHEDULER,
    LaunchSpec,
    cpu_engine_env,
)
from schedlab.errors import SchedlabError
from schedlab.latency.catalogue import model_arch
from schedlab.backends.served.host_counters import process_group_cpu_s


#: ``--logits-processors`` for Whisper (vLLM wants ``<module>:<type>``), named here so that the
#: client side never imports vLLM.
NO_STOP = "schedlab.backends.vllm.logits:NoStopTokens"


#: ``--middleware`` that logs each numeric hint a client sends as a boolean (vLLM reads it as
#: 1 or 0), named here so that the client side never imports vLLM.
HINT_WARNINGS = "schedlab.backends.vllm.hints.CoercedHints"


#: Seconds a server may take to answer ``/health`` after start (CPU: about a minute).
READY_TIMEOUT_S = 600.0


def serve_command(folder: str | Path, spec: LaunchSpec, *, policy: str = "fcfs", kappa: dict[str, float] | None = None,
                  builder: str | None = None, step_log: str | Path | None = None) -> list[str]:
    """The ``vllm serve`` command line of ``spec`` with ``policy`` as the waiting queue or,
    given ``builder``, a paper C scheduler's step plans (no host or port); with ``step_log``,
    the scheduler logs every engine step there (:mod:`schedlab.backends.steps.log`)."""
    arch = model_arch(spec.model)
    whisper = arch.encoder_frames > 0
    cpu = spec.device == "cpu"
    logged = {"step_log": str(step_log)} if step_log else {}
    if builder is None:
        options = {"policy": policy, "kappa": kappa or {}, **logged}
        cls, schedlab = SCHEDULER if cpu else ASYNC_SCHEDULER, {"schedlab": options}
    else:
        cls, schedlab = PLAN_SCHEDULER if cpu else ASYNC_PLAN_SCHEDULER, {"schedlab": {"scheduler": builder, **logged}}
    cmd = [
        "vllm", "serve", str(folder),
        "--scheduler-cls", cls,
        "--additional-config", json.dumps(schedlab, separators=(",", ":")),
        "--load-format", "dummy",
        "--kv-cache-memory-bytes", str(int(spec.kv_cache_gib * 2**30)),
        "--max-num-seqs", str(spec.max_num_seqs),
        "--max-num-batched-tokens", str(spec.max_num_batched_tokens),
        "--max-model-len", str(arch.max_target_positions),
        "--block-size", str(spec.block_size),
        "--dtype", spec.dtype,
        *(["--enable-prefix-caching", "--enable-prompt-tokens-details"] if spec.prefix_caching
          else ["--no-enable-prefix-caching"]),
        "--seed", str(spec.seed),
        "--served-model-name", spec.model,
        "--middleware", HINT_WARNINGS,
    ]
    if spec.enforce_eager:
        cmd.append("--enforce-eager")
    cmd += ["--logits-processors", NO_STOP] if whisper else ["--skip-tokenizer-init"]
    return cmd


def free_port() -> int:
    """A TCP port on localhost that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_env(spec: LaunchSpec) -> dict[str, str]:
    """The server's environment: as the in-process engine's (see ``start_engine``), without
    that engine's switch to run vLLM's engine core in-process."""
    env = {k: v for k, v in os.environ.items() if k != "VLLM_ENABLE_V1_MULTIPROCESSING"}
    env.setdefault("VLLM_LOGGING_LEVEL", "INFO")
    return cpu_engine_env(env) if spec.device == "cpu" else env


@dataclass
class Server:
    """A running ``vllm serve`` process group (led by its lifeline, ``proc``) and where it answers."""

    proc: subprocess.Popen
    url: str
    log: Path
    started_s: float
    ready_s: float = float("nan")

    def cpu_seconds(self) -> float:
        """User + system CPU seconds of the server's process group so far (Linux ``/proc``)."""
        return process_group_cpu_s(self.proc.pid)

    def stop(self, timeout_s: float = 60.0) -> None:
        """SIGINT to the group (vLLM's graceful shutdown), SIGKILL after ``timeout_s``."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        try:  # worker processes left behind by a crash
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def with_lifeline(cmd: list[str], hold: int | None = None) -> list[str]:
    """``cmd`` run under :mod:`schedlab.backends.served.lifeline`, which stops the server and every
    process it started when this process ends, or the pipeline (Snakemake) this process runs
    under ends, however either ends (SIGKILL too), within seconds; ``hold``, a file descriptor
    the lifeline and the server keep open while they live (the output's lock)."""
    from schedlab.compat.snakemake import pipeline_process

    pipeline = pipeline_process()
    return [sys.executable, "-m", "schedlab.backends.served.lifeline", str(os.getpid()),
            *(["--pipeline", str(pipeline)] if pipeline is not None else []),
            *(["--hold", str(hold)] if hold is not None else []), "--", *cmd]


def _server_lock(log: Path) -> int:
    """An exclusive lock on the server of ``log`` (a hidden file beside it, which a pipeline's
    resume does not delete with the outputs), as an open descriptor; one line when a server of
    an earlier run still holds it (a lifeline, or its server, keeps it while they live)."""
    import fcntl

    path = log.parent / f".{log.name}.server"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise SchedlabError(f"{log}: a server started for it by an earlier run still runs (process group {holder}): "
                            "wait for it to stop, or stop it; a second server is not started beside it") from None
    return fd


def start_server(cmd: list[str], *, log: str | Path, env: dict[str, str] | None = None,
                 port: int | None = None, cwd: str | Path | None = None,
                 timeout_s: float = READY_TIMEOUT_S, append: bool = False) -> Server:
    """Start ``cmd`` (a ``vllm serve`` line) on ``port`` with its output in ``log`` (after
    what the log holds, with ``append``), and wait until ``/health`` answers 200; on a timeout
    or an early exit the server is stopped and the log's tail is in the error. The server runs
    in a session of its own under a lifeline (:func:`with_lifeline`): it goes when this
    process goes."""
    import httpx

    from schedlab.io import check_target

    port = port or free_port()
    log = Path(log)
    check_target(log)  # a log is written through: never into a device, a FIFO or an input
    log.parent.mkdir(parents=True, exist_ok=True)
    lock = _server_lock(log)
    try:
        with open(log, "a" if append else "w") as out:
            out.write("$ " + shlex.join(cmd) + f" --port {port}\n")
            out.flush()
            proc = subprocess.Popen(
                with_lifeline([*cmd, "--host", "127.0.0.1", "--port", str(port)], hold=lock),
                stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True, pass_fds=(lock,),
            )
        os.ftruncate(lock, 0)
        os.pwrite(lock, f"{proc.pid}\n".encode(), 0)
    finally:
        os.close(lock)  # the lifeline and the server hold it from here
    server = Server(proc, f"http://127.0.0.1:{port}", log, time.monotonic())
    deadline = server.started_s + timeout_s
    while True:
        if proc.poll() is not None:
            raise SchedlabError(f"vllm serve exited with {proc.returncode}:\n{_tail(log)}")
        try:
            if httpx.get(f"{server.url}/health", timeout=2.0).status_code == 200:
                server.ready_s = time.monotonic() - server.started_s
                return server
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            server.stop()
            raise SchedlabError(f"vllm serve not ready after {timeout_s:.0f} s:\n{_tail(log)}")
        time.sleep(1.0)


def _tail(path: Path, lines: int = 30) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
