"""Paper B, EWSJF: Refine-and-Prune queues, bubble queues, a context-aware score, and
Bayesian meta-optimisation of its parameters over trials run beside the engine."""
