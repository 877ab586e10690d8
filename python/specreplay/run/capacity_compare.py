"""Capacity answers read back from a results file (`answer_of`) and
compared, one search's against another's (`compare_answers`: more, less, or
within the searches' resolution; docs/capacity.md). `compare` and the
report use them; the search itself is `capacity`."""

from __future__ import annotations

import json
import math
from typing import Any

from specreplay.comparison.runs import Run
from specreplay.results.files import CAPACITY_KEY
from specreplay.run.capacity import CUT, DEFAULT_TOLERANCE, Answer, answer, judge_point
from specreplay.settings.objectives import Slo


def answer_of(run: Run) -> Answer | None:
    """What `run`'s capacity search found, recomputed from its points and
    their findings (None when the run did not search). The file's record of
    the search (`specreplay.capacity`) gives only what the rows cannot: the
    stop reason and which points the budget cut."""
    config = run.config
    if not config.get("find_max_rate"):
        return None
    stored: dict[str, Any] = {}
    text = run.df.attrs.get(CAPACITY_KEY)
    if text:
        stored = json.loads(text).get(run.label) or {}
    cut = {s.get("point") for s in stored.get("steps", []) if s.get("status") == CUT}
    steps = [judge_point(p, cut=p.point in cut) for p in run.analysis.points if p.mode == "rate"]
    return answer(steps, stored.get("stop_reason"), float(config.get("search_tolerance", DEFAULT_TOLERANCE)))


MORE = "more capacity"
LESS = "less capacity"
WITHIN = "within the searches' resolution"
NOT_COMPARABLE = "n/a"

#: Columns of `compare_answers`' rows (and of `compare --json`'s `capacity`).
CAPACITY_COLUMNS: tuple[str, ...] = (
    "base", "run", "slo", "base_max_rate", "base_first_failure", "max_rate", "first_failure",
    "change", "change_low", "change_high", "verdict",
)  # fmt: skip


def compare_answers(base: str, base_answer: Answer, name: str, other: Answer, base_slo: Slo, slo: Slo) -> dict[str, Any]:
    """`other`'s capacity against `base_answer`'s. Each true limit lies in
    its search's bracket [low, high) (above low when nothing failed, below
    high when nothing held), so the change lies between
    other.low / base.high − 1 and other.high / base.low − 1. **more
    capacity** when that whole range is above 0, **less capacity** when it
    is below, otherwise **within the searches' resolution**; n/a when the
    runs did not search under the same SLOs or either found no rate."""
    row: dict[str, Any] = {
        "base": base,
        "run": name,
        "slo": ", ".join(t.text for t in slo.targets),
        "base_max_rate": base_answer.max_rate,
        "base_first_failure": base_answer.high.rate if base_answer.high else None,
        "max_rate": other.max_rate,
        "first_failure": other.high.rate if other.high else None,
        "change": math.nan,
        "change_low": math.nan,
        "change_high": math.nan,
        "verdict": NOT_COMPARABLE,
    }
    if base_slo != slo:
        row["verdict"] = f"{NOT_COMPARABLE}: different SLOs"
        return row
    b_low, b_high = _range(base_answer)
    o_low, o_high = _range(other)
    if base_answer.max_rate is None or other.max_rate is None:
        row["verdict"] = f"{NOT_COMPARABLE}: no rate held in {name if other.max_rate is None else base}"
        return row
    row["change"] = other.max_rate / base_answer.max_rate - 1
    row["change_low"] = o_low / b_high - 1
    row["change_high"] = o_high / b_low - 1 if b_low > 0 else math.inf
    row["verdict"] = MORE if row["change_low"] >= 0 else LESS if row["change_high"] <= 0 else WITHIN
    return row


def _range(found: Answer) -> tuple[float, float]:
    """Where the true limit lies: [low, high), 0 and infinity when unknown."""
    low = found.low.rate if found.low else 0.0
    high = found.high.rate if found.high else math.inf
    return low, high
