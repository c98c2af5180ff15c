"""Paper C: batch builders (request-level, prefill priority, Sarathi-Serve, RAD, Algorithm 2,
SLAI) as schedulers of :mod:`schedlab.engine`, its workload, engine model, studies and
``schedlab slai``."""
