"""The one bootstrap behind every interval and verdict: `compare`'s figures,
the SLO verdicts (and so goodput and the capacity search's answer), and the
session figures.

**Unit.** A point is resampled by its trace records (every request that
replayed a record moves with it: a looped trace sends a record several
times), or by session for the session figures. A resample draws the units
with replacement and recomputes *the whole figure* from the requests drawn:
a percentile from their samples, a share from their indicators, a rate from
their tokens over the duration those requests would have taken.

**Duration.** A rate is `sum(tokens) / duration`, and the duration is
resampled too, from the same draw (`PointSample.durations`): it is the
span in which the requests were sent plus the tail after the last one was
sent (the last request still running).

- open loop (a rate or a recorded timing): the span is the sum of the
  inter-arrival gaps of the requests drawn (a Poisson schedule drawn anew
  per run moves it by `1/sqrt(n)`);
- closed loop (a concurrency): the span scales with the work the requests
  drawn did, `sum(E2E)`, at the measured number in flight (Little's law);
- the tail is the time from the last send to the last end among the
  requests drawn: the latest `end − last send` of any request drawn (the
  longest request of a run decides when it ends, so the tail moves with
  the longest answers drawn, not with the mean).

**Pairing.** When two runs replayed the same records, one draw of records
serves both (`paired`): a record's outcome in the two runs forms one pair,
and the pair's difference carries *both* runs' within-record variation (a
sampling server drawing lengths per run) while the mix of records, which
two runs of one trace share, cancels. That is the right variance for an A/A
pair whether or not a record's outcome is reproducible: when it is, the
difference is small; when it is not, the difference is the full noise of
two draws. Unpaired, the runs are drawn independently.

**Few units** (`_expansion`): the interval and the p-value are those of
the expanded percentile bootstrap (Hesterberg), wider by about
`sqrt(n / (n − 1)) × t(n − 1) / z` for n units.

**Enough samples** (`samples_needed`): a percentile `q` is judged only when
its unit count leaves `TAIL_SAMPLES` samples beyond it on its thinner side,
`ceil(TAIL_SAMPLES / min(q, 1 - q))`: 10 for a p50, 50 for a p90, 500 for a
p99. The constant comes from the calibration (docs/compare.md, "The
sample-count rule"): `bench/aa_calibration.py --tails` finds the bootstrap
interval of a percentile keeping to its nominal level from 3 samples
beyond it, and the A/A bench of the simulator asked for 5 (a per-token ITL
p90 from 30 records followed the machine's load between runs).

**Many figures at once** (`holm`): a compare table judges a dozen figures or
more; each gets a bootstrap p-value (`p_value`) and the table's figures are
adjusted together by Holm–Bonferroni, so that the chance that *any* figure
of an A/A table is called different is at most `1 - confidence`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist

import numpy as np
import pandas as pd

from specreplay.results import derived
from specreplay.settings.latencies import LATENCIES
from specreplay.analysis.draws import draw, draw_batches, rng
from specreplay.analysis.point import PointRows
from specreplay.analysis.quantiles import QUANTILES, UnitQuantiles, weighted_quantiles
from specreplay.trace.records import RETRIEVAL_APIS

#: (summary prefix, display name) of the latencies compared, in table order.
LATENCY_METRICS: tuple[tuple[str, str], ...] = tuple((lat.name, lat.compared_as) for lat in LATENCIES if lat.compared_as is not None)
LATENCY_STATS: dict[str, float] = QUANTILES
#: (summary column, display name, token column) of the throughputs compared.
THROUGHPUT_METRICS: tuple[tuple[str, str, str], ...] = (
    ("output_tok_s", "output tok/s", "output_tokens"),
    ("content_tok_s", "content tok/s", "content_tokens"),
)

#: Samples a judged percentile needs beyond it, on its thinner side (see the module doc).
TAIL_SAMPLES = 5

CONFIDENCE = 0.95
RESAMPLES = 2000
SEED = 0


def samples_needed(quantile: float | None) -> int:
    """Units (requests, or sessions) a figure at `quantile` needs before it is
    judged; a rate or share (`None`) needs one per side of the ratio."""
    if quantile is None:
        return 2
    thin = min(quantile, 1 - quantile)
    if thin <= 0:
        return 1 << 62
    return math.ceil(TAIL_SAMPLES / thin - 1e-9)


@lru_cache(maxsize=None)
def _expansion(units: int | None) -> float:
    """Hesterberg's expanded percentile bootstrap: a bootstrap of n units is
    too narrow by about sqrt((n − 1) / n) and uses the normal where Student's
    t with n − 1 degrees of freedom belongs. The interval reads the bootstrap
    quantiles at the normal level whose z is this factor times the nominal
    one's (1.17 at 12 units, 1.03 at 100, → 1)."""
    if units is None or units < 3:
        return 1.0
    nominal = NormalDist().inv_cdf(0.975)
    return math.sqrt(units / (units - 1)) * _t_quantile(0.05, units - 1) / nominal


