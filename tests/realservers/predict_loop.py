"""The calibrate → predict → check loop against a real server, shared by
`tests/test_predict_llamacpp.py` (a generous bound, to catch breakage) and
`bench/predict_llamacpp.py` (the error table in docs/predict.md).

Each run gets a fresh synthetic trace (its own seed) so that the server's
prompt cache does not hit across runs. Calibration runs at two load levels;
the held-out runs are at a concurrency and a rate calibration did not use,
and the prediction of each is made on the held-out run's own trace and
schedule (same seed), then compared figure by figure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import specreplay
from specreplay.run.calibrate.check import Error, errors
from specreplay.run.calibrate.fit import calibrate
from specreplay.settings.config import ReplayConfig
from specreplay.run.replay import run_replay
from specreplay.analysis.summary import summarize
from specreplay.trace.synth import SynthConfig, write_synth


@dataclass
class LoopResult:
    model_path: Path
    errors: list[Error]
    runs: dict[str, Path] = field(default_factory=dict)
    calibration: dict[str, Any] = field(default_factory=dict)
    described: list[str] = field(default_factory=list)


def trace(workdir: Path, name: str, n: int, input_len: str, output_len: int, seed: int) -> str:
    path = workdir / f"{name}.jsonl"
    write_synth(SynthConfig(num_requests=n, input_len=input_len, output_len=str(output_len), seed=seed), path)
    return str(path)


def measure(url: str, trace_path: str, out: Path, **load: Any) -> Path:
    result = run_replay(ReplayConfig(trace=trace_path, url=url, output=str(out), timeout=120.0, **load))
    assert not result.interrupted
    return out


def predict(model: Path, trace_path: str, out: Path, **load: Any) -> Path:
    run_replay(ReplayConfig(trace=trace_path, predict=str(model), output=str(out), **load))
    return out


def loop(
    url: str, workdir: Path, *, n: int, input_len: str, output_len: int,
    calibrate_at: tuple[dict[str, Any], ...] = ({"concurrency": [1]}, {"concurrency": [4]}),
    held_out_concurrency: int = 2, held_out_rate_share: float | None = 0.6, seed: int = 1,
) -> LoopResult:
    """Calibrates from runs at `calibrate_at`, then predicts and measures a
    held-out concurrency and a rate at `held_out_rate_share` of the highest
    throughput calibration saw (None: no rate point)."""
    runs: dict[str, Path] = {}
    for k, load in enumerate(calibrate_at):
        name = "calibrate-" + "-".join(f"{key}{v[0]}" for key, v in load.items())
        t = trace(workdir, name, n, input_len, output_len, seed * 100 + k)
        runs[name] = measure(url, t, workdir / f"{name}.arrow", label=name, **load)
    model = calibrate([str(p) for p in runs.values()])
    model_path = workdir / "server.toml"
    model.write(model_path)
    best = max(float(summarize(specreplay.load(p))["achieved_rate_rps"].max()) for p in runs.values())
    held_out: list[dict[str, Any]] = [{"concurrency": [held_out_concurrency]}]
    if held_out_rate_share is not None:
        held_out.append({"rate": [round(best * held_out_rate_share, 3)], "seed": seed})
    found: list[Error] = []
    for k, load in enumerate(held_out):
        name = "held-out-" + "-".join(f"{key}{v[0] if isinstance(v, list) else v}" for key, v in load.items())
        t = trace(workdir, name, n, input_len, output_len, seed * 100 + 50 + k)
        runs[name] = measure(url, t, workdir / f"{name}.arrow", **load)
        runs[name + "-predicted"] = predict(model_path, t, workdir / f"{name}-predicted.arrow", **load)
        found += errors(specreplay.load(runs[name + "-predicted"]), specreplay.load(runs[name]))
    return LoopResult(model_path, found, runs, model.calibration, [p.describe() for p in model.params.values()])
