"""``vllm serve`` with schedlab's scheduler class: its command line, start-up and shutdown.

The server is vLLM's own OpenAI-compatible server, started as a user would start it (the
``vllm`` command), with the model folder, dummy weights and the engine limits of an
:class:`~schedlab.backends.vllm_engine.EngineSpec`. On CPU the KV cache is given in bytes
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
import resource
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from schedlab.backends.vllm_engine import (
    ASYNC_PLAN_SCHEDULER,
    ASYNC_SCHEDULER,
    PLAN_SCHEDULER,
    SCHEDULER,
    EngineSpec,
    cpu_engine_env,
)
from schedlab.errors import SchedlabError
from schedlab.latency.catalogue import model_arch

#: ``--logits-processors`` for Whisper (vLLM wants ``<module>:<type>``), named here so that the
#: client side never imports vLLM.
NO_STOP = "schedlab.backends.vllm_logits:NoStopTokens"
#: Seconds a server may take to answer ``/health`` after start (CPU: about a minute).
READY_TIMEOUT_S = 600.0


def serve_command(folder: str | Path, spec: EngineSpec, *, policy: str = "fcfs", kappa: dict[str, float] | None = None,
                  builder: str | None = None, step_log: str | Path | None = None) -> list[str]:
    """The ``vllm serve`` command line of ``spec`` with ``policy`` as the waiting queue or,
    given ``builder``, a paper C scheduler's step plans (no host or port); with ``step_log``
    (policies only), the scheduler logs every engine step there
    (:mod:`schedlab.backends.step_log`)."""
    arch = model_arch(spec.model)
    whisper = arch.encoder_frames > 0
    cpu = spec.device == "cpu"
    if builder is None:
        options = {"policy": policy, "kappa": kappa or {}, **({"step_log": str(step_log)} if step_log else {})}
        cls, schedlab = SCHEDULER if cpu else ASYNC_SCHEDULER, {"schedlab": options}
    else:
        if step_log:
            raise SchedlabError("the step log is written by the policy scheduler, not by step-plan schedulers")
        cls, schedlab = PLAN_SCHEDULER if cpu else ASYNC_PLAN_SCHEDULER, {"schedlab": {"scheduler": builder}}
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


def server_env(spec: EngineSpec) -> dict[str, str]:
    """The server's environment: as the in-process engine's (see ``start_engine``), without
    that engine's switch to run vLLM's engine core in-process."""
    env = {k: v for k, v in os.environ.items() if k != "VLLM_ENABLE_V1_MULTIPROCESSING"}
    env.setdefault("VLLM_LOGGING_LEVEL", "INFO")
    return cpu_engine_env(env) if spec.device == "cpu" else env


@dataclass
class Server:
    """A running ``vllm serve`` process group and where it answers."""

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


def start_server(cmd: list[str], *, log: str | Path, env: dict[str, str] | None = None,
                 port: int | None = None, cwd: str | Path | None = None,
                 timeout_s: float = READY_TIMEOUT_S, append: bool = False) -> Server:
    """Start ``cmd`` (a ``vllm serve`` line) on ``port`` with its output in ``log`` (after
    what the log holds, with ``append``), and wait until ``/health`` answers 200; on a timeout
    or an early exit the server is stopped and the log's tail is in the error."""
    import httpx

    port = port or free_port()
    log = Path(log)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a" if append else "w") as out:
        out.write("$ " + shlex.join(cmd) + f" --port {port}\n")
        out.flush()
        proc = subprocess.Popen(
            [*cmd, "--host", "127.0.0.1", "--port", str(port)],
            stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True,
        )
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


