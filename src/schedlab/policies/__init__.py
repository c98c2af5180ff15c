"""Waiting-queue policies, written once and adapted to every backend."""

from schedlab.policies.base import Job, Policy
from schedlab.policies.registry import POLICIES, make_policy

__all__ = ["Job", "Policy", "POLICIES", "make_policy"]
