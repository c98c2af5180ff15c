"""Paper B, EWSJF: Refine-and-Prune queues, bubble queues, a context-aware score, and
Bayesian meta-optimisation of its parameters over trials run beside the engine."""

# The policy registry imports this package's policy: load it first, so that importing any
# module of this package resolves the registry before this package's modules.
import schedlab.policies  # noqa: E402,F401
