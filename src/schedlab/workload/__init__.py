"""Workload traces: arrival processes and the per-paper request populations."""
