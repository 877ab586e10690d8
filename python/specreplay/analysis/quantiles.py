"""Quantiles of a weighted sample under many bootstrap resamples, exactly.

The comparison's bootstrap redraws a point's trace records (units) with
replacement, thousands of times; every sample (a request's TTFT, a chunk's
per-token ITL) counts as often as its unit was drawn, times its own weight.
`weighted_quantiles` is the definition: a cumulative sum over every sample,
per resample. On a large run (a million per-token ITL samples a point) that
is a million operations per resample and figure, minutes per comparison.

`UnitQuantiles` gives the same numbers, bit for bit, faster: the sorted
samples are cut into buckets, each unit's weight per bucket is summed once,
and a resample's weight per bucket is then one matrix product (units ×
buckets). Only the bucket that holds a wanted position is summed sample by
sample. Both use numpy's and pandas' default ("linear") interpolation.

`describe` is the plain description of one sample (mean, p50, p90, p99)
that the summary, the sessions' figures and the per-model rows print.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pandas as pd


def weighted_quantiles(values: np.ndarray, weights: np.ndarray, qs: list[float]) -> np.ndarray:
    """Linear-interpolation quantiles (numpy's and pandas' default) of the
    multiset in which sorted `values[j]` appears `weights[r, j]` times, for
    every row r of `weights`: shape (len(qs), rows). NaN for an empty row."""
    rows, m = weights.shape
    if m == 0:
        return np.full((len(qs), rows), np.nan)
    cum = np.cumsum(weights, axis=1)
    total = cum[:, -1]
    stride = float(total.max()) + 1.0
    offset = np.arange(rows) * stride
    flat = (cum + offset[:, None]).ravel()

    def at(position: np.ndarray) -> np.ndarray:
        # The sample at 0-based `position` of each row's expanded multiset.
        j = np.searchsorted(flat, position + offset, side="right") - np.arange(rows) * m
        return np.asarray(values[np.clip(j, 0, m - 1)], dtype="float64")

    return _interpolate(total, qs, at)


def _interpolate(total: np.ndarray, qs: list[float], at: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """Linear interpolation between the samples at the two positions around
    `(total - 1) * q` (`at` finds a position's sample in each row); NaN for a
    row of no samples."""
    out = np.full((len(qs), len(total)), np.nan)
    with np.errstate(invalid="ignore"):
        for i, q in enumerate(qs):
            h = (total - 1) * q
            lo = np.floor(h)
            hi = np.minimum(lo + 1, total - 1)
            v_lo, v_hi = at(lo), at(hi)
            out[i] = np.where(total > 0, v_lo + (v_hi - v_lo) * (h - lo), np.nan)
    return out


class UnitQuantiles:
    """`weighted_quantiles(values, counts[:, unit] * weight, qs)` for unit
    `counts` (resamples × units), computed by buckets (see the module doc).

    `values` are sorted; sample j belongs to unit `unit[j]` and counts
    `weight[j]` times. Every sum is of integers below 2**53, so float64
    holds it exactly and the positions found are those of the definition."""

    def __init__(self, values: np.ndarray, unit: np.ndarray, weight: np.ndarray, units: int) -> None:
        m = len(values)
        self.values = np.asarray(values, dtype="float64")
        # Buckets balance the product (units × buckets per resample) against
        # the sum inside one bucket (samples / buckets, for each of the six
        # positions): sqrt(400 m / units) buckets was the fastest of 25 to
        # 6400 on the bench file (bench/analysis_file.py), with OpenBLAS's
        # threads on or off.
        buckets = max(1, min(m, round(math.sqrt(400.0 * m / max(units, 1)))))
        self.size = max(1, math.ceil(m / buckets))
        buckets = max(1, math.ceil(m / self.size))
        padded = buckets * self.size
        # Samples padded to whole buckets with weight 0 (unit 0: any will do).
        self.unit = np.zeros(padded, dtype="int64")
        self.unit[:m] = unit
        self.weight = np.zeros(padded, dtype="float64")
        self.weight[:m] = weight
        bucket = np.arange(m) // self.size
        per_unit = np.bincount(np.asarray(unit, dtype="int64") * buckets + bucket, weights=self.weight[:m], minlength=units * buckets)
        self.unit_bucket = per_unit.reshape(units, buckets)

    def __call__(self, counts: np.ndarray, qs: list[float]) -> np.ndarray:
        """Shape (len(qs), resamples); NaN for a resample that drew no sample."""
        rows = counts.shape[0]
        m = len(self.values)
        if m == 0 or counts.shape[1] == 0:
            return np.full((len(qs), rows), np.nan)
        cum_bucket = np.cumsum(counts.astype("float64") @ self.unit_bucket, axis=1)
        within = np.arange(self.size)
        resample = np.arange(rows)[:, None]

        def at(position: np.ndarray) -> np.ndarray:
            # The first sample whose cumulative weight exceeds `position`
            # (searchsorted side="right" in the definition): its bucket,
            # then its place in the bucket.
            bucket = (cum_bucket <= position[:, None]).sum(axis=1)
            bucket = np.minimum(bucket, cum_bucket.shape[1] - 1)
            before = np.where(bucket > 0, cum_bucket[np.arange(rows), np.maximum(bucket - 1, 0)], 0.0)
            index = bucket[:, None] * self.size + within
            cum = before[:, None] + np.cumsum(counts[resample, self.unit[index]] * self.weight[index], axis=1)
            j = bucket * self.size + np.argmax(cum > position[:, None], axis=1)
            found: np.ndarray = self.values[np.clip(j, 0, m - 1)]
            return found

        return _interpolate(cum_bucket[:, -1], qs, at)


# --- one sample, described ------------------------------------------------

STATS: tuple[str, ...] = ("mean", "p50", "p90", "p99")
QUANTILES: dict[str, float] = {"p50": 0.50, "p90": 0.90, "p99": 0.99}


def describe(samples: pd.Series | np.ndarray, scale: float = 1.0) -> dict[str, float]:
    """mean, p50, p90 and p99 of `samples` (NaN dropped) divided by `scale`; NaN if none."""
    values = pd.Series(np.asarray(samples, dtype="float64")).dropna() / scale
    if values.empty:
        return {stat: math.nan for stat in STATS}
    out = {"mean": float(values.mean())}
    out.update({stat: float(values.quantile(q)) for stat, q in QUANTILES.items()})
    return out

