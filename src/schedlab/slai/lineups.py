"""Paper C's scheduler line-ups, by name only, so that the command line can offer them as
defaults without loading the studies."""

#: The batch builders of the throughput-optimality study (:func:`schedlab.slai.studies.throughput`).
THROUGHPUT_SCHEDULERS = ("rad", "rad-long-cycles", "sarathi-fcfs", "request-level", "algorithm2")

#: The routing study's defaults (:func:`schedlab.slai.studies.routing`): random routing against
#: join-the-shortest-queue (fewest outstanding requests), on clusters of 1 to 8 engines, at loads
#: below and above saturation.
ROUTING_ROUTERS = ("random", "least-requests")
ROUTING_SCHEDULERS = ("sarathi-fcfs", "rad")
ROUTING_REPLICAS = (1, 2, 4, 8)
ROUTING_FACTORS = (0.8, 0.95, 1.1)
