"""The server's speed spread (`specreplay calibrate`, docs/predict.md).

On a real server the same iteration does not always cost the same: a
shared CPU's neighbours, a GPU's clocks, the allocator. Every request in the
batch feels it at once, over a while. The fit takes each request's decode
steps against the fitted step for the batch it decoded in (the median
ratio per request, so that one late read does not count) and writes the
spread of their logarithms (`speed_spread`) and the median time a request
decoded over (`speed_window_us`, how long one such sample lasted). The
prediction multiplies each iteration's cost by a log-normal draw of that
spread, drawn anew every window.
"""

from __future__ import annotations

import numpy as np

from specreplay.run.calibrate.decode import step_factor
from specreplay.run.calibrate.model import Param

#: Decode gaps a request needs for its speed ratio to count.
MIN_GAPS = 4


def fit_speed(per_request: list[tuple[np.ndarray, np.ndarray, int]], step: Param, batch_cost: Param,
              factors: Param | None = None) -> tuple[Param, Param]:
    """`per_request`: per request, its decode gaps per step (µs), the
    requests decoding during each, and its decode span (µs)."""
    needs = "step_us first: a run with streamed answers"
    if step.status != "fitted":
        return Param("speed_spread", "unknown", needs=needs), Param("speed_window_us", "unknown", needs=needs)
    base = float(step.value)
    table = factors or Param("batch_step_factors", "unknown")
    ratios, spans = [], []
    for gaps, decoding, span in per_request:
        if len(gaps) < MIN_GAPS or base <= 0:
            continue
        model = base * step_factor(decoding, batch_cost, table)
        ratios.append(float(np.median(gaps / model)))
        spans.append(span)
    if len(ratios) < 5:
        more = f"requests with {MIN_GAPS} or more decode steps (seen: {len(ratios)})"
        return Param("speed_spread", "unknown", needs=more), Param("speed_window_us", "unknown", needs=more)
    logs = np.log(np.asarray(ratios))
    spread = float(logs.std(ddof=1))
    how = f"the median of each of {len(ratios)} requests' decode gaps against the fitted step for its batch"
    return (
        Param("speed_spread", "fitted", spread, None, None, len(ratios), how + ": the standard deviation of their logarithms"),
        Param("speed_window_us", "fitted", float(np.median(spans)), None, None, len(spans),
              "the median time those requests decoded over (one sample of the speed lasts that long)"),
    )
