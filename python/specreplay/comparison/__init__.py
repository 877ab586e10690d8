"""Runs against runs: per-point changes, intervals and verdicts."""
