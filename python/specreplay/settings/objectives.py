"""Service-level objectives as settings: the `[slo]` table and `--slo`
expressions parsed into `Slo` (per-request thresholds and point targets).
What a run's requests and points made of them is `analysis.slo`'s job;
docs/capacity.md has the definitions and the reasons."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from specreplay.errors import ConfigError
from specreplay.settings.latencies import LATENCIES

#: Latencies an SLO may name -> what they are, for messages and docs.
LATENCY_METRICS: dict[str, str] = {lat.slo_name: lat.slo_meaning or "" for lat in LATENCIES if lat.slo_name is not None}
#: An SLO's latency name -> the summary's (`itl` is the per-token ITL).
_SUMMARY_NAME: dict[str, str] = {lat.slo_name: lat.name for lat in LATENCIES if lat.slo_name is not None}
#: An SLO's latency name -> how a comparison and a report name it.
_REPORTED_AS: dict[str, str] = {lat.slo_name: lat.compared_as or lat.label for lat in LATENCIES if lat.slo_name is not None}
#: Shares a target may name.
SHARE_METRICS: dict[str, str] = {
    "success": "share of requests that succeeded",
    "attainment": "share of requests that met every per-request threshold",
}
TTFT_TOKENS = ("answer", "any")

#: Keys of the `[slo]` table besides the per-request thresholds.
TABLE_KEYS = ("targets", "min_success_rate", "min_attainment", "ttft_token")

_TARGET = re.compile(
    r"^\s*(?:(?P<stat>p\d+(?:\.\d+)?)\s+)?(?P<metric>[a-z0-9_]+)\s*(?P<op><=|>=|<|>)\s*"
    r"(?P<value>[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(?P<unit>ms|s|%)?\s*$"
)


@dataclass(frozen=True)
class SloTarget:
    """One target on a whole point: `p99 ttft < 2000` (quantile 0.99 of TTFT
    below 2000 ms), `success >= 0.99`, `attainment >= 0.9`."""

    metric: str
    op: str
    value: float
    """ms for a latency, a share in [0, 1] for success and attainment."""
    quantile: float | None = None
    """The percentile as a fraction (0.99), for a latency."""

    @property
    def is_share(self) -> bool:
        return self.metric in SHARE_METRICS

    @property
    def stat(self) -> str:
        """`p99`, `p99.9`; "" for a share."""
        return "" if self.quantile is None else f"p{self.quantile * 100:g}"

    @property
    def text(self) -> str:
        """The target as written in a config file: `p99 ttft < 2000`, `success >= 99%`."""
        if self.is_share:
            return f"{self.metric} {self.op} {self.value * 100:g}%"
        return f"{self.stat} {self.metric} {self.op} {self.value:g}"

    def met_by(self, x: float) -> bool:
        """Whether the value `x` satisfies the target."""
        return {"<": x < self.value, "<=": x <= self.value, ">": x > self.value, ">=": x >= self.value}[self.op]


def parse_target(text: str, where: str = "target") -> SloTarget:
    """`p99 ttft < 2000`, `p90 tpot <= 50ms`, `p99 e2e < 30s`, `success >= 99%`,
    `attainment >= 0.9`; a ConfigError saying what is wrong otherwise."""
    m = _TARGET.match(text.lower())
    if m is None:
        raise ConfigError(
            f"{where}: cannot read {text!r}: expected 'pNN METRIC < MS' (e.g. 'p99 ttft < 2000'), "
            "'success >= 99%' or 'attainment >= 90%'"
        )
    stat, metric, op, unit = m["stat"], m["metric"], m["op"], m["unit"]
    value = float(m["value"])
    if metric in SHARE_METRICS:
        if stat:
            raise ConfigError(f"{where}: {metric} is a share of requests, not a latency: write '{metric} >= 99%'")
        if op not in (">", ">="):
            raise ConfigError(f"{where}: {metric} must be at least something: write '{metric} >= …'")
        if unit not in (None, "%"):
            raise ConfigError(f"{where}: {metric} is a share: give it in % or as a fraction")
        share = value / 100 if unit == "%" else value
        if not 0 <= share <= 1:
            raise ConfigError(f"{where}: {metric} must be between 0 and 100%, got {text.strip()!r}")
        return SloTarget(metric, op, share)
    if metric not in LATENCY_METRICS:
        known = ", ".join([*LATENCY_METRICS, *SHARE_METRICS])
        raise ConfigError(f"{where}: unknown metric {metric!r} in {text!r} (known: {known})")
    if op not in ("<", "<="):
        raise ConfigError(f"{where}: a latency target is an upper bound: write '{stat or 'p99'} {metric} < …'")
    if unit == "%":
        raise ConfigError(f"{where}: a latency is in ms (or s), not %")
    ms = value * 1000 if unit == "s" else value
    _check_ms(where, ms)
    if not stat:
        raise ConfigError(f"{where}: {text.strip()!r} has no percentile: write e.g. 'p99 {metric} < {value:g}' (a per-request threshold is '{metric} = {value:g}' in [slo])")
    quantile = round(float(stat[1:]) / 100, 12)  # p99.9 is 0.999, not 0.9990000000000001
    if not 0 < quantile < 1:
        raise ConfigError(f"{where}: the percentile must be between p0 and p100, got {stat}")
    return SloTarget(metric, op, ms, quantile)


def _check_ms(where: str, value: float) -> None:
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{where}: must be a positive number of ms, got {value:g}")


@dataclass(frozen=True)
class Slo:
    """The SLOs of a run (see the module doc). Empty when none are set."""

    thresholds: dict[str, float] = field(default_factory=dict)
    """Per-request thresholds: latency metric -> ms."""
    targets: tuple[SloTarget, ...] = ()
    """Every target, the shares (min_success_rate, min_attainment) included."""
    ttft_token: str = "answer"

    @property
    def empty(self) -> bool:
        return not self.thresholds and not self.targets

    @classmethod
    def from_table(cls, table: Mapping[str, Any], where: str = "slo") -> Slo:
        """The `[slo]` table: per-request thresholds by metric name, `targets`
        (a list of target expressions), `min_success_rate` and `min_attainment`
        (fractions), `ttft_token`."""
        thresholds: dict[str, float] = {}
        targets: list[SloTarget] = []
        ttft_token = "answer"
        for key, value in table.items():
            at = f"{where}.{key}"
            if key in LATENCY_METRICS:
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise ConfigError(f"{at}: expected a number of ms, got {value!r}")
                _check_ms(at, float(value))
                thresholds[key] = float(value)
            elif key == "targets":
                items = value if isinstance(value, list) else [value]
                for i, item in enumerate(items):
                    if not isinstance(item, str):
                        raise ConfigError(f"{at}[{i}]: expected a string such as 'p99 ttft < 2000', got {item!r}")
                    targets.append(parse_target(item, f"{at}[{i}]"))
            elif key in ("min_success_rate", "min_attainment"):
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
                    raise ConfigError(f"{at}: expected a fraction between 0 and 1, got {value!r}")
                targets.append(SloTarget("success" if key == "min_success_rate" else "attainment", ">=", float(value)))
            elif key == "ttft_token":
                if value not in TTFT_TOKENS:
                    raise ConfigError(f"{at}: expected one of {', '.join(TTFT_TOKENS)}, got {value!r}")
                ttft_token = str(value)
            else:
                known = ", ".join([*LATENCY_METRICS, *TABLE_KEYS])
                raise ConfigError(f"{at}: unknown key (known: {known})")
        return cls(thresholds, _unique(targets), ttft_token)

    def to_table(self) -> dict[str, Any]:
        """The `[slo]` table that `from_table` reads back to this."""
        out: dict[str, Any] = dict(self.thresholds)
        latency = [t.text for t in self.targets if not t.is_share]
        if latency:
            out["targets"] = latency
        for t in self.targets:
            if t.is_share:
                out["min_success_rate" if t.metric == "success" else "min_attainment"] = t.value
        if self.ttft_token != "answer":
            out["ttft_token"] = self.ttft_token
        return out

    def column(self, metric: str) -> str:
        """The summary prefix (and `add_derived` column stem) a latency of an
        SLO reads: `ttft` is TTFC unless `ttft_token = "any"`; `itl` is per token."""
        if metric == "ttft":
            return "ttft" if self.ttft_token == "any" else "ttfc"
        return _SUMMARY_NAME.get(metric, metric)

    def label(self, metric: str) -> str:
        """How a report names the metric: `TTFT (first answer token)`."""
        if metric == "ttft":
            return "TTFT (first token)" if self.ttft_token == "any" else "TTFT (first answer token)"
        return _REPORTED_AS.get(metric, metric)  # a share (success, attainment) by its own name


def _unique(targets: Iterable[SloTarget]) -> tuple[SloTarget, ...]:
    """One target per (metric, percentile): a later one replaces an earlier."""
    out: dict[tuple[str, float | None], SloTarget] = {}
    for t in targets:
        out[(t.metric, t.quantile)] = t
    return tuple(out.values())


def table_from_expressions(expressions: Iterable[str], where: str = "--slo") -> dict[str, Any]:
    """`--slo` expressions as an `[slo]` table: `ttft < 2000` (no percentile)
    is a per-request threshold, `p99 ttft < 2000` a target, `success >= 99%`
    min_success_rate, `attainment >= 90%` min_attainment."""
    table: dict[str, Any] = {}
    for text in expressions:
        m = _TARGET.match(text.lower())
        if m is not None and m["stat"] is None and m["metric"] in LATENCY_METRICS:
            if m["op"] not in ("<", "<="):
                raise ConfigError(f"{where}: a threshold is an upper bound: write '{m['metric']} < …'")
            if m["unit"] == "%":
                raise ConfigError(f"{where}: a latency is in ms (or s), not %")
            ms = float(m["value"]) * (1000 if m["unit"] == "s" else 1)
            _check_ms(where, ms)
            table[m["metric"]] = ms
            continue
        target = parse_target(text, where)
        if target.is_share:
            table["min_success_rate" if target.metric == "success" else "min_attainment"] = target.value
        else:
            table.setdefault("targets", []).append(target.text)
    return table


def merge_tables(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """`over` on top of `base`, key by key; targets merge by (metric, percentile),
    so `--slo 'p99 ttft < 1000'` tightens the file's p99 TTFT target and keeps the rest."""
    out = {**base, **{k: v for k, v in over.items() if k != "targets"}}
    targets = [*(base.get("targets") or []), *(over.get("targets") or [])]
    if targets:
        out["targets"] = [t.text for t in _unique(parse_target(str(t)) for t in targets)]
    return out
