"""The scheduler protocol: a scheduler reads the engine and returns a step plan.

Each step the engine calls :meth:`Scheduler.schedule`, which reads the engine's state (the
waiting requests are the scheduler's own; running requests, budgets, free KV and the clock are
the engine's, read-only) and returns a :class:`~schedlab.engine.plan.StepPlan`, built with a
:class:`~schedlab.engine.plan.Planner`. The engine owns every state change: it carries the plan
out (preemptions, allocations, the step's time, the tokens emitted). ``arrive`` hands the
scheduler a request that reached the server; ``requeue`` one its plan preempted. ``steady``
tells the engine when the coming steps are fixed (every running request decodes one token and
nothing else happens) until a completion or until the next arrival, so that the engine may
run them in closed form. ``victim`` names the running request to preempt first.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from schedlab import registry
from schedlab.engine.plan import StepPlan

#: steady() answers: not steady; fixed until an arrival or a completion; until a completion.
NOT_STEADY, UNTIL_ARRIVAL, UNTIL_COMPLETION = 0, 1, 2


class Scheduler(ABC):
    name: str = "scheduler"
    #: Seconds spent deciding the order (a queue policy's own calls), for the run summary.
    overhead_s: float = 0.0
    #: Whether this scheduler's planner calls are vLLM's own scheduling pass, call for call
    #: (then a prefix cache changes as the plan is built, as vLLM's does); otherwise the engine
    #: carries the finished plan out on the cache in vLLM's order (see :mod:`.plan`).
    interleaved_kv: bool = False

    def bind(self, engine) -> None:
        """Called once before the run, with the engine whose state this scheduler reads."""
        self.engine = engine

    @abstractmethod
    def arrive(self, i: int) -> None:
        """Request ``i`` (trace position) waits to be scheduled."""

    @abstractmethod
    def requeue(self, i: int) -> None:
        """Running request ``i`` was preempted by the plan being built: it waits again."""

    @abstractmethod
    def n_waiting(self) -> int: ...

    @abstractmethod
    def schedule(self) -> StepPlan: ...

    def steady(self) -> int:
        return NOT_STEADY

    def describe(self) -> str:
        """This scheduler as errors name it (its registered name, distribution and module)."""
        return registry.describe(self)

    def victim(self, running: list[int]) -> int:
        """The request of ``running`` (admission order) to preempt: the newest admitted."""
        return running[-1]
