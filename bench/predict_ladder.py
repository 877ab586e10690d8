"""Why the SLO ladder's predicted p90 TTFT was not monotonic in the rate:
predicts bench/predict_llamacpp.py's ladder from a server.toml twice, each
rung on its own prompts and arrivals (the bench before) and every rung on
the same ones (common random numbers, the bench now), with the model's
speed spread and without it, and counts the rungs whose p90 falls below
the one before (docs/predict.md, "Checked against llama.cpp"). Predictions
only: no server, about 20 s of CPU.

    .venv/bin/python bench/predict_ladder.py SERVER.toml BEST_RPS [--requests 12]

BEST_RPS: the highest throughput the calibration saw (the ladder's 100%).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from predict_llamacpp import LADDER, predict_ladder
from specreplay.run.calibrate.model import ServerModel


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("best", type=float)
    ap.add_argument("--requests", type=int, default=12)
    ap.add_argument("--input-len", default="uniform:100:300")
    ap.add_argument("--output-len", type=int, default=32)
    args = ap.parse_args()
    rates = [round(args.best * s, 3) for s in LADDER]
    base = ServerModel.read(args.model)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for spread in (None, 0.0):
            model = base if spread is None else base.with_overrides({"speed_spread": spread})
            path = work / f"model-{spread}.toml"
            path.write_text(model.to_toml())
            for common in (False, True):
                p90 = predict_ladder(path, work, rates, args.requests, args.input_len, args.output_len, common=common)
                values = [p90[r] for r in rates]
                falls = sum(b < a for a, b in zip(values, values[1:]))
                print(f"speed_spread {'fitted' if spread is None else spread}, {'same draws' if common else 'own draws'} per rung: "
                      f"{falls} fall(s): " + ", ".join(f"{r:g}: {v:,.0f}" for r, v in zip(rates, values)), flush=True)


if __name__ == "__main__":
    main()
