"""Per-request SLO thresholds: which requests met them (`met`), from each
request's values (`request_values`). A point's `slo_met` (`point.PointRows`)
is this; goodput and the attainment target count it (`slo`)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from specreplay.settings.objectives import Slo


def request_values(rows: pd.DataFrame, chunks: pd.DataFrame, slo: Slo) -> dict[str, np.ndarray]:
    """Per row of `rows` (with `derived.add_derived`'s columns) and per
    threshold metric, the request's value in µs: ttft/ttfc/tpot/e2e from the
    derived columns, itl the request's largest per-token gap (from `chunks`,
    `derived.chunks` of the rows). NaN where a value does not exist."""
    out: dict[str, np.ndarray] = {}
    for metric in slo.thresholds:
        if metric == "itl":
            out[metric] = _largest_token_gap(rows, chunks)
        else:
            out[metric] = pd.to_numeric(rows[f"{slo.column(metric)}_us"]).to_numpy(dtype="float64")
    return out


def _largest_token_gap(rows: pd.DataFrame, chunks: pd.DataFrame) -> np.ndarray:
    usable = chunks[chunks["itl_us"].notna() & (chunks["tokens"] > 0)]
    per_token = usable["itl_us"].to_numpy(dtype="float64") / usable["tokens"].to_numpy(dtype="float64")
    largest = pd.Series(per_token).groupby(usable["request_index"].to_numpy()).max()
    out: np.ndarray = pd.Series(rows["request_index"].to_numpy()).map(largest).to_numpy(dtype="float64")
    return out


def met(ok: np.ndarray, values: Mapping[str, np.ndarray], slo: Slo) -> np.ndarray:
    """Per row: whether the request met every per-request threshold. A failed
    request never does. A value that does not exist passes, except the time to
    the first answer: a request that never answered (`ttfc`, or `ttft` under
    `ttft_token = "answer"`) did not meet it. TPOT and ITL of a one-token
    answer do not exist and pass, as in vLLM."""
    good: np.ndarray = np.asarray(ok, dtype=bool).copy()
    for metric, limit in slo.thresholds.items():
        value = values[metric]
        answer_wait = slo.column(metric) == "ttfc"
        good &= np.where(np.isnan(value), not answer_wait, value <= limit * 1000.0)
    return good
