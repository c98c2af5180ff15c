"""The one way to run a registered scheduler on a trace: on schedlab's engine (``sim``), on
vLLM's own scheduler (``vllm-sim``) or on transformers' (``transformers-sim``), a waiting-queue
policy and a batch builder alike, and the run's summary."""

from __future__ import annotations

import time

import pandas as pd

from schedlab import progress, registry
from schedlab.contracts import BATCHINGS
from schedlab.engine import Arena, ContinuousBatching, RunResult, run
from schedlab.engine.scheduler import Scheduler
from schedlab.errors import SchedlabError
from schedlab.metrics import summarize
from schedlab.workload.client import InFlightCap


def scheduler_for(name: str, trace: pd.DataFrame | None = None, arena: Arena | None = None,
                  batching: str = "vllm") -> Scheduler:
    """The engine scheduler of the registered ``name``: a batch builder as it is, a queue
    policy inside vLLM v1's continuous batching (:class:`ContinuousBatching`) or, with
    ``batching`` ``transformers`` or ``transformers-prefill-first``, inside transformers'
    (:class:`~schedlab.builders.transformers_batching.TransformersBatching`)."""
    if batching not in BATCHINGS:
        raise SchedlabError(f"unknown batching {batching!r}; choose {', '.join(BATCHINGS)}")
    entry = registry.entry(name)
    made = entry.make(registry.Context(trace, arena))
    if entry.kind != registry.QUEUE:
        if batching != "vllm":
            raise SchedlabError(f"scheduler {name!r} is a batch builder: it composes its steps itself, "
                                f"in no other batching than its own")
        return made
    if batching == "vllm":
        return ContinuousBatching(made)
    from schedlab.builders.transformers_batching import TransformersBatching, order_of

    return TransformersBatching(made, order_of(batching))


def serve(
    trace: pd.DataFrame,
    scheduler: str,
    arena: Arena,
    *,
    backend: str = "sim",
    model: str | None = None,
    warmup_s: float = 0.0,
    sample_s: float | None = None,
    max_in_flight: int | None = None,
    batching: str = "vllm",
) -> RunResult:
    """Serve ``trace`` with the registered ``scheduler`` in ``arena``, on schedlab's engine
    (``sim``), on vLLM's scheduler (``vllm-sim``, which needs the ``model``) or on
    transformers' (``transformers-sim``: a queue policy inside its FIFO scheduler class, or its
    prefill-first one with ``batching`` ``transformers-prefill-first``). On ``sim``, a queue
    policy runs inside the ``batching`` rules (:func:`scheduler_for`). Requests that arrive
    during the first ``warmup_s`` are simulated but not measured; queues and KV are sampled
    every ``sample_s``. ``max_in_flight`` caps the requests in flight at the client
    (:class:`~schedlab.workload.client.InFlightCap`, ``sim`` only); latencies then count from
    when each request is sent."""
    entry = registry.backend_entry(backend, simulated=True)
    if max_in_flight is not None and backend != "sim":
        raise SchedlabError("a cap on requests in flight runs on the sim backend only")
    try:
        return entry.run(trace, scheduler, arena, model=model, warmup_s=warmup_s, sample_s=sample_s,
                         max_in_flight=max_in_flight, batching=batching)
    except SchedlabError:
        raise
    except Exception as e:  # raised inside a plug-in's scheduler: one line naming it
        raise registry.from_plugin(e)


def _on_engine(trace, scheduler, arena, *, warmup_s, sample_s, max_in_flight, batching, **_) -> RunResult:
    """``trace`` served by schedlab's engine with the registered ``scheduler`` (:func:`scheduler_for`),
    behind the client's cap of ``max_in_flight`` requests when one is given."""
    made = scheduler_for(scheduler, trace, arena, batching)
    if max_in_flight is None:
        return run(trace, made, arena, warmup_s=warmup_s, sample_s=sample_s)
    capped = InFlightCap(made, max_in_flight)
    result = run(trace, capped, arena, warmup_s=warmup_s, sample_s=sample_s)
    sent = pd.Series(capped.sent_s, index=trace["request_id"].to_numpy())
    result.requests["arrival_s"] = sent.loc[result.requests["request_id"]].to_numpy()
    return result


registry.register_backend("sim", run=_on_engine, summary="schedlab's engine on a virtual clock")


def _described(scheduler: str, backend: str, identity: dict) -> str:
    """A run in words, for its progress: the scheduler, the backend, the workload and rate when
    the identity names them."""
    words = f"{scheduler} on {backend}"
    if identity.get("workload") not in (None, "custom"):
        words += f", {identity['workload']}"
    rate = identity.get("rate")
    if isinstance(rate, (int, float)) and rate == rate:
        words += f" at {rate:g} req/s"
    return words


def run_summary(
    trace: pd.DataFrame,
    scheduler: str,
    arena: Arena,
    *,
    identity: dict,
    backend: str = "sim",
    model: str | None = None,
    max_in_flight: int | None = None,
    batching: str = "vllm",
) -> tuple[RunResult, dict]:
    """:func:`serve`, and the run summary of the contract with the engine's own figures."""
    if backend == "vllm-sim":
        from schedlab.backends.vllm_sim.run import run_vllm_sim  # noqa: F401 (imported before the clock starts)
    t0 = time.perf_counter()
    with progress.stage(_described(scheduler, backend, identity), total=len(trace)):
        result = serve(trace, scheduler, arena, backend=backend, model=model, max_in_flight=max_in_flight,
                       batching=batching)
    summary = summarize(result.requests, result.gaps, policy=scheduler, backend=backend, **identity)
    if batching != "vllm":
        summary["batching"] = batching
    summary["sched_overhead_us_per_req"] = result.sched_overhead_s / max(len(trace), 1) * 1e6
    summary["mean_step_ms"] = result.busy_s / max(result.steps, 1) * 1e3
    summary["peak_kv_blocks"] = result.peak_kv_blocks
    summary["kv_capacity_blocks"] = result.kv_capacity_blocks
    summary["preemptions"] = int(result.requests["preemptions"].sum())
    summary["wall_s"] = time.perf_counter() - t0
    return result, summary
