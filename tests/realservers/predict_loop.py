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

import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import specreplay
from specreplay.run.calibrate.check import Error, Interval, errors, intervals, join_parts
from specreplay.run.calibrate.fit import calibrate
from specreplay.settings.config import ReplayConfig
from specreplay.run.replay import run_replay
from specreplay.analysis.summary import summarize
from specreplay.trace.synth import SynthConfig, write_synth
from specreplay.trace.records import load_trace, write_trace
from specreplay.trace.text import Redactor


@dataclass
class LoopResult:
    model_path: Path
    errors: list[Error]
    runs: dict[str, Path] = field(default_factory=dict)
    calibration: dict[str, Any] = field(default_factory=dict)
    described: list[str] = field(default_factory=list)
    #: Each figure's median over `draws` predictions of every part (the
    #: model's own draws reseeded, the arrivals kept); empty for one draw.
    over_draws: list[Error] = field(default_factory=list)
    draws: int = 1
    #: Per (point, figure), the measured figure's bootstrap interval over its requests (`check.intervals`).
    measured_intervals: dict[tuple[str, str], Interval] = field(default_factory=dict)
    #: With `repeat`: each held-out point measured a second time (`reworded`
    #: traces), as if it were a prediction of the first: the server's own
    #: run-to-run error, the floor under any prediction's.
    repeat: list[Error] = field(default_factory=list)


def trace(workdir: Path, name: str, n: int, input_len: str, output_len: int | str, seed: int) -> str:
    path = workdir / f"{name}.jsonl"
    write_synth(SynthConfig(num_requests=n, input_len=input_len, output_len=str(output_len), seed=seed), path)
    return str(path)


