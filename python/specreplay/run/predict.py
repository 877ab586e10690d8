"""`specreplay replay --predict server.toml`: each sweep point predicted on
the Rust core's virtual clock (`_core.predict_point`) instead of sent to a
server. The point's requests come from the same `Feeder` a real replay
uses, and the rows from the same batch builder, so everything after
(results file, summary, compare, report, `--find-max-rate`) works on them
unchanged. A prediction is labelled everywhere: its run label ends in
`predicted`, the file's metadata holds `specreplay.predicted`, and the
validity checks add `predicted` and `outside_calibration` findings
(docs/predict.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from specreplay import _core
from specreplay.run.calibrate.model import ServerModel
from specreplay.run.feed import Feeder
from specreplay.trace.shaping import request_batch

from specreplay.results.files import PREDICTED_KEY

if TYPE_CHECKING:
    from specreplay._core import RunSpec

#: Where a predicted run's requests would go: nowhere.
PREDICT_URL = "http://predicted.invalid/v1"


def model_seed(seed: int, draw: int) -> int:
    """The seed of a prediction's own draws (which of two requests sent
    together reaches the server first, the speed spread, output lengths):
    `seed` for draw 0, mixed with the draw number for another, so that
    draws of the model on the same arrivals (`seed`) differ."""
    if draw == 0:
        return seed
    return (seed ^ (draw * 0x9E37_79B9_7F4A_7C15)) % 2**64


def predicted_label(label: str) -> str:
    """A predicted run's label: `predicted`, or `LABEL-predicted`."""
    if label.endswith("predicted"):
        return label
    return "predicted" if label == "run" else f"{label}-predicted"


@dataclass
class _Progress:
    scheduled: int
    sent: int
    finished: int
    failed: int
    output_tokens: int


class PredictedRun:
    """A predicted point, drained like `_core.EngineRun`: its rows were all
    computed when it started."""

    def __init__(self, batches: list[pa.RecordBatch], point_metadata: dict[str, str]) -> None:
        self._batches = list(batches)
        #: Results metadata of this point's rows (what it was predicted from).
        self.point_metadata = point_metadata
        rows = sum(b.num_rows for b in self._batches)
        failed = sum(b.num_rows - b.column("error_kind").null_count for b in self._batches)
        tokens = sum(int(pc.sum(b.column("output_tokens")).as_py() or 0) for b in self._batches)
        self._progress = _Progress(rows, rows, rows, failed, tokens)

    def wants_more(self) -> bool:
        return False

    def progress(self) -> _Progress:
        return self._progress

    def next_batch(self, max_rows: int = 4096, wait_s: float = 0.25) -> pa.RecordBatch | None:
        return self._batches.pop(0) if self._batches else None

    def cancel(self) -> None:
        self._batches.clear()


@dataclass
class Predictor:
    """Predicts a run's points from one server model (with its what-ifs)."""

    model: ServerModel
    seed: int = 0
    points: dict[str, dict[str, Any]] = field(default_factory=dict)

    def start_point(self, spec: RunSpec, feeder: Feeder, label: str, point: str) -> PredictedRun:
        batches, laps = [], []
        for rows, lap in feeder.drain():
            batches.append(request_batch(rows))
            laps.append(lap)
        load = spec["load"]
        concurrent = not (load["mode"] == "concurrency" and load["concurrency"] == 1)
        # A replay against a URL probes the server with its first request before the first point.
        model = self.model.core_mapping(self.seed, usage_probe=not self.points)
        out, stats = _core.predict_point(model, spec, batches, laps, _core.now_us())
        self.points[f"{label}/{point}"] = {
            "label": label,
            "point": point,
            "peak_running": stats.peak_running,
            "peak_waiting": stats.peak_waiting,
            "peak_kv_tokens": stats.peak_kv_tokens,
            "iterations": stats.iterations,
            "span_us": stats.span_us,
            "assumptions": self.model.assumptions(concurrent),
            "prefix_cache_modelled": self.model.prefix_cache_known,
        }
        info = {"model": self.model.source, "calibration": self.model.calibration, "points": [self.points[f"{label}/{point}"]]}
        return PredictedRun([pa.record_batch(b) for b in out], {PREDICTED_KEY: json.dumps([info])})

    def metadata(self) -> dict[str, Any]:
        return {
            "model": self.model.source,
            "calibration": self.model.calibration,
            "params": {n: p.to_toml() for n, p in self.model.params.items()},
            "points": list(self.points.values()),
        }
