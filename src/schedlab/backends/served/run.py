"""A served replay: traces replayed over HTTP against a ``vllm serve`` started with schedlab's
scheduler class (:mod:`schedlab.backends.served.server`), each replay's requests, steps and
summary written, a replay that did not measure the engine (:mod:`schedlab.backends.served.quality`)
run again on a fresh server."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from schedlab.backends.vllm.engine import (
    LaunchSpec,
)
from schedlab.errors import SchedlabError
from schedlab.latency.catalogue import model_arch
from schedlab.backends.served.host_counters import (
    PRESSURE,
    machine_busy_cpu_s,
    machine_stall_s,
    machine_steal_s,
    major_faults,
    thread_waited_s,
)
from schedlab.backends.served.server import Server, serve_command, server_env, start_server



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
    """Replay ``trace`` against ``server`` through :func:`~schedlab.backends.served.client.replay_http`,
    measuring the CPU time of the server, of this client and of the whole machine. A replay that
    is not a measurement is run again, up to ``attempts`` times in all: one in which a connection
    was lost (the last such attempt raises :class:`~schedlab.backends.served.client.ConnectionLost`),
    or one for which ``flaw`` gives a reason (the last attempt is returned whatever it gives).
    With ``restart`` (given the server, it stops it and returns a fresh one), the last attempt
    after two or more set aside runs on a fresh server: a server's front end, once it lags,
    tends to lag in the replays that follow. The run's ``attempts`` says how many it took,
    ``rejected`` why the others were run again, ``server`` which server served it."""
    from schedlab.backends.served.client import ConnectionLost, replay_http

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
    first requests take first-time paths in its front end, which would count as time outside
    the engine's scheduler in the first measured replay."""
    from schedlab.backends.served.client import ConnectionLost, replay_http

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


def replay_stem(out_dir: str | Path, label: str, seed: int, rep: int) -> Path:
    """The name of one replay's files under ``out_dir``, without their extensions (a rate
    label may hold a '.': no ``with_suffix``)."""
    return Path(out_dir) / f"rate{label}_seed{seed}_rep{rep}"


#: The files of one replay (:func:`run_served`), by extension.
REPLAY_FILES = (".parquet", ".steps.parquet", ".json")


def served_outputs(out_dir: str | Path, labels, *, seed: int, repeats: int, server_log: str | Path) -> list[Path]:
    """Every file :func:`run_served` writes besides the server's log: the server's step and
    request logs, and each replay's results, steps and summary."""
    from schedlab.backends.steps.log import request_log_path

    steps_csv = step_log_path(server_log)
    stems = [replay_stem(out_dir, label, seed, rep) for rep in range(repeats) for label in labels]
    return [steps_csv, request_log_path(steps_csv), *(Path(f"{stem}{ext}") for stem in stems for ext in REPLAY_FILES)]


def run_served(spec: LaunchSpec, folder: str | Path, *, policy: str, kappa: dict[str, float],
               traces: dict[str, pd.DataFrame], identity: dict, repeats: int, server_log: str | Path,
               out_dir: str | Path, seed: int = 0, attempts: int = REPLAY_ATTEMPTS) -> list[Path]:
    """Start one server for ``policy`` and replay every trace (``{rate label: trace}``)
    ``repeats`` times, in that order; write ``rate<label>_seed<seed>_rep<k>.parquet`` (the
    per-request results), ``.json`` (the run summary) and ``.steps.parquet`` (every engine
    step of the replay, :func:`schedlab.backends.steps.tables.step_table`, with the run's policy,
    rate, seed, repeat and interference) under ``out_dir``. The server's raw step log is kept beside its log.
    A replay that does not measure the engine (:func:`schedlab.backends.served.quality.replay_flaws`:
    interference, a lagging front end, a late client) is run again, ``attempts`` times in all
    at most (:data:`REPLAY_ATTEMPTS` by default), the last on a fresh server (:func:`replay_served`); the attempt kept
    is the first without a flaw, or the last, and its summary's ``attempts`` and
    ``replayed_for`` say how many it took and why."""
    from schedlab.backends.served.front_end import front_end_timing
    from schedlab.backends.served.quality import outside_engine_share, replay_flaws
    from schedlab.backends.steps.tables import read_request_log, request_timeline, step_table, steps_between, wait_for_idle
    from schedlab.backends.steps.log import request_log_path
    from schedlab.backends.vllm.profile import device_label
    from schedlab.io import check_target, write_outputs
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
        check_target(log)
        log.unlink(missing_ok=True)
    written = []
    try:
        server = fresh()
        for rep in range(repeats):
            for label, trace in traces.items():
                run = replay_served(server, trace, model=spec.model, whisper=whisper, flaw=flaw(label, rep),
                                    restart=fresh, attempts=attempts)
                server = run.server
                steps, summary = measured[run.token]  # the kept attempt's (its summary says why others were not)
                measured.clear()
                stem = replay_stem(out_dir, label, seed, rep)
                results, steps_out, summary_out = (f"{stem}{ext}" for ext in REPLAY_FILES)
                write_outputs({results: run.requests, steps_out: steps, summary_out: summary})
                written.append(stem)
    finally:
        for started in servers:
            started.stop()
    return written
