"""Service-level objectives: what each request and each sweep point must
achieve, read from a config's `[slo]` table or `--slo` expressions.

Two kinds (docs/capacity.md has the definitions and the reasons):

- **Per-request thresholds** (`ttft < 2000`, in ms): a request *met the SLO*
  when it succeeded and each of its values is at most its threshold (as in
  vLLM's `bench serve --goodput`). Goodput is such requests, and their output
  tokens, per second of the point.
- **Targets** on a whole point: a percentile of a latency (`p99 ttft <
  2000`), the share of requests that succeeded (`success >= 99%`) or that met
  every threshold (`attainment >= 90%`, DistServe's "SLO attainment"). Each
  gets a verdict from its bootstrap interval (`judge`).

Which TTFT: `ttft_token = "answer"` (the default) makes `ttft` in an SLO the
time to the first *answer* token, what a user of a reasoning model waits for
(GuideLLM's TTFT, AIPerf's time to first output token); `"any"` makes it the
first token of any kind, reasoning included (vLLM's and AIPerf's TTFT). The
results' own `ttft` columns keep their meaning (any token) either way.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from specreplay.errors import ConfigError
from specreplay.analysis.point import PointRows
from specreplay.analysis.resampling import point_intervals, samples_needed
from specreplay.analysis.verdicts import FAILED, HELD, NA, TOO_FEW, UNCERTAIN
from specreplay.results import derived
from specreplay.settings.objectives import Slo, SloTarget

# --- verdicts ------------------------------------------------------------------


@dataclass(frozen=True)
class TargetVerdict:
    """A target judged on one point: the figure, its interval, the verdict."""

    target: SloTarget
    value: float
    low: float
    high: float
    verdict: str
    samples: int
    needed: int

    @property
    def held(self) -> bool:
        return self.verdict == HELD

    @property
    def excess(self) -> float:
        """How far the figure is on the wrong side of the target (ms or share;
        negative when it is on the right side)."""
        return self.target.value - self.value if self.target.is_share else self.value - self.target.value

    def describe(self, slo: Slo | None = None) -> str:
        """`p99 TTFT (first answer token) 118 ms [97, 131] < 60 ms: failed, over by 58 ms (+97%)`."""
        t = self.target
        name = f"{t.stat} {slo.label(t.metric) if slo else t.metric}".strip()
        if t.is_share:
            figure = f"{name} {_pct(self.value)} [{_pct(self.low)}, {_pct(self.high)}] {t.op} {_pct(t.value)}"
        else:
            figure = f"{name} {_ms(self.value)} ms [{_ms(self.low)}, {_ms(self.high)}] {t.op} {_ms(t.value)} ms"
        return f"{figure}: {self.verdict}{self._why()}"

    def _why(self) -> str:
        t = self.target
        if self.verdict == TOO_FEW:
            return f" ({self.samples} trace records, {self.needed} needed for a {t.stat or t.metric})"
        if self.verdict == UNCERTAIN:
            return ", the interval straddles the target"
        if self.verdict == FAILED:
            if t.is_share:
                return f", short by {self.excess * 100:.1f} points"
            return f", over by {_ms(self.excess)} ms ({self.excess / t.value:+.0%})"
        return ""


def _ms(x: float) -> str:
    if math.isnan(x):
        return "—"
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def _pct(x: float) -> str:
    return "—" if math.isnan(x) else f"{x:.1%}"


def judge(target: SloTarget, value: float, low: float, high: float, samples: int, needed: int) -> TargetVerdict:
    """The verdict on `target` from its figure and interval: **held** when
    the whole interval satisfies it (its far end: the high end of a latency,
    the low end of a share), **failed** when none of it does, **uncertain**
    in between; **too few samples** below `needed`, **n/a** without a figure."""
    if math.isnan(value):
        verdict = NA
    elif samples < needed:
        verdict = TOO_FEW
    else:
        far, near = (low, high) if target.is_share else (high, low)
        if math.isnan(far) or math.isnan(near):
            verdict = UNCERTAIN
        elif target.met_by(far):
            verdict = HELD
        elif not target.met_by(near):
            verdict = FAILED
        else:
            verdict = UNCERTAIN
    return TargetVerdict(target, value, low, high, verdict, samples, needed)


def target_samples_needed(target: SloTarget) -> int:
    """Units (distinct trace records) a point needs before `target` gets a
    verdict: `resampling.samples_needed` of its percentile (10 for a p50, 50
    for a p90, 500 for a p99), 2 for a share."""
    return samples_needed(target.quantile)


def verdicts(point: PointRows) -> tuple[TargetVerdict, ...]:
    """Every target of the point's SLOs judged on it (`judge`), its figure
    and interval from `resampling.point_intervals`: the bootstrap `compare`
    uses (the point's trace records resampled, the interval expanded for few
    of them). A target counts the distinct trace records among the point's
    successful requests as its samples, against `target_samples_needed`."""
    slo = point.slo
    if not slo.targets:
        return ()
    latencies = [(slo.column(t.metric), t.quantile) for t in slo.targets if t.quantile is not None]
    shares = {t.metric: point.ok if t.metric == "success" else point.slo_met for t in slo.targets if t.is_share}
    figures = point_intervals(point, latencies, shares)
    out = []
    for t in slo.targets:
        if t.quantile is None:
            value, low, high = figures.shares[t.metric]
        else:
            value, low, high = figures.latencies[(slo.column(t.metric), t.quantile)]
        out.append(judge(t, value, low, high, figures.units, target_samples_needed(t)))
    return tuple(out)


def goodput_intervals(point: PointRows) -> dict[str, tuple[float, float, float]]:
    """The point's goodput with its intervals, from the same resampling as
    its verdicts (`resampling.point_intervals`: records resampled, the
    duration with them): `goodput_rps` and `goodput_tok_s` -> (per second,
    low, high). Empty without per-request thresholds."""
    if not point.slo.thresholds:
        return {}
    good = np.asarray(point.slo_met, dtype="float64")
    tokens = np.nan_to_num(derived.as_float(point.rows, "output_tokens").to_numpy(dtype="float64")) * good
    return point_intervals(point, [], {}, {"goodput_rps": good, "goodput_tok_s": tokens}).rates
