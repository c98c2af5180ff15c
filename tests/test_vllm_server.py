"""`vllm serve` with schedlab's scheduler class, driven by the HTTP client (vLLM's CPU build).

The Whisper server is started with the documentation's `vllm serve` line (docs/backends.md),
verbatim (plus a port),
from a folder holding the model folder that `schedlab whisper-files` writes.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("vllm")

from schedlab.backends.served.client import replay_http  # noqa: E402
from schedlab.backends.vllm.engine import LaunchSpec  # noqa: E402
from schedlab.backends.served.quality import replay_flaws  # noqa: E402
from schedlab.backends.served.run import warm_up  # noqa: E402
from schedlab.backends.served.server import serve_command, server_env, start_server  # noqa: E402
from schedlab.backends.steps.log import request_log_path  # noqa: E402
from schedlab.backends.steps.tables import read_request_log, step_table, steps_between, wait_for_idle  # noqa: E402
from schedlab.contracts import RESULT_COLUMNS  # noqa: E402
from schedlab.data.whisper_files import write_model_folder  # noqa: E402
from schedlab.slai.slai import DYNAMIC_LOW  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.exclusive]

ROOT = Path(__file__).resolve().parents[1]
#: The documentation's example: the pipeline's whisper-tiny engine on CPU, under SJF.
SPEC = LaunchSpec(model="whisper-tiny", max_num_seqs=8, max_num_batched_tokens=2048)
KAPPA = {"en": 3.0}
#: The documentation's paper C example: SLAI on the tiny decoder model, Sarathi's 512-token budget.
SLAI_SPEC = LaunchSpec(model="tiny-llama", max_num_seqs=128, max_num_batched_tokens=512)


#: The page of the serving recipes.
SERVING = ROOT / "docs" / "backends.md"


def serve_line(model: str = "whisper-tiny") -> str:
    """The serving page's `vllm serve` line that serves ``model`` (one per model)."""
    lines = [line for line in SERVING.read_text().splitlines()
             if line.startswith("vllm serve ") and f"--served-model-name {model} " in line]
    assert len(lines) == 1, f"{SERVING.name} has exactly one `vllm serve` line for {model}"
    return lines[0]


def test_the_documented_serve_lines_are_the_pipelines_commands():
    cmd = serve_command("results/models/whisper-tiny", SPEC, policy="sjf", kappa=KAPPA)
    assert shlex.split(serve_line()) == cmd
    slai = serve_command("src/schedlab/assets/models/tiny-llama", SLAI_SPEC, builder="slai-spf-dynamic")
    assert shlex.split(serve_line("tiny-llama")) == slai


def test_the_server_starts_without_a_job_runners_thread_counts(monkeypatch):
    """Under Snakemake (MKL_NUM_THREADS=2, OPENBLAS_NUM_THREADS=2, ...) the CPU engine's worker
    spun extra threads on its one pinned core: 0.4 s steps instead of 18 ms."""
    names = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS",
             "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")
    for name in names:
        monkeypatch.setenv(name, "2")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "4")  # vLLM would size the cache by it, not by the spec
    env = server_env(SPEC)
    assert not set(names) & set(env) and "VLLM_CPU_KVCACHE_SPACE" not in env
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "auto"


def test_the_client_side_starts_without_vllm_and_names_a_real_logits_processor():
    """The replaying client runs beside the server it measures: importing vLLM there cost
    seconds of each server's start-up and a second copy of torch in memory."""
    code = ("import sys; import schedlab.backends.served.run, schedlab.backends.served.server, "
            "schedlab.backends.served.client, schedlab.backends.steps.log; "
            "print(sorted({'vllm', 'torch'} & set(sys.modules)))")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "[]"
    from vllm.v1.sample.logits_processor import LogitsProcessor

    from schedlab.backends.served import server

    module, name = server.NO_STOP.split(":")
    assert issubclass(getattr(__import__(module, fromlist=[name]), name), LogitsProcessor)


@pytest.fixture(scope="module")
def whisper_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve")
    write_model_folder("whisper-tiny", root / "results" / "models" / "whisper-tiny")
    cmd = shlex.split(serve_line())
    with start_server(cmd, log=root / "results" / "logs" / "server.log", env=server_env(SPEC), cwd=root) as server:
        # as the pipeline does: a fresh server's first transcriptions take first-time paths in
        # its front end, which held every stream of a fresh clone's first replay for 9 s
        clips = pd.DataFrame({"request_id": [0, 1], "arrival_s": [0.0, 0.1], "prompt_tokens": 4,
                              "output_tokens": 3, "audio_duration_s": [2.0, 10.0], "language": "en"})
        warm_up(server, clips, model="whisper-tiny", whisper=True)
        yield server
    assert server.proc.returncode is not None  # stopped with the module


