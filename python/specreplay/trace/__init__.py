"""Workloads: trace records, capture, importers, synthesis, and shaping records into requests."""
