"""Paper C: its batch builders (SLAI, Algorithm 2) as schedulers of :mod:`schedlab.engine`,
beside the generic ones it compares them with (:mod:`schedlab.builders`: request-level, prefill
priority, Sarathi-Serve, RAD); its workload, engine model, studies and ``schedlab slai``."""