def test_sjf_serves_a_short_clip_sent_after_a_long_one_first(whisper_server):
    """Twelve 10 s clips arrive at once for the engine's eight slots (eight with long outputs),
    so at least four wait; 1.5 s later a 28 s clip arrives, then a 2 s clip with the same output
    length. FCFS would serve both after all twelve, the long one first; SJF admits the short
    clip ahead of clips that were waiting before it came, and the long one last."""
    n_busy, n_wait = 8, 4
    n = n_busy + n_wait
    trace = pd.DataFrame(
        {
            "request_id": np.arange(n + 2),
            "arrival_s": [0.0] * n + [1.5, 1.6],
            "prompt_tokens": 4,
            "output_tokens": [150 + 20 * k for k in range(n_busy)] + [20] * n_wait + [20, 20],
            "audio_duration_s": [10.0] * n + [28.0, 2.0],
            "language": "en",
        }
    )
    res = replay_http(whisper_server.url, trace, model="whisper-tiny", whisper=True).log.frame()
    assert res["finish_s"].notna().all() and (res["first_token_s"] < res["finish_s"]).all()
    earlier, long, short = res.iloc[:n], res.iloc[n], res.iloc[n + 1]
    assert (earlier["first_token_s"] > short["first_token_s"]).sum() >= 2
    assert long["first_token_s"] > earlier["first_token_s"].max()
    assert short["finish_s"] < long["finish_s"]


def test_a_hint_sent_as_a_boolean_is_logged_by_the_server(whisper_server):
    """The README's server (its `--middleware`): `true` as `audio_duration_s` reaches the
    scheduler as 1, and the server's log says so; the request is served."""
    import httpx

    from schedlab.backends.served.wav import speech_wav

    data = {"model": "whisper-tiny", "language": "en", "temperature": "0", "max_completion_tokens": "3",
            "vllm_xargs": json.dumps({"audio_duration_s": True, "language": "en"})}
    r = httpx.post(f"{whisper_server.url}/v1/audio/transcriptions", data=data,
                   files={"file": ("a.wav", speech_wav(2.0), "audio/wav")}, timeout=120)
    assert r.status_code == 200, r.text
    assert "vllm_xargs key 'audio_duration_s' is true, which vLLM reads as 1" in whisper_server.log.read_text()