def reworded(trace_path: str, out: Path, seed: int) -> str:
    """The trace at `trace_path` with its text replaced by `Redactor`'s
    filler (keyed by `seed`): word for word, so the same prompt lengths,
    arrivals and output lengths, the same work for the server's scheduler,
    and none of it in the prompt cache the first trace's run left behind."""
    redactor = Redactor(seed.to_bytes(8, "little"))
    write_trace([replace(r, body=redactor.body(r.body)) for r in load_trace(trace_path).records], out)
    return str(out)


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
    held_out_concurrency: int = 2, held_out_rate_share: float | None = 0.6, seed: int = 1, rounds: int = 1,
    calibrate_output_len: str | None = None, draws: int = 1, repeat: bool = False,
) -> LoopResult:
    """Calibrates from runs at `calibrate_at`, then predicts and measures a
    held-out concurrency and a rate at `held_out_rate_share` of the highest
    throughput calibration saw (None: no rate point).

    `rounds` > 1 interleaves: every point's `n` requests are run in that
    many parts, round-robin over the points (calibration first in each
    round), so a shared machine's slow spells fall on calibration and
    held-out runs alike; a held-out point's parts (measured and predicted,
    each part on its own trace) are joined end to end (`join_parts`). The
    rate is set from the first round's calibration runs.

    `calibrate_output_len`: the calibration traces' output lengths (default
    `output_len`). Varied lengths make the requests of a closed loop end
    apart, so that every batch size up to the concurrency decodes for a
    while and the step table is measured at each (with fixed lengths a
    llama.cpp batch runs in lockstep: all start and end together, and only
    sizes 1 and 4 show).

    `draws` > 1: each part is also predicted with `draws` − 1 other draws of
    the model's own random numbers (`predict_draw`), and `over_draws` has
    each figure's median over them (`check`).

    `repeat`: every held-out part is measured twice, the second time on
    its trace `reworded` (run `again-<part>`, right after it, or right
    before in odd rounds so that neither always follows the other), and
    `repeat` compares the two as `check` compares a prediction: how far
    one real run lands from another of the same load."""
    runs: dict[str, Path] = {}
    calibration: list[Path] = []
    held_out: list[dict[str, Any]] = [{"concurrency": [held_out_concurrency]}]
    parts: dict[str, list[tuple[Path, str, dict[str, Any]]]] = {}
    repeats: dict[str, list[Path]] = {}
    per_part = max(n // rounds, 1)
    for r in range(rounds):
        tail = f"-part{r}" if rounds > 1 else ""
        for k, load in enumerate(calibrate_at):
            name = "calibrate-" + "-".join(f"{key}{v[0]}" for key, v in load.items()) + tail
            t = trace(workdir, name, per_part, input_len, calibrate_output_len or output_len, seed * 100 + k + 1000 * r)
            runs[name] = measure(url, t, workdir / f"{name}.arrow", label=name, **load)
            calibration.append(runs[name])
        if r == 0 and held_out_rate_share is not None:
            best = max(float(summarize(specreplay.load(p))["achieved_rate_rps"].max()) for p in calibration)
            held_out.append({"rate": [round(best * held_out_rate_share, 3)], "seed": seed})
        for k, load in enumerate(held_out):
            point = "held-out-" + "-".join(f"{key}{v[0] if isinstance(v, list) else v}" for key, v in load.items())
            name = point + tail
            t = trace(workdir, name, per_part, input_len, output_len, seed * 100 + 50 + k + 1000 * r)
            again = f"again-{name}"
            order = [name, again] if r % 2 == 0 else [again, name]
            for run in order if repeat else [name]:
                used = t if run == name else reworded(t, workdir / f"{again}.jsonl", seed * 100 + 70 + k + 1000 * r)
                runs[run] = measure(url, used, workdir / f"{run}.arrow", **load)
            parts.setdefault(point, []).append((runs[name], t, load))
            if repeat:
                repeats.setdefault(point, []).append(runs[again])
    return check(workdir, calibration, parts, runs, draws=draws, repeats=repeats)


Parts = dict[str, list[tuple[Path, str, dict[str, Any]]]]


def check(workdir: Path, calibration: list[Path], parts: Parts, runs: dict[str, Path] | None = None, draws: int = 1,
          repeats: dict[str, list[Path]] | None = None) -> LoopResult:
    """Calibrates from the `calibration` runs, predicts every held-out part
    on its own trace and load, and compares each point's joined parts.

    With `draws` > 1 every part is predicted again with other draws of the
    model's own random numbers (`predict_draw`: which of two requests sent
    together reaches the server first, the speed spread), the arrivals
    kept, and `over_draws` has each figure's median over the draws: one
    draw decides a closed loop's first race per part, and at concurrency 2
    the same three traces split the probe's pair in every sitting
    (docs/predict.md, "The c=2 TPOT tail is one draw").

    `repeats`: per held-out point, its parts measured again; `repeat` has
    their joined figures against the first measurement's."""
    runs = dict(runs or {})
    model = calibrate([str(p) for p in calibration])
    model_path = workdir / "server.toml"
    model.write(model_path)
    found: list[Error] = []
    drawn: list[list[list[Error]]] = []  # per point, per draw
    spread: dict[tuple[str, str], Interval] = {}
    repeated: list[Error] = []
    for point, made in parts.items():
        measured = join_parts([specreplay.load(path) for path, _, _ in made])
        spread.update(intervals(measured))
        per_draw = []
        for draw in range(draws):
            predicted = []
            for path, t, load in made:
                name = path.stem + "-predicted" + (f"-draw{draw}" if draw else "")
                out = predict(model_path, t, path.with_name(name + ".arrow"), predict_draw=draw, **load)
                runs[out.stem] = out
                predicted.append(specreplay.load(out))
            per_draw.append(errors(join_parts(predicted), measured))
        found += per_draw[0]
        drawn.append(per_draw)
        if repeats and point in repeats:
            repeated += errors(join_parts([specreplay.load(path) for path in repeats[point]]), measured)
    over = [] if draws == 1 else [median_error(per_draw) for per_draw in drawn]
    return LoopResult(model_path, found, runs, model.calibration, [p.describe() for p in model.params.values()],
                      [e for point in over for e in point], draws, spread, repeated)


def median_error(per_draw: list[list[Error]]) -> list[Error]:
    """Figure by figure, the median of the draws' predictions against the measurement."""
    return [Error(first.point, first.figure, float(statistics.median(d[k].predicted for d in per_draw)), first.measured)
            for k, first in enumerate(per_draw[0])]


def recheck(workdir: Path, draws: int = 1) -> LoopResult:
    """`check` again on the runs a `loop` kept in `workdir` (no server): the
    same real runs predicted by this commit's model, so that two versions of
    the model are compared on one sitting's measurements."""
    # In the order `loop` made them (round by round), so that the fit sees them as it did.
    calibration = sorted(workdir.glob("calibrate-*.arrow"), key=lambda p: (p.stem.rpartition("-part")[2], p.stem))
    parts: Parts = {}
    repeats: dict[str, list[Path]] = {}
    for path in sorted(workdir.glob("again-held-out-*.arrow")):
        repeats.setdefault(path.stem.removeprefix("again-").split("-part")[0], []).append(path)
    for path in sorted(workdir.glob("held-out-*.arrow")):
        if "-predicted" in path.stem:
            continue
        point = path.stem.split("-part")[0]
        key = point.removeprefix("held-out-")
        if key.startswith("concurrency"):
            load: dict[str, Any] = {"concurrency": [int(key.removeprefix("concurrency"))]}
        else:
            rate, _, seed = key.removeprefix("rate").partition("-seed")
            load = {"rate": [float(rate)], "seed": int(seed)}
        parts.setdefault(point, []).append((path, str(path.with_suffix(".jsonl")), load))
    return check(workdir, calibration, parts, draws=draws, repeats=repeats)
