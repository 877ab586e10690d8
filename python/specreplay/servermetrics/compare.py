"""The server's figures in `specreplay compare`: the rows shown beside TPOT.

They are not resampled (docs/compare.md): counters and gauges of the whole
server over a point's window are one number per run, with no per-request
samples to draw from. They explain the TPOT change rather than being judged.

The break-even acceptance length is the one figure made from both sides: a
run whose verification step costs c base steps and yields L tokens has
TPOT(run) / TPOT(base) = c / L(run) × L(base), so c = L(run) / L(base) ×
TPOT p50(run) / TPOT p50(base) (L = 1 for a side without speculation).
Speculation pays when the acceptance length exceeds c.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

#: (summary column, display name, unit) in table order; `spec_break_even_length`
#: is computed here, the others are the points' own server figures.
SERVER_ROWS: tuple[tuple[str, str, str], ...] = (
    ("spec_acceptance_rate", "acceptance rate", "%"),
    ("spec_acceptance_length", "acceptance length", "tok/step"),
    ("spec_break_even_length", "break-even length", "tok/step"),
    ("spec_drafts_per_s", "drafts/s", "/s"),
    ("server_running_mean", "running (mean)", "req"),
    ("server_waiting_mean", "waiting (mean)", "req"),
    ("server_kv_usage_mean", "KV usage (mean)", "%"),
    ("server_prefix_hit_rate", "prefix-cache hits", "%"),
    ("server_preemptions", "preemptions", "req"),
)


def break_even_length(base: Mapping[str, Any], run: Mapping[str, Any]) -> float:
    """c above: how many base decode steps the run's verification step costs,
    which is the acceptance length at which its TPOT would equal the base's.
    NaN when neither side speculates or a TPOT is missing."""
    lengths = [_float(side.get("spec_acceptance_length")) for side in (base, run)]
    if all(math.isnan(x) for x in lengths):
        return math.nan
    base_length, run_length = (1.0 if math.isnan(x) else x for x in lengths)
    tpot_base, tpot_run = _float(base.get("tpot_p50_ms")), _float(run.get("tpot_p50_ms"))
    if not tpot_base > 0 or math.isnan(tpot_run):
        return math.nan
    return run_length / base_length * tpot_run / tpot_base


def server_rows(base: Mapping[str, Any], run: Mapping[str, Any]) -> list[tuple[str, str, str, float, float]]:
    """(metric, name, unit, base value, run value) of every server row either
    side has a value for, from the two points' summary rows."""
    out = []
    for metric, name, unit in SERVER_ROWS:
        if metric == "spec_break_even_length":
            base_value, value = math.nan, break_even_length(base, run)
        else:
            base_value, value = _float(base.get(metric)), _float(run.get(metric))
        if not (math.isnan(base_value) and math.isnan(value)):
            out.append((metric, name, unit, base_value, value))
    return out


def _float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan
