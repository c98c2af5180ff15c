"""Waiting-queue policies, written once and adapted to every backend; each registers itself in
:mod:`schedlab.registry` (in this order; a new module here is found and registered after them)."""

from schedlab.policies.base import Job, Policy
from schedlab.policies.keyed import KeyedPolicy
from schedlab.policies import fcfs, sjf, hrrn, adaptive, uncached  # noqa: F401,E402 (registration order)

__all__ = ["Job", "KeyedPolicy", "Policy"]
