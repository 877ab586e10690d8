"""Calibration: fitting the simulator's server model to real runs (`fit`),
the `server.toml` it is written to (`model`), and checking predictions
against measured runs (`check`). docs/predict.md."""
