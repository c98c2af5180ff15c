"""The policy interface: a waiting queue that also names the preemption victim.

A policy orders jobs (:class:`Job`). Every backend wraps its own requests in them (schedlab's
engine with the request's trace position as ``ref``, vLLM's scheduler with its ``Request``),
so one policy serves the simulator and vLLM alike. ``peek`` and ``pop`` agree when called at
the same ``now``. A job also reads its request's state live from the backend
(:class:`RequestState`): tokens generated and computed, preemptions, KV blocks, first token,
and the trace's own fields (SLO class, tenant, deadline, predicted output). The page
``docs/scheduler-protocol.md`` is the protocol's reference: every method and field, units, and
the order of calls.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence


class RequestState:
    """What a backend tells a policy of its requests, each answer read when asked, by a job's
    handle (``ref``). A backend subclasses it (schedlab's engine reads its arrays, vLLM's
    scheduler its ``Request``); this base answers for a job made without a backend: nothing
    generated, computed or held, never preempted, no trace fields."""

    def generated_tokens(self, ref) -> int:
        return 0

    def computed_tokens(self, ref) -> int:
        return 0

    def preemptions(self, ref) -> int:
        return 0

    def kv_blocks(self, ref) -> int:
        return 0

    def first_token_s(self, ref) -> float:
        return math.nan

    def finished(self, ref) -> bool:
        return False

    def slo_class(self, ref) -> str:
        return "all"

    def tenant(self, ref) -> str:
        return ""

    def deadline_s(self, ref) -> float:
        return math.inf

    def predicted_tokens(self, ref) -> float:
        return math.nan


#: The state of a job made without a backend.
NO_STATE = RequestState()


@dataclass(slots=True, eq=False)
class Job:
    """A request as a policy sees it (compared by identity): its id, arrival, the job-size
    estimate (paper A's n_hat in tokens, a priority, or the output length), its prompt length,
    ``ref``, the backend's own handle on the request, and, on an engine with a prefix cache,
    ``uncached``: asked now, the tokens its admission would compute (its known tokens less the
    prefix the cache holds, as the engine would look it up); ``None`` without one.

    The properties below read the request's state from the backend (``state``) when asked:
    what the last step left (the engine and vLLM update them as a step ends, and a preemption
    as it happens), and the trace's own fields."""

    request_id: int
    arrival_s: float
    size: float
    prompt_tokens: int
    ref: Any = None
    uncached: Callable[[], int] | None = None
    state: RequestState = NO_STATE

    def work(self) -> int:
        """The tokens its admission would compute now: :attr:`uncached` asked, or the prompt
        without a prefix cache."""
        return self.prompt_tokens if self.uncached is None else self.uncached()

    @property
    def generated_tokens(self) -> int:
        """Output tokens generated so far (a preemption keeps them: they are recomputed)."""
        return self.state.generated_tokens(self.ref)

    @property
    def computed_tokens(self) -> int:
        """Tokens of its sequence (prompt, then output) whose KV is written; 0 from a
        preemption until it runs again (a prefix-cache hit counts from its admission)."""
        return self.state.computed_tokens(self.ref)

    @property
    def prompt_computed(self) -> int:
        """Prompt tokens whose KV is written (the prefill's progress)."""
        return min(self.computed_tokens, self.prompt_tokens)

    @property
    def preemptions(self) -> int:
        """Times it was preempted."""
        return self.state.preemptions(self.ref)

    @property
    def kv_blocks(self) -> int:
        """KV blocks it holds (0 while it waits)."""
        return self.state.kv_blocks(self.ref)

    @property
    def first_token_s(self) -> float:
        """When its first token was generated, seconds on the run's clock (NaN before)."""
        return self.state.first_token_s(self.ref)

    @property
    def finished(self) -> bool:
        """Whether it generated its last token."""
        return self.state.finished(self.ref)

    @property
    def produced_since_admission(self) -> bool:
        """Whether it generated a token since it was last admitted: every known token but the
        newest computed (what a preemption by :meth:`Policy.preempt` needs)."""
        generated = self.generated_tokens
        return generated >= 1 and self.computed_tokens >= self.prompt_tokens + generated - 1

    @property
    def slo_class(self) -> str:
        """Its service class from the trace (``slo_class``; ``all`` without one)."""
        return self.state.slo_class(self.ref)

    @property
    def tenant(self) -> str:
        """Its tenant or client from the trace (``tenant``, as text; empty without one)."""
        return self.state.tenant(self.ref)

    @property
    def deadline_s(self) -> float:
        """When it should finish, seconds on the run's clock: its arrival plus the trace's
        end-to-end target (``slo_e2e_s``); infinite without one."""
        return self.state.deadline_s(self.ref)

    @property
    def predicted_tokens(self) -> float:
        """A predictor's estimate of its output tokens from the trace
        (``predicted_output_tokens``; NaN without one)."""
        return self.state.predicted_tokens(self.ref)


class Policy(ABC):
    """A waiting queue ordered by the policy, plus its preemption-victim rule."""

    name: str = ""
    #: Whether the policy asks :meth:`Job.work` (a backend with a prefix cache then gives each
    #: job its lookup, :attr:`Job.uncached`).
    reads_cache: bool = False

    @abstractmethod
    def push(self, job: Job) -> None:
        """Add a waiting job."""

    @abstractmethod
    def peek(self, now: float) -> Job:
        """The job ``pop(now)`` would return, left in place."""

    @abstractmethod
    def pop(self, now: float) -> Job:
        """Remove and return the next job to admit."""

    @abstractmethod
    def remove(self, job: Job) -> None:
        """Drop a waiting job (an aborted request)."""

    @abstractmethod
    def __iter__(self) -> Iterator[Job]:
        """The waiting jobs, in no particular order."""

    @abstractmethod
    def __len__(self) -> int: ...

    def victim_key(self, job: Job, now: float) -> tuple | None:
        """Eviction rank of a running job: the largest is preempted first. ``None`` (the
        default) means the engine's own rule, the newest admitted."""
        return None

    @property
    def ranks_victims(self) -> bool:
        """Whether the policy overrides the engine's victim rule with :meth:`victim_key`."""
        return type(self).victim_key is not Policy.victim_key

    def victim(self, running: Sequence[Job], now: float) -> Job:
        """The running job to preempt under memory pressure."""
        if not self.ranks_victims:
            return running[-1]
        return max(running, key=lambda j: self.victim_key(j, now))

    def preempt(self, running: Sequence[Job], now: float, free_slots: int) -> Sequence[Job]:
        """Running jobs to preempt at this step boundary, before the step is planned, whatever
        the memory (none by default). ``running`` is in admission order; ``free_slots`` is how
        many more requests the engine's batch could hold. Each named job must have generated a
        token since its admission (:attr:`Job.produced_since_admission`); it is preempted as
        under memory pressure (its KV freed, recomputed when it runs again) and pushed back
        before the step's admissions, which may take it again."""
        return ()

    @property
    def preempts(self) -> bool:
        """Whether the policy names jobs to preempt at step boundaries (:meth:`preempt`)."""
        return type(self).preempt is not Policy.preempt
