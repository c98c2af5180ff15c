"""Batch builders: schedulers that compose every step's plan themselves (request-level batching,
prefill priority, Sarathi-Serve, RAD). Each registers itself in :mod:`schedlab.registry` (in
this order; a new module here is found and registered after them)."""

from schedlab.builders import request_level, prefill_priority, sarathi, rad  # noqa: F401 (registration order)
