"""The ``vllm-sim`` backend: vLLM's real v1 scheduler on a virtual clock (:mod:`.run`)."""

from __future__ import annotations

from schedlab import registry
from schedlab.errors import SchedlabError


def run(trace, scheduler: str, arena, *, model: str | None, warmup_s: float, sample_s: float | None, batching: str,
        **_):
    """``trace`` served by vLLM's scheduler with the registered ``scheduler`` (vLLM's batching
    only); vLLM is imported here, not where the backend is registered."""
    from schedlab.backends.vllm_sim.run import run_vllm_sim

    if batching != "vllm":
        raise SchedlabError("vllm-sim runs vLLM's batching")
    registry.entry(scheduler)  # fails early on an unknown name
    return run_vllm_sim(trace, scheduler, arena, model=model, warmup_s=warmup_s, sample_s=sample_s)


registry.register_backend("vllm-sim", run=run, summary="vLLM's real v1 scheduler on a virtual clock")
