"""transformers' continuous batching with schedlab's queue policies: the scheduler class, its
real engine (the ``transformers`` backend), its scheduler on a virtual clock
(``transformers-sim``) and the held-out study."""

from __future__ import annotations

from schedlab import registry


def run(trace, scheduler: str, arena, *, warmup_s: float, sample_s: float | None, batching: str, **_):
    """``trace`` served by transformers' scheduler (its FIFO scheduler class, or prefill-first
    with ``batching`` ``transformers-prefill-first``) with the registered queue policy
    ``scheduler``; transformers is imported here, not where the backend is registered."""
    from schedlab.backends.transformers.sim import run_transformers_sim
    from schedlab.builders.transformers_batching import order_of

    registry.entry(scheduler, registry.QUEUE)  # transformers' engine takes a queue policy
    return run_transformers_sim(trace, arena, policy=scheduler, order=order_of(batching), warmup_s=warmup_s,
                                sample_s=sample_s)


registry.register_backend("transformers-sim", kinds=(registry.QUEUE,), run=run,
                          summary="transformers' real continuous-batching scheduler on a virtual clock")
registry.register_backend("transformers", kinds=(registry.QUEUE,),
                          summary="transformers' continuous-batching engine running a queue policy on the wall clock "
                                  "(schedlab transformers-run)")