def test_vllm_serve_cli_replays_traces_against_a_decoder_model(tmp_path):
    """`schedlab vllm-serve`: one server, two traces, two repeats; every request completes
    with its forced length, and each summary says how busy the rest of the machine was. Each
    replay's step table holds every engine step once: its prefill tokens add up to the
    prompts, its decodes to every output token after the first."""
    rng = np.random.default_rng(1)
    paths, labels, traces = [], ["4", "8"], {}
    for label in labels:
        n = 12
        trace = pd.DataFrame(
            {
                "request_id": np.arange(n),
                "arrival_s": np.sort(rng.uniform(0, n / float(label), n)),
                "prompt_tokens": rng.integers(4, 200, n),
                "output_tokens": rng.integers(5, 40, n),
                "audio_duration_s": rng.uniform(2, 20, n),
                "language": "en",
            }
        )
        paths.append(tmp_path / f"trace{label}.parquet")
        trace.to_parquet(paths[-1])
        traces[label] = trace
    out = tmp_path / "runs"
    proc = subprocess.run(
        [sys.executable, "-m", "schedlab.cli", "vllm-serve", "--policy", "sjf", "--model", "tiny-llama",
         "--model-folder", str(ROOT / "src/schedlab/assets/models/tiny-llama"), "--traces", *map(str, paths),
         "--rates", *labels, "--repeats", "2", "--replay-attempts", "2", "--workload", "test", "--max-num-seqs", "4",
         "--server-log", str(tmp_path / "server.log"), "--out-dir", str(out)],
        capture_output=True, text=True, timeout=600,
    )
    log = tmp_path / "server.log"
    assert proc.returncode == 0, proc.stderr[-3000:] + (log.read_text()[-3000:] if log.exists() else "")
    assert "--skip-tokenizer-init" in (tmp_path / "server.log").read_text().splitlines()[0]
    for label in labels:
        for rep in (0, 1):
            summary = json.loads((out / f"rate{label}_seed0_rep{rep}.json").read_text())
            assert summary["backend"] == "vllm" and summary["via"] == "server" and summary["repeat"] == rep
            assert summary["rate"] == float(label) and summary["completed"] == summary["arrived"] == 12
            assert 0 < summary["p50_ttft_ms"] <= summary["p50_e2el_ms"]
            assert 0.0 <= summary["foreign_cpu_share"] <= 1.0 and summary["server_cpu_s"] > 0
            res = pd.read_parquet(out / f"rate{label}_seed0_rep{rep}.parquet")
            assert tuple(res.columns[: len(RESULT_COLUMNS)]) == RESULT_COLUMNS
            assert (res["first_token_s"] >= res["arrival_s"]).all() and res["finish_s"].notna().all()
            # Sent at (never before) its arrival; the response begins before the first token.
            assert (res["sent_s"] >= res["arrival_s"]).all() and (res["response_s"] >= res["sent_s"]).all()
            assert (res["first_token_s"] >= res["response_s"]).all()
            assert 0 <= summary["send_lag_p50_ms"] <= summary["send_lag_max_ms"]
            # A kept replay is the first attempt that measured the engine, or the last of the two
            # --replay-attempts allows.
            flaws = replay_flaws(pd.DataFrame([summary])).iloc[0]
            assert summary["attempts"] == len([r for r in summary["replayed_for"].split("; ") if r]) + 1 <= 2
            assert not flaws or summary["attempts"] == 2
            assert 0 < summary["response_p50_ms"] <= summary["response_max_ms"]
            # The scheduler's own times of every request, found by the X-Request-Id the client sent:
            # it reached the scheduler after its arrival, was scheduled, and its last token reached
            # the client after the engine produced it.
            assert res[["admitted_s", "first_scheduled_s", "engine_finish_s"]].notna().all().all()
            assert (res["admitted_s"] >= res["sent_s"]).all() and (res["first_scheduled_s"] >= res["admitted_s"]).all()
            assert (res["first_token_s"] >= res["first_scheduled_s"]).all()
            assert (res["finish_s"] >= res["engine_finish_s"]).all() and (res["engine_finish_s"] > res["first_scheduled_s"]).all()
            assert 0 < summary["front_in_p50_ms"] <= summary["front_in_max_ms"] and summary["way_out_mean_ms"] > 0
            # The way in to the engine core is the way to the scheduler less a wait for a step.
            assert 0 <= summary["to_core_p50_ms"] <= summary["front_in_max_ms"]
            steps = pd.read_parquet(out / f"rate{label}_seed0_rep{rep}.steps.parquet")
            assert steps["to_core_s"].iloc[0] == pytest.approx(summary["to_core_p50_ms"] / 1e3)
            trace = traces[label]
            assert len(steps) == summary["steps"] and np.isfinite(summary["mean_step_ms"])
            assert steps["n_prefill_tokens"].sum() == trace["prompt_tokens"].sum()
            assert steps["n_decode"].sum() == (trace["output_tokens"] - 1).sum()
            assert (steps["n_encoder"] == 0).all() and steps["n_decode"].between(0, 4).all()
            assert (steps["ctx_tokens"] >= steps["n_decode"]).all() and (steps["n_scheduled"] >= 1).all()
            # The queues are read as the step starts: a request finishing in it still runs.
            assert (steps["n_running"] >= steps["n_scheduled"]).all()
            assert (steps["time_s"] > 0).all() and (steps["time_s"] >= steps["t_update"] - steps["t_schedule"]).all()
            assert steps["time_s"].sum() < summary["wall_s"] and steps["t_s"].between(0, summary["wall_s"] + 1).all()
            assert (steps[["policy", "rate", "repeat"]].drop_duplicates().values.tolist()
                    == [["sjf", float(label), rep]])
    assert (tmp_path / "server.steps.csv").exists()  # the server's raw logs, beside its log
    assert len(pd.read_csv(tmp_path / "server.requests.csv")) >= 2 * 2 * 12  # warm-up requests too


