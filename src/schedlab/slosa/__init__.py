"""Paper D: SLO-aware priority mapping of a pending set of requests to an ordered sequence of
batches, by simulated annealing over the latency predictor's G objective."""
