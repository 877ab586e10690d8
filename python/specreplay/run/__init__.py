"""A benchmark run: the replay orchestrator, the capacity search, the feed to the Rust core, targets, distributed runs, calibration."""