def test_slai_served_by_the_readme_line_holds_relaxed_decodes_back(tmp_path):
    """The serving page's SLAI server (step plans in vLLM's scheduler) behind the HTTP client: two
    strict and two relaxed requests decode while a backlog of long prompts keeps the budget
    full; every request gets its tokens, the strict class keeps its 2 s target and the relaxed
    class's decodes are held back for many steps.

    SLAI schedules a decode by ``last token + target - 5 x mean step``: its next token comes by
    then plus the step under way at that time and the decode's own step. The target holds when
    no step runs longer than half the margin; on a busy machine, where steps run longer, the
    strict class is held to what the rule allows with the engine's own longest step, read from
    the scheduler's step log (added to the page's line), and the message says which bound it was.
    """
    cmd = shlex.split(serve_line("tiny-llama"))
    at = cmd.index("--additional-config") + 1
    steps_csv = tmp_path / "server.steps.csv"
    config = json.loads(cmd[at])
    cmd[at] = json.dumps({"schedlab": {**config["schedlab"], "step_log": str(steps_csv)}})
    head = pd.DataFrame({"arrival_s": 0.0, "prompt_tokens": 16, "output_tokens": [200] * 4,
                         "slo_class": ["strict", "relaxed"] * 2, "tbt_target_s": [2.0, 30.0] * 2})
    stream = pd.DataFrame({"arrival_s": np.full(40, 0.05), "prompt_tokens": 1500, "output_tokens": 2,
                           "slo_class": "relaxed", "tbt_target_s": 30.0})
    trace = pd.concat([head, stream], ignore_index=True)
    trace = trace.assign(request_id=np.arange(len(trace)))
    with start_server(cmd, log=tmp_path / "server.log", env=server_env(SLAI_SPEC), cwd=ROOT) as server:
        res = replay_http(server.url, trace, model="tiny-llama", whisper=False)
        raw = wait_for_idle(steps_csv, res.wall_t0)
    assert not res.errors
    req = res.log.frame()
    assert req["finish_s"].notna().all()
    gaps, steady = req["max_gap_s"].to_numpy(), req["mean_gap_s"].to_numpy()
    assert gaps[[1, 3]].min() > 5.0 * np.median(steady[[0, 2]])  # held back for many steps
    assert len(read_request_log(request_log_path(steps_csv))) == len(trace)  # the plan scheduler's log
    # the steps while the strict requests decode (a fresh server's first step is slow)
    strict = req.iloc[[0, 2]]
    steps = steps_between(step_table(raw, hardware="cpu", model="tiny-llama"),
                          res.wall_t0 + strict["first_token_s"].min(), res.wall_t0 + strict["finish_s"].max())
    assert len(steps) and (steps["n_decode"] >= 1).any()
    margin = DYNAMIC_LOW * steps["time_s"].mean()
    longest = steps["time_s"].max()
    bound = 2.0 + max(0.0, 2 * longest - margin)
    assert gaps[[0, 2]].max() <= bound, (f"strict requests' longest gap over {bound:.3f} s (the 2 s target "
                                         f"{'and' if bound > 2 else 'with'} the engine's longest step {longest:.3f} s "
                                         f"against SLAI's margin {margin:.3f} s)")


def test_slai_serve_cli_runs_paper_c_on_the_engine_and_sim_replays_the_same_traces(tmp_path):
    """`schedlab slai serve` (rule `slai_engine_serve`): Sarathi-Serve on a real server over a
    scaled openchat pool with the engine's TBT targets (SLAI is the serving page's line's test above);
    `schedlab slai sweep` with the engine's limits (rule `slai_engine_simulate`) replays the very
    same requests."""
    pool = tmp_path / "pool.parquet"
    rng = np.random.default_rng(3)
    pd.DataFrame({"prompt_tokens": rng.integers(20, 3000, 200), "output_tokens": rng.integers(5, 200, 200)}).to_parquet(pool)
    scaled = tmp_path / "scaled.parquet"
    cli = [sys.executable, "-m", "schedlab.cli", "slai"]
    run = lambda *args: subprocess.run([*cli, *args], capture_output=True, text=True, timeout=600)  # noqa: E731
    proc = run("scale", "--pool", str(pool), "--factor", "0.25", "--model", "tiny-llama", "--out", str(scaled))
    assert proc.returncode == 0, proc.stderr
    workload = ["--share", "0.5", "--rates", "3", "--seeds", "0", "--duration-s", "6", "--warmup-s", "1",
                "--tbt-targets", "paying=0.25", "free=1.25", "--model", "tiny-llama", "--pool", str(scaled)]
    proc = run("serve", "--scheduler", "sarathi-fcfs", *workload, "--max-num-seqs", "64",
               "--server-log-dir", str(tmp_path / "logs"), "--out-dir", str(tmp_path / "vllm"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "SchedlabPlanScheduler" in (tmp_path / "logs/sarathi-fcfs.log").read_text().splitlines()[0]
    steptime = tmp_path / "step.json"
    steptime.write_text(json.dumps({"intercept": 0.01, "n_prefill_tokens": 2e-5, "n_decode": 1e-4}))
    proc = run("sweep", "--scheduler", "sarathi-fcfs", *workload, "--steptime", str(steptime),
               "--hardware", "vllm-cpu", "--block-size", "32", "--max-num-seqs", "64", "--max-num-batched-tokens", "512",
               "--kv-capacity-blocks", "1000", "--out-dir", str(tmp_path / "sim"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    served, sim = (pd.read_parquet(tmp_path / b / "sarathi-fcfs/summary.parquet").iloc[0] for b in ("vllm", "sim"))
    assert served["backend"] == "vllm" and served["via"] == "server" and sim["backend"] == "sim"
    assert served["arrived"] == sim["arrived"] > 5 and served["completed"] == served["arrived"]
    for cls, target in (("paying", 250.0), ("free", 1250.0)):
        assert served[f"tbt_target_ms_{cls}"] == sim[f"tbt_target_ms_{cls}"] == target
        assert served[f"completed_{cls}"] == sim[f"completed_{cls}"]
        assert served[f"p99_tbt_ms_{cls}"] > 0
    assert 0.0 <= served["foreign_cpu_share"] <= 1.0