def p_value(ratios: np.ndarray, units: int | None = None) -> float:
    """Two-sided bootstrap p-value of `ratio == 1` from resampled ratios
    (the share of resamples on the far side of 1, doubled), expanded for
    `units` as the interval is (`_expansion`)."""
    r = ratios[np.isfinite(ratios)]
    if not len(r):
        return math.nan
    below, above = int(np.count_nonzero(r <= 1)), int(np.count_nonzero(r >= 1))
    p = min(1.0, 2 * (min(below, above) + 1) / (len(r) + 1))
    if p >= 1.0:
        return p
    z = NormalDist().inv_cdf(1 - p / 2) / _expansion(units)
    return 2 * (1 - NormalDist().cdf(z))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm–Bonferroni adjusted p-values (NaN stays NaN and is not counted)."""
    index = [i for i, p in enumerate(p_values) if not math.isnan(p)]
    m = len(index)
    out = [math.nan] * len(p_values)
    running = 0.0
    for k, i in enumerate(sorted(index, key=lambda j: p_values[j])):
        running = max(running, min(1.0, (m - k) * p_values[i]))
        out[i] = running
    return out


def overlap(a: list[str], b: list[str]) -> float:
    if not a or not b:
        return 0.0
    return len(set(a) & set(b)) / max(len(set(a)), len(set(b)))


#: The suffix `#k` the engine appends to a trace id on the k-th loop over the trace.
_LOOP_SUFFIX = re.compile(r"#\d+$")


def record_id(trace_id: str) -> str:
    """The trace record a request replayed (its trace id without the loop suffix)."""
    return _LOOP_SUFFIX.sub("", trace_id)


@dataclass
class _Samples:
    """Samples of one figure: sorted values, how many times each counts, and
    the request (index into the point's request list) each belongs to."""

    values: np.ndarray
    weights: np.ndarray
    request: np.ndarray


def _sorted(values: np.ndarray, weights: np.ndarray, request: np.ndarray) -> _Samples:
    order = np.argsort(values, kind="stable")
    return _Samples(values[order], weights[order], request[order])


@dataclass
class PointSample:
    """What a point's resamples are computed from, per measured request."""

    ids: list[str]  # the trace record each request replayed
    n_ok: int
    samples: dict[str, _Samples]  # latency prefix -> samples
    tokens: dict[str, np.ndarray]  # token column -> per request (0 unless ok)
    e2e: np.ndarray  # E2E µs of ok requests, else 0
    ok: np.ndarray
    gap: np.ndarray  # open loop: µs since the previous request was sent (0 for the first)
    closed: bool
    span: float  # µs from the first request sent to the last
    tail: float  # µs from the last request sent to the last end
    overhang: np.ndarray  # per request: µs from the last request sent to its end (NaN without one)

    @classmethod
    def of(cls, point: PointRows) -> PointSample:
        rows = point.rows.reset_index(drop=True)
        ok = np.asarray(point.ok, dtype=bool)
        ids = [record_id(str(t)) for t in rows["trace_id"]]
        samples: dict[str, _Samples] = {}
        index = np.arange(len(rows))
        # Embeddings and rerank have their own figures (`comparison.kind_rows`), as in the summary.
        generating = ~rows["api"].isin(RETRIEVAL_APIS).to_numpy(dtype=bool) if "api" in rows.columns else np.ones(len(rows), dtype=bool)
        for prefix in ("ttft", "ttfc", "tpot", "e2e"):
            values = rows[f"{prefix}_us"].to_numpy(dtype="float64")
            keep = ok & ~np.isnan(values) & generating
            samples[prefix] = _sorted(values[keep] / 1000.0, np.ones(int(keep.sum()), dtype="int64"), index[keep])
        # ITL per token: a gap g ending a chunk of k tokens is k samples of g / k,
        # kept as one value of weight k that belongs to the chunk's request.
        # request_index is unique within a point: it names each chunk's request.
        position = pd.Series(index, index=rows["request_index"].to_numpy())
        parent = position.loc[point.chunks["request_index"].to_numpy()].to_numpy(dtype="int64")
        usable, per_token, k = derived.token_gaps(point.chunks)
        samples["itl_token"] = _sorted(per_token / 1000.0, k, parent[usable])
        e2e = np.nan_to_num(np.where(ok, rows["e2e_us"].to_numpy(dtype="float64"), 0.0))
        tokens = {col: np.where(ok, np.nan_to_num(derived.as_float(rows, col).to_numpy()), 0.0) for _, _, col in THROUGHPUT_METRICS}
        sent = derived.as_float(rows, "sent_us").to_numpy(dtype="float64")
        end = derived.as_float(rows, "end_us").to_numpy(dtype="float64")
        gap = np.zeros(len(rows))
        overhang = np.full(len(rows), np.nan)
        span = tail = math.nan
        if np.isfinite(sent).any() and np.isfinite(end).any():
            order = np.argsort(np.where(np.isfinite(sent), sent, np.inf), kind="stable")
            ordered = sent[order]
            finite = np.isfinite(ordered)
            steps = np.diff(ordered[finite], prepend=ordered[finite][0])
            gap[order[finite]] = steps
            span = float(np.nanmax(sent) - np.nanmin(sent))
            tail = max(0.0, float(np.nanmax(end) - np.nanmax(sent)))
            overhang = end - np.nanmax(sent)
        return cls(
            ids=ids, n_ok=int(ok.sum()), samples=samples, tokens=tokens, e2e=e2e, ok=ok, gap=gap,
            closed=point.mode == "concurrency", span=span, tail=tail, overhang=overhang,
        )  # fmt: skip

    @property
    def n_units(self) -> int:
        """Distinct trace records among the successful requests: what a percentile's sample count is."""
        return len({i for i, ok in zip(self.ids, self.ok) if ok})

    def durations(self, counts: np.ndarray, unit_of_request: np.ndarray | None = None) -> np.ndarray:
        """The point's duration (µs) under `counts` (resamples × units) of
        the units of `unit_of_request` (default: one unit per request; see
        the module doc)."""
        unit = np.arange(len(self.ids)) if unit_of_request is None else unit_of_request
        n = counts.shape[1]
        e2e_total = float(self.e2e.sum())
        # The latest end of each unit's requests: a unit drawn ends as late as its latest.
        latest = np.full(n, -np.inf)
        np.maximum.at(latest, unit, np.nan_to_num(self.overhang, nan=-np.inf))
        with np.errstate(divide="ignore", invalid="ignore"):
            work = counts @ per_unit(self.e2e, unit, n)
            span = self.span * work / e2e_total if self.closed else counts @ per_unit(self.gap, unit, n)
            ends = np.where(counts > 0, latest, -np.inf)
            tail = np.maximum(ends.max(axis=1, initial=-np.inf), 0.0)
        return np.asarray(span + tail, dtype="float64")


def per_unit(amount: np.ndarray, unit_of_request: np.ndarray, n_units: int) -> np.ndarray:
    """A per-request amount summed per unit, so that a resample's total is
    its unit counts times these sums, not a sum over its requests. Every
    amount summed (µs, tokens, 0/1 indicators) is a whole number below
    2**53 in float64, so both sums are exact and equal, bit for bit."""
    return np.bincount(unit_of_request, weights=np.asarray(amount, dtype="float64"), minlength=n_units)


def units(ids: list[str], keys: list[str] | None = None) -> tuple[np.ndarray, int]:
    """Per request, the index of its resampling unit (its trace record) among
    `keys` (default: the records of `ids`, in order); and the number of units."""
    keys = keys if keys is not None else list(dict.fromkeys(ids))
    position = {key: i for i, key in enumerate(keys)}
    return np.array([position[i] for i in ids], dtype="int64"), len(keys)


def _quantilers(data: PointSample, unit_of_request: np.ndarray, n_units: int, prefixes: Iterable[str] | None = None) -> dict[str, UnitQuantiles]:
    wanted = data.samples if prefixes is None else prefixes
    return {p: UnitQuantiles(data.samples[p].values, unit_of_request[data.samples[p].request], data.samples[p].weights, n_units) for p in wanted}


class _Side:
    """One run's point ready to be recomputed under unit counts."""

    def __init__(self, data: PointSample, unit_of_request: np.ndarray, n_units: int) -> None:
        self.data, self.unit_of_request, self.n_units = data, unit_of_request, n_units
        self.quantiles = _quantilers(data, unit_of_request, n_units)
        self.tokens = {column: per_unit(data.tokens[column], unit_of_request, n_units) for _, _, column in THROUGHPUT_METRICS}

    def figures(self, unit_counts: np.ndarray) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for prefix, _ in LATENCY_METRICS:
            values = self.quantiles[prefix](unit_counts, list(LATENCY_STATS.values()))
            for i, stat in enumerate(LATENCY_STATS):
                out[f"{prefix}_{stat}_ms"] = values[i]
        duration = self.data.durations(unit_counts, self.unit_of_request)
        with np.errstate(divide="ignore", invalid="ignore"):
            for metric, _, column in THROUGHPUT_METRICS:
                out[metric] = (unit_counts @ self.tokens[column]) / duration * 1e6
        return out


def figure_names() -> list[str]:
    """Summary columns of the figures `pair_ratios` resamples, in table order."""
    return [f"{prefix}_{stat}_ms" for prefix, _ in LATENCY_METRICS for stat in LATENCY_STATS] + [m for m, _, _ in THROUGHPUT_METRICS]


def pair_ratios(base: PointSample, other: PointSample, paired: bool, resamples: int, generator: np.random.Generator) -> dict[str, np.ndarray]:
    """Resampled `other / base` of every compared figure: metric -> (resamples,)."""
    if paired:
        keys = list(dict.fromkeys(base.ids + other.ids))
        (map_b, n_b), (map_o, n_o) = units(base.ids, keys), units(other.ids, keys)
    else:
        (map_b, n_b), (map_o, n_o) = units(base.ids), units(other.ids)
    side_b, side_o = _Side(base, map_b, n_b), _Side(other, map_o, n_o)
    biggest = max([len(s.values) for s in (*base.samples.values(), *other.samples.values())] + [len(base.ids), len(other.ids)])
    widest = max(len(base.ids), len(other.ids), n_b, n_o)
    out: dict[str, list[np.ndarray]] = {m: [] for m in figure_names()}
    for counts in draw_batches(generator, [n_b] if paired else [n_b, n_o], resamples, biggest, widest):
        fig_b, fig_o = side_b.figures(counts[0]), side_o.figures(counts[-1])
        with np.errstate(divide="ignore", invalid="ignore"):
            for metric in out:
                out[metric].append(fig_o[metric] / fig_b[metric])
    return {m: np.concatenate(v) for m, v in out.items()}


def session_ratios(
    base: pd.DataFrame, other: pd.DataFrame, qs: list[float], same_trace: bool, resamples: int, generator: np.random.Generator
) -> tuple[np.ndarray, bool]:
    """Resampled `other / base` of the completed sessions' duration quantiles
    `qs`, the session the unit ((len(qs), resamples)); and whether paired."""
    ids_b, ids_o = [record_id(str(i)) for i in base.index], [record_id(str(i)) for i in other.index]
    paired = same_trace and overlap(ids_b, ids_o) >= 0.5
    keys = list(dict.fromkeys(ids_b + ids_o)) if paired else None
    (unit_b, n_b), (unit_o, n_o) = units(ids_b, keys), units(ids_o, keys)
    draws_b = draw(generator, n_b, resamples)
    draws_o = draws_b if paired else draw(generator, n_o, resamples)

    def resampled(sessions: pd.DataFrame, unit: np.ndarray, draws: np.ndarray) -> np.ndarray:
        done = sessions["completed"].to_numpy(dtype=bool)
        values = sessions["duration_s"].to_numpy(dtype="float64")[done]
        order = np.argsort(values, kind="stable")
        return weighted_quantiles(values[order], draws[:, unit[done][order]], qs)

    with np.errstate(divide="ignore", invalid="ignore"):
        return resampled(other, unit_o, draws_o) / resampled(base, unit_b, draws_b), paired


#: A figure with its interval: (value, low, high).
Interval = tuple[float, float, float]


def interval_of(ratios: np.ndarray, confidence: float, resamples: int, units: int | None = None) -> tuple[float, float]:
    """The percentile interval of resampled values, expanded for `units`
    (`_expansion`; NaN when under half are finite)."""
    r = ratios[np.isfinite(ratios)]
    if len(r) < resamples / 2:
        return math.nan, math.nan
    z = NormalDist().inv_cdf(1 - (1 - confidence) / 2) * _expansion(units)
    alpha = 1 - NormalDist().cdf(z)
    low, high = np.quantile(r, [alpha, 1 - alpha])
    return float(low), float(high)


@dataclass
class PointIntervals:
    """One run's figures on one point with their intervals (`point_intervals`)."""

    latencies: dict[tuple[str, float], Interval]
    """(latency prefix, quantile) -> (quantile, low, high), ms."""
    shares: dict[str, Interval]
    """share name -> (mean, low, high)."""
    rates: dict[str, Interval]
    """rate name -> (per second, low, high)."""
    units: int
    """Distinct trace records among the successful requests: the count
    `samples_needed` is held against."""


def point_intervals(
    point: PointRows,
    latencies: Sequence[tuple[str, float]],
    shares: Mapping[str, np.ndarray],
    rates: Mapping[str, np.ndarray] | None = None,
    *,
    confidence: float = CONFIDENCE,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> PointIntervals:
    """One run's figures on one point with their bootstrap intervals,
    resampled as `compare` resamples a point (its trace records, seeded by
    `seed` and the point's name; expanded for few records, `_expansion`):
    each (latency prefix, quantile) -> (quantile, low, high), each share (a
    per-request indicator over `point.rows`) -> (mean, low, high), and each
    rate (a per-request amount over `point.rows`, counted for successful
    requests only: goodput's requests or tokens) -> (per second, low, high),
    its duration resampled with its requests (`PointSample.durations`). The
    SLO verdicts and goodput read these."""
    data = PointSample.of(point)
    unit_of_request, n_units = units(data.ids)
    rates = rates or {}
    wanted: dict[str, list[float]] = {}
    for prefix, q in latencies:
        wanted.setdefault(prefix, []).append(q)
    quantiles = _quantilers(data, unit_of_request, n_units, wanted)
    generator = rng(seed, point.point)
    drawn: dict[tuple[str, float] | str, list[np.ndarray]] = {(prefix, q): [] for prefix, q in latencies}
    drawn.update({name: [] for name in shares})
    drawn.update({f"rate:{name}": [] for name in rates})
    amounts = {name: np.where(data.ok, np.nan_to_num(np.asarray(amount, dtype="float64")), 0.0) for name, amount in rates.items()}
    unit_shares = {name: per_unit(indicator, unit_of_request, n_units) for name, indicator in shares.items()}
    unit_amounts = {name: per_unit(amount, unit_of_request, n_units) for name, amount in amounts.items()}
    requests = per_unit(np.ones(len(data.ids)), unit_of_request, n_units)
    biggest = max([len(data.samples[p].values) for p in wanted] + [len(data.ids)])
    for (counts,) in draw_batches(generator, [n_units], resamples, biggest, max(len(data.ids), n_units)):
        for prefix, qs in wanted.items():
            for q, figures in zip(qs, quantiles[prefix](counts, qs)):
                drawn[(prefix, q)].append(figures)
        with np.errstate(divide="ignore", invalid="ignore"):
            for name, indicator in unit_shares.items():
                drawn[name].append(counts @ indicator / (counts @ requests))
            if amounts:
                duration = data.durations(counts, unit_of_request)
                for name, amount in unit_amounts.items():
                    drawn[f"rate:{name}"].append(counts @ amount / duration * 1e6)
    ones = np.ones((1, n_units), dtype="int64")
    ok_units = data.n_units

    def interval(value: float, samples: list[np.ndarray]) -> Interval:
        if math.isnan(value):
            return value, math.nan, math.nan
        low, high = interval_of(np.concatenate(samples), confidence, resamples, ok_units)
        return value, low, high

    out_latency = {(prefix, q): interval(float(quantiles[prefix](ones, [q])[0, 0]), drawn[(prefix, q)]) for prefix, q in latencies}
    out_share = {name: interval(float(np.mean(indicator)) if len(indicator) else math.nan, drawn[name]) for name, indicator in shares.items()}
    whole = float(data.durations(np.ones((1, len(data.ids))))[0]) if len(data.ids) else math.nan
    out_rate = {
        name: interval(float(amount.sum()) / whole * 1e6 if whole > 0 else math.nan, drawn[f"rate:{name}"]) for name, amount in amounts.items()
    }
    return PointIntervals(out_latency, out_share, out_rate, ok_units)


# --- between repeats ------------------------------------------------------------


def _t_two_sided(t: float, df: int) -> float:
    """P(|T| >= t) for Student's t with integer `df` (closed form by parity)."""
    theta = math.atan(abs(t) / math.sqrt(df))
    c, s = math.cos(theta), math.sin(theta)
    if df % 2:
        term, total = c, c if df > 1 else 0.0
        for k in range(3, df - 1, 2):
            term *= c * c * (k - 1) / k
            total += term
        inside = 2 / math.pi * (theta + s * total)
    else:
        term, total = 1.0, 1.0
        for k in range(2, df - 1, 2):
            term *= c * c * (k - 1) / k
            total += term
        inside = s * total
    return max(0.0, 1.0 - inside)


def _t_quantile(p_two_sided: float, df: int) -> float:
    """The t with P(|T| >= t) = `p_two_sided` (bisection)."""
    low, high = 0.0, 1e6
    for _ in range(200):
        mid = (low + high) / 2
        if _t_two_sided(mid, df) > p_two_sided:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def between_repeats(base: Sequence[float], other: Sequence[float], confidence: float) -> tuple[float, float, float, float]:
    """A figure's change over interleaved repeats (repeat k of the base with
    repeat k of the run): the mean log ratio, its Student-t interval from
    the spread between repeats, and the test's two-sided p-value, as
    (change, low, high, p); NaN with fewer than two finite pairs."""
    ratios = np.array([o / b for b, o in zip(base, other) if b and b > 0 and o > 0 and math.isfinite(b) and math.isfinite(o)])
    n = len(ratios)
    if n < 2:
        return math.nan, math.nan, math.nan, math.nan
    logs = np.log(ratios)
    mean, sd = float(logs.mean()), float(logs.std(ddof=1))
    error = sd / math.sqrt(n)
    if error == 0:
        return math.expm1(mean), math.expm1(mean), math.expm1(mean), 0.0 if mean else 1.0
    half = _t_quantile(1 - confidence, n - 1) * error
    return math.expm1(mean), math.expm1(mean - half), math.expm1(mean + half), _t_two_sided(mean / error, n - 1)
