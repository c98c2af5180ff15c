"""A queue policy as every backend calls it, each answer checked against the protocol.

The engine's continuous batching (:mod:`schedlab.engine.continuous`) and vLLM's waiting queue
(:mod:`schedlab.backends.vllm.scheduler`) call a policy through :class:`CheckedQueue`, which
keeps its own account of the jobs pushed and not yet popped and checks, at the cost of a dict
lookup and a ``len()`` a call:

- ``peek`` and ``pop`` return a job that is waiting: the very :class:`~.base.Job` object
  pushed (its handle, ``ref``, is then the backend's own for its id), not popped since;
- ``pop`` returns what ``peek`` returned at the same ``now`` (with no push or removal between),
  and removes it: ``len(policy)`` counts the jobs waiting after every push, pop and removal;
- ``victim`` returns one of the running jobs it was given;
- ``preempt`` names running jobs it was given, each once, each having generated a token since
  its admission (so no run can preempt and re-admit without progress for ever).

A violation, or an exception raised inside a plug-in's policy, ends the run with one line
naming the scheduler (:func:`schedlab.registry.violation`, :func:`schedlab.registry.failure`);
a built-in's exception propagates as it is (schedlab's own bug, with its traceback).
"""

from __future__ import annotations

from typing import Callable, Iterator, Sequence

from schedlab import registry
from schedlab.policies.base import Job, Policy


class CheckedQueue:
    """``policy`` behind the checks of the module docstring. ``owner(job)`` is the job the
    backend made for ``job.ref`` (None for a handle it does not know), to say what a wrong
    answer was."""

    def __init__(self, policy: Policy, owner: Callable[[Job], Job | None]) -> None:
        self.policy, self.owner = policy, owner
        self.name = policy.name
        self.reads_cache = policy.reads_cache
        self.ranks_victims = policy.ranks_victims
        self.preempts = policy.preempts
        self._waiting: dict[int, Job] = {}  # id(job) -> job: pushed and not popped
        self._peeked: tuple[float, Job] | None = None

    # -- the queue ----------------------------------------------------------------------
    def push(self, job: Job) -> None:
        self._peeked = None
        try:
            self.policy.push(job)
        except Exception as e:
            raise registry.failure(self.policy, "push", e)
        self._waiting[id(job)] = job
        self._counted("push")

    def peek(self, now: float) -> Job:
        try:
            job = self.policy.peek(now)
        except Exception as e:
            raise registry.failure(self.policy, "peek", e)
        if self._waiting.get(id(job)) is not job:
            raise self._not_waiting("peek", job)
        self._peeked = (now, job)
        return job

    def pop(self, now: float) -> Job:
        try:
            job = self.policy.pop(now)
        except Exception as e:
            raise registry.failure(self.policy, "pop", e)
        if self._waiting.pop(id(job), None) is not job:
            raise self._not_waiting("pop", job)
        peeked, self._peeked = self._peeked, None
        if peeked is not None and peeked[0] == now and peeked[1] is not job:
            raise registry.violation(self.policy, "pop", f"it returned request {job.request_id}, but peek at the same "
                                                         f"time returned request {peeked[1].request_id}")
        self._counted("pop", f" (pop must remove the job it returns: request {job.request_id})")
        return job

    def remove(self, job: Job) -> None:
        self._peeked = None
        try:
            self.policy.remove(job)
        except Exception as e:
            raise registry.failure(self.policy, "remove", e)
        del self._waiting[id(job)]
        self._counted("remove")

    def __iter__(self) -> Iterator[Job]:
        return iter(list(self._waiting.values()))

    def __len__(self) -> int:
        return len(self._waiting)

    def __bool__(self) -> bool:
        return bool(self._waiting)

    # -- victims ------------------------------------------------------------------------
    def victim(self, running: Sequence[Job], now: float) -> Job:
        try:
            job = self.policy.victim(running, now)
        except Exception as e:
            raise registry.failure(self.policy, "victim", e)
        if not any(job is r for r in running):
            raise registry.violation(self.policy, "victim", f"it returned {_named(job)}, which is not one of the "
                                                            "running requests it was given")
        return job

    def victim_key(self, job: Job, now: float):
        try:
            return self.policy.victim_key(job, now)
        except Exception as e:
            raise registry.failure(self.policy, "victim_key", e)

    def preempt(self, running: Sequence[Job], now: float, free_slots: int) -> list[Job]:
        try:
            chosen = list(self.policy.preempt(running, now, free_slots))
        except Exception as e:
            raise registry.failure(self.policy, "preempt", e)
        seen: set[int] = set()
        for job in chosen:
            if not any(job is r for r in running):
                raise registry.violation(self.policy, "preempt", f"it named {_named(job)}, which is not one of the "
                                                                 "running requests it was given")
            if id(job) in seen:
                raise registry.violation(self.policy, "preempt", f"it named request {job.request_id} twice")
            seen.add(id(job))
            if not job.produced_since_admission:
                raise registry.violation(self.policy, "preempt", f"it named request {job.request_id}, which has not "
                                                                 "generated a token since its admission")
        return chosen

    # -- what went wrong ----------------------------------------------------------------
    def _counted(self, method: str, hint: str = "") -> None:
        try:
            n = len(self.policy)
        except Exception as e:
            raise registry.failure(self.policy, "__len__", e)
        if n != len(self._waiting):
            raise registry.violation(self.policy, method, f"__len__ says {n} after it, but {len(self._waiting)} "
                                                          f"requests are waiting (pushed and not popped){hint}")

    def _not_waiting(self, method: str, job) -> registry.PluginError:
        """The error of a ``method`` that returned ``job``, which is not a waiting job."""
        if not isinstance(job, Job):
            what = f"it returned {_named(job)}, not a job pushed to it"
        else:
            try:
                owner = self.owner(job)
            except (TypeError, AttributeError):  # a handle of no type the backend uses
                owner = None
            if owner is None:
                what = f"it returned a job that was never pushed to it (request id {job.request_id}, handle {job.ref!r:.40})"
            elif owner.request_id != job.request_id:
                what = (f"it returned request id {job.request_id} with the handle of request {owner.request_id}: a "
                        "policy returns the Job objects pushed to it")
            elif owner is not job:
                what = f"it returned a copy of request {job.request_id}'s job, not the Job pushed to it"
            else:
                what = (f"it returned request {job.request_id}, which is not waiting: pop returned it before (pop "
                        "must remove the job it returns), or remove dropped it")
        return registry.violation(self.policy, method, what)


def _named(job) -> str:
    return f"request {job.request_id}" if isinstance(job, Job) else f"{type(job).__name__} {job!r:.40}"
