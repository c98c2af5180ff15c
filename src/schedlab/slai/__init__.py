"""Paper C: iteration-level batch builders (request-level, vLLM-style, Sarathi-Serve, RAD,
Algorithm 2, SLAI) on one engine, its workload, engine model, studies and ``schedlab slai``."""