def process_group_cpu_s(pgid: int) -> float:
    """User + system CPU seconds of the live processes of group ``pgid`` (Linux ``/proc``)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:  # fields after the name: state ppid pgrp ...
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / tick


def _cpu_line() -> list[int]:
    return [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]


def machine_busy_cpu_s() -> float:
    """CPU seconds every core of the machine has spent busy since boot (``/proc/stat``)."""
    fields = _cpu_line()
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def machine_steal_s() -> float:
    """CPU seconds since boot that a hypervisor gave this machine's cores to others while they
    had work (``/proc/stat``'s steal): every process stalls then, the engine and client alike."""
    return _cpu_line()[7] / os.sysconf("SC_CLK_TCK")


def thread_waited_s() -> float:
    """Seconds the calling thread has spent ready to run but waiting for a core
    (``/proc/thread-self/schedstat``); NaN where the kernel does not keep it."""
    try:
        return int(Path("/proc/thread-self/schedstat").read_text().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return float("nan")


def major_faults() -> int:
    """Page faults of this process that had to read from disk, since it started."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_majflt


#: Linux's pressure stall information: the time, since boot, during which some task waited for
#: a core (``cpu``), for IO (``io``) or for memory (``memory``).
PRESSURE = ("cpu", "io", "memory")


def machine_stall_s() -> dict[str, float]:
    """Seconds since boot during which at least one task on the machine waited for a core, for
    IO and for memory (``/proc/pressure``, "some"; NaN where the kernel does not keep them)."""
    out = {}
    for resource in PRESSURE:
        try:
            some = Path(f"/proc/pressure/{resource}").read_text().split("\n", 1)[0]
            out[resource] = int(some.rsplit("total=", 1)[1]) / 1e6
        except (OSError, IndexError, ValueError):
            out[resource] = float("nan")
    return out


@dataclass
class ServedRun:
    """One replay's results table, token gaps (all, and per class), and what the machine did
    meanwhile: its counters (CPU times, stalls) are read inside the wall-clock window
    ``started`` to ``ended``, which also finds the replay's engine steps."""

    requests: pd.DataFrame
    gaps: object
    class_gaps: dict
    wall_s: float
    server_cpu_s: float
    client_cpu_s: float
    machine_cpu_s: float
    started: float
    ended: float
    #: The replay's ``X-Request-Id`` prefix and the wall-clock time of its zero (to join the
    #: scheduler's request log).
    token: str = ""
    wall_t0: float = float("nan")
    #: Seconds during the replay in which some task waited for a core, for IO, for memory
    #: (:func:`machine_stall_s`).
    stall_s: dict = field(default_factory=dict)
    #: Why a client might send late, over the same window: seconds its thread (the event loop's)
    #: waited for a core, its page faults that read from disk, and seconds the hypervisor took
    #: the machine's cores (:func:`thread_waited_s`, :func:`major_faults`, :func:`machine_steal_s`).
    client_waited_s: float = float("nan")
    client_major_faults: int = 0
    steal_s: float = float("nan")
    #: Replays it took, and why each one before it was run again (:func:`replay_served`).
    attempts: int = 1
    rejected: tuple[str, ...] = ()
    #: The server that served it (a fresh one when :func:`replay_served` restarted it).
    server: Server | None = field(default=None, repr=False, compare=False)

    def result(self):
        """As a :class:`~schedlab.engine.RunResult`; what a client cannot see (steps, busy
        time, KV use) is unknown (NaN, -1)."""
        from schedlab.engine import RunResult

        return RunResult(self.requests, self.gaps, self.class_gaps, steps=0, busy_s=float("nan"),
                         peak_kv_blocks=-1, kv_capacity_blocks=-1, sched_overhead_s=float("nan"),
                         wall_s=self.wall_s)

    def figures(self) -> dict:
        """The replay's wall time, CPU times and interference, the share of its window
        (``started`` to ``ended``) in which some task waited for a core, IO or memory
        (``cpu_wait_share``, ...), what would make its client send late (``client_waited_s``,
        ``client_major_faults``, ``steal_s``), and its attempts and why the others were set
        aside (``replayed_for``), for a run summary."""
        return {"via": "server", "wall_s": self.wall_s, "server_cpu_s": self.server_cpu_s,
                "client_cpu_s": self.client_cpu_s, "foreign_cpu_share": self.foreign_cpu_share(),
                "client_waited_s": self.client_waited_s, "client_major_faults": self.client_major_faults,
                "steal_s": self.steal_s, "attempts": self.attempts, "replayed_for": "; ".join(self.rejected),
                **{f"{r}_wait_share": self.stall_s.get(r, float("nan")) / self.window_s for r in PRESSURE}}

    @property
    def window_s(self) -> float:
        """Seconds from ``started`` to ``ended``: what the counters were read over."""
        return self.ended - self.started

    def foreign_cpu_share(self, cores: int | None = None) -> float:
        """Share of the machine's cores that processes other than this server and client kept
        busy during the replay's window: interference, which a clean measurement keeps near 0."""
        cores = cores or os.cpu_count() or 1
        other = self.machine_cpu_s - self.server_cpu_s - self.client_cpu_s
        return max(0.0, other) / (self.window_s * cores)


#: Times a replay is run at most (:func:`replay_served`).
REPLAY_ATTEMPTS = 3


def replay_served(server: Server, trace, *, model: str, whisper: bool, warmup_s: float = 0.0,
                  attempts: int = REPLAY_ATTEMPTS, flaw: Callable[[ServedRun], str] | None = None,
                  restart: Callable[[Server], Server] | None = None) -> ServedRun:
    """Replay ``trace`` against ``server`` through :func:`~schedlab.backends.http_client.replay_http`,
    measuring the CPU time of the server, of this client and of the whole machine. A replay that
    is not a measurement is run again, up to ``attempts`` times in all: one in which a connection
    was lost (the last such attempt raises :class:`~schedlab.backends.http_client.ConnectionLost`),
    or one for which ``flaw`` gives a reason (the last attempt is returned whatever it gives).
    With ``restart`` (given the server, it stops it and returns a fresh one), the last attempt
    after two or more set aside runs on a fresh server: a server's front end, once it lags,
    tends to lag in the replays that follow. The run's ``attempts`` says how many it took,
    ``rejected`` why the others were run again, ``server`` which server served it."""
    from schedlab.backends.http_client import ConnectionLost, replay_http

    if attempts < 1:
        raise SchedlabError("attempts must be at least 1")
    rejected: list[str] = []
    while True:
        attempt = len(rejected) + 1
        if restart is not None and attempt == attempts and attempt > 2:
            print(f"replay {attempt} of {attempts} on a fresh server", file=sys.stderr)
            server = restart(server)
            rejected[-1] += " (server restarted)"
        started = time.time()  # every counter is read inside started..ended
        server0, client0, machine0, stall0 = (server.cpu_seconds(), time.process_time(), machine_busy_cpu_s(),
                                              machine_stall_s())
        waited0, faults0, steal0 = thread_waited_s(), major_faults(), machine_steal_s()
        try:
            res = replay_http(server.url, trace, model=model, whisper=whisper, warmup_s=warmup_s)
        except ConnectionLost as exc:
            if attempt == attempts:
                raise
            why = "connection lost"
            print(f"replay {attempt} of {attempts} lost a connection, replaying again: {exc}", file=sys.stderr)
        else:
            run = ServedRun(
                res.frame(), res.log.gaps, res.log.class_gaps, res.wall_s,
                server_cpu_s=server.cpu_seconds() - server0,
                client_cpu_s=time.process_time() - client0,
                machine_cpu_s=machine_busy_cpu_s() - machine0,
                stall_s={r: t - stall0[r] for r, t in machine_stall_s().items()},
                client_waited_s=thread_waited_s() - waited0,
                client_major_faults=major_faults() - faults0,
                steal_s=machine_steal_s() - steal0,
                started=started,
                ended=time.time(),
                token=res.token,
                wall_t0=res.wall_t0,
                attempts=attempt,
                rejected=tuple(rejected),
                server=server,
            )
            why = flaw(run) if flaw else ""
            if not why or attempt == attempts:
                return run
            print(f"replay {attempt} of {attempts} does not measure the engine ({why}), replaying again", file=sys.stderr)
        rejected.append(why)


#: Seconds of a trace's arrivals replayed, unmeasured, when a server has just started.
WARMUP_S = 3.0


def warm_up(server: Server, trace: pd.DataFrame, *, model: str, whisper: bool, seconds: float = WARMUP_S) -> None:
    """Replay the first ``seconds`` of ``trace`` and discard the results: a fresh server's
    first requests take first-time paths in its front end (in one run, 38-44% of the first
    replay's time in the system was spent outside the engine's scheduler, against 8-12% in
    the repeats that followed)."""
    from schedlab.backends.http_client import ConnectionLost, replay_http

    head = trace[trace["arrival_s"] < trace["arrival_s"].min() + seconds]
    if len(head):
        try:
            replay_http(server.url, head, model=model, whisper=whisper)
        except ConnectionLost:  # its results are discarded either way
            pass


def step_log_path(server_log: str | Path) -> Path:
    """Where a server's scheduler logs its steps: beside its log (absolute, as the server's
    working folder may differ)."""
    log = Path(server_log).resolve()
    return log.with_name(log.stem + ".steps.csv")


def run_served(spec: EngineSpec, folder: str | Path, *, policy: str, kappa: dict[str, float],
               traces: dict[str, pd.DataFrame], identity: dict, repeats: int, server_log: str | Path,
               out_dir: str | Path, seed: int = 0) -> list[Path]:
    """Start one server for ``policy`` and replay every trace (``{rate label: trace}``)
    ``repeats`` times, in that order; write ``rate<label>_seed<seed>_rep<k>.parquet`` (the
    per-request results), ``.json`` (the run summary) and ``.steps.parquet`` (every engine
    step of the replay, :func:`schedlab.backends.step_tables.step_table`, with the run's policy,
    rate, seed, repeat and interference) under ``out_dir``. The server's raw step log is kept beside its log.
    A replay that does not measure the engine (:func:`schedlab.backends.replay_quality.replay_flaws`:
    interference, a lagging front end, a late client) is run again, :data:`REPLAY_ATTEMPTS`
    times in all at most, the last on a fresh server (:func:`replay_served`); the attempt kept
    is the first without a flaw, or the last, and its summary's ``attempts`` and
    ``replayed_for`` say how many it took and why."""
    from schedlab.backends.front_end import front_end_timing
    from schedlab.backends.replay_quality import outside_engine_share, replay_flaws
    from schedlab.backends.step_tables import read_request_log, request_timeline, step_table, steps_between, wait_for_idle
    from schedlab.backends.step_log import request_log_path
    from schedlab.backends.vllm_profile import device_label
    from schedlab.io import write_json, write_parquet
    from schedlab.metrics import summarize

    whisper = model_arch(spec.model).encoder_frames > 0
    steps_csv = step_log_path(server_log)
    cmd = serve_command(folder, spec, policy=policy, kappa=kappa, step_log=steps_csv)
    measured: dict[str, tuple[pd.DataFrame, dict]] = {}

    def measure(run: ServedRun, label: str, rep: int) -> tuple[pd.DataFrame, dict]:
        """The replay's engine steps (from the server's step log) and its summary, with the
        scheduler's times joined to its requests."""
        steps = steps_between(
            step_table(wait_for_idle(steps_csv, run.started), hardware=device_label(spec), model=spec.model),
            run.started, run.ended,
        ).assign(policy=policy, rate=float(label), seed=seed, repeat=rep)
        run.requests = request_timeline(run.requests, read_request_log(request_log_path(steps_csv)),
                                        run.token, run.wall_t0)
        summary = summarize(
            run.requests, run.gaps, policy=policy, backend="vllm", rate=float(label),
            model=spec.model, hardware=spec.device, seed=seed, **identity,
        )
        outside = outside_engine_share(run.requests, steps) if len(steps) else float("nan")
        timing = front_end_timing(run.requests, steps, run.wall_t0)
        # What the replay's flaws are judged on, and the median request's way in to the engine
        # core and back from the scheduler (s): the held-out fits' front end
        # (schedlab.fit.steptime.fit_held_out).
        steps["foreign_cpu_share"] = run.foreign_cpu_share()
        steps["outside_engine_share"] = outside
        steps["send_lag_max_ms"] = timing.get("send_lag_max_ms", float("nan"))
        steps["to_core_s"] = timing.get("to_core_p50_ms", float("nan")) / 1e3
        steps["way_out_s"] = timing.get("way_out_p50_ms", float("nan")) / 1e3
        summary.update(
            outside_engine_share=outside,
            **timing,
            repeat=rep,
            preemptions=0,
            kv_capacity_blocks=-1,
            steps=len(steps),
            mean_step_ms=float(steps["time_s"].mean() * 1e3) if len(steps) else float("nan"),
            sched_overhead_us_per_req=float("nan"),
            server_ready_s=run.server.ready_s,
            **run.figures(),
        )
        return steps, summary

    def flaw(label: str, rep: int):
        def why(run: ServedRun) -> str:
            measured[run.token] = measure(run, label, rep)
            summary = measured[run.token][1]
            reason = replay_flaws(pd.DataFrame([summary])).iloc[0]
            if reason:  # what it was judged on, for the job's log
                print(f"{label} req/s, repeat {rep}: the latest request sent "
                      f"{summary.get('send_lag_max_ms', float('nan')):.0f} ms late, "
                      f"{summary['outside_engine_share']:.0%} of the time in the system outside the scheduler, "
                      f"{summary['foreign_cpu_share']:.1%} of the cores busy with other processes; the client "
                      f"waited {summary['client_waited_s'] * 1e3:.0f} ms for a core and read {summary['client_major_faults']} "
                      f"pages from disk, the hypervisor took {summary['steal_s'] * 1e3:.0f} ms", file=sys.stderr)
            return reason
        return why

    servers: list[Server] = []

    def fresh(old: Server | None = None) -> Server:
        """The job's first server or, given ``old`` (stopped here), the next one, its output
        appended to the same log; warmed up."""
        if old is not None:
            old.stop()
        servers.append(start_server(cmd, log=server_log, env=server_env(spec), append=old is not None))
        warm_up(servers[-1], next(iter(traces.values())), model=spec.model, whisper=whisper)
        return servers[-1]

    for log in (steps_csv, request_log_path(steps_csv)):  # this job's servers append to them
        log.unlink(missing_ok=True)
    written = []
    try:
        server = fresh()
        for rep in range(repeats):
            for label, trace in traces.items():
                run = replay_served(server, trace, model=spec.model, whisper=whisper, flaw=flaw(label, rep),
                                    restart=fresh)
                server = run.server
                steps, summary = measured[run.token]  # the kept attempt's (its summary says why others were not)
                measured.clear()
                # (a rate label may hold a '.': no with_suffix)
                stem = Path(out_dir) / f"rate{label}_seed{seed}_rep{rep}"
                write_parquet(run.requests, f"{stem}.parquet")
                write_parquet(steps, f"{stem}.steps.parquet")
                write_json(summary, f"{stem}.json")
                written.append(stem)
    finally:
        for started in servers:
            started.stop()
    return written
