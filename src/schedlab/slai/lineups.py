"""Paper C's scheduler line-ups, by name only, so that the command line can offer them as
defaults without loading the studies."""

#: The batch builders of the throughput-optimality study (:func:`schedlab.slai.studies.throughput`).
THROUGHPUT_SCHEDULERS = ("rad", "rad-long-cycles", "sarathi-fcfs", "request-level", "algorithm2")
