"""schedlab's serving engine (the ``sim`` backend), one for every paper's schedulers.

- :mod:`.core`: request state, paged KV, recompute preemption, the clock and the run loop
  (:func:`run`), with the closed-form fast path for fixed decode stretches;
- :mod:`.plan`: the step plan a scheduler returns, and the planner it builds it with;
- :mod:`.scheduler`: the scheduler protocol; :mod:`.continuous`: vLLM v1's continuous
  batching around a waiting-queue policy (papers A, B, D); the batch builders
  (:mod:`schedlab.builders`, and paper C's own in :mod:`schedlab.slai`) are its siblings;
- :mod:`.arena`: engine limits and the calibrated arena a run plays in;
- :mod:`.steptime`, :mod:`.gaps`, :mod:`.kernels`: the step-time model, token-gap
  histograms and the compiled per-step passes.

The engine reads no file: its step-time model, kappa and engine spec come to it as objects
(:mod:`schedlab.validation` reads them).
"""

from schedlab.engine.arena import Arena, EngineConfig, engine_config
from schedlab.engine.continuous import ContinuousBatching
from schedlab.engine.core import Engine, RunResult, check_servable, run

__all__ = ["Arena", "ContinuousBatching", "Engine", "EngineConfig", "RunResult", "check_servable", "engine_config", "run"]
