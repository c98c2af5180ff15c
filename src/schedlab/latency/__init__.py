"""Step-time sources: hardware and model catalogue, analytical roofline, timed torch passes."""
