"""The decode step against the batch (`specreplay calibrate`, docs/predict.md).

Every gap between two chunks of a request, per step, against how many
requests were decoding then (from the rows: first token to last token),
leaving out gaps in which another request got its first token (its
prefill ran in that iteration). Per batch size the median gap: the table
`batch_step_factors` (each size's step over the one-sequence step, sizes
the runs did not show interpolated between their neighbours), and a
weighted line through the medians, `step_us × (1 + batch_step_cost ×
(decoding − 1))`, which carries the step beyond the largest size seen.
A real server's step is not linear in the batch (llama.cpp on one CPU
thread: 2.1× the one-sequence step for two, 3× for three and four), so the
table is what a prediction uses where it has one.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from specreplay.run.calibrate.model import Param

#: Gaps a batch size needs for its median to count.
MIN_SIZE_GAPS = 5

PerRequest = list[tuple[np.ndarray, np.ndarray, int]]


def in_server(rows: pd.DataFrame, at: np.ndarray, start: str, end: str) -> np.ndarray:
    """Per instant of `at`, how many rows of the same group had `start` ≤ t < `end`."""
    starts = np.sort(rows[start].to_numpy(dtype=np.int64))
    ends = np.sort(rows[end].to_numpy(dtype=np.int64))
    out: np.ndarray = np.searchsorted(starts, at, side="right") - np.searchsorted(ends, at, side="right")
    return out


def step_factor(decoding: np.ndarray, batch_cost: Param, factors: Param) -> np.ndarray:
    """The model's decode step of `decoding` sequences over the one-sequence
    step, as `Capacity::step_factor` computes it (the table interpolated,
    extended by batch_step_cost; the line alone without a table)."""
    d = np.maximum(np.asarray(decoding, dtype=float), 1.0)
    cost = float(batch_cost.value) if batch_cost.status != "unknown" else 0.0
    table = [float(f) for f in factors.value] if factors.status != "unknown" and factors.value else []
    if not table:
        out: np.ndarray = 1.0 + cost * (d - 1.0)
        return out
    top = len(table)
    inside = np.interp(d, np.arange(1, top + 1, dtype=float), np.asarray(table))
    beyond = table[-1] + cost * (d - top)
    result: np.ndarray = np.where(d >= top, beyond, inside)
    return result


def _gaps(rows: pd.DataFrame, tokens_per_step: float) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray], list[np.ndarray],
                                                                PerRequest, int]:
    gaps, batch, chunk_tokens, clean = [], [], [], []
    per_request: PerRequest = []
    peak = 0
    for _, g in rows.groupby("group"):
        g = g[g["chunk_count"] >= 2]
        if not len(g):
            continue
        firsts = np.sort(g["first_token_us"].to_numpy(dtype=np.int64))
        for ts, tok in zip(g["chunk_ts_us"], g["chunk_tokens"]):
            ts = np.asarray(ts, dtype=np.int64)
            tok = np.asarray(tok, dtype=float)
            if len(ts) < 2:
                continue
            t0, t1 = ts[:-1], ts[1:]
            keep = t1 > t0  # chunks of one step (two channels) share a stamp
            # Another request's first token inside the gap: its prefill ran in it. Chunks of one iteration are
            # read a few ms apart, so the window is shifted by half a step: a first token read just after t1
            # ended this gap's iteration (a newcomer's prefill, the usual case at a closed loop's turnover),
            # one read just after t0 ended the iteration before.
            slack = int(np.median(t1 - t0) // 2)
            prefill_in = np.searchsorted(firsts, t1 + slack, side="right") - np.searchsorted(firsts, t0 + slack, side="right")
            decoding = in_server(g, (t0 + t1) // 2, "first_token_us", "last_token_us")
            chunk_tokens.append(tok[1:][keep])
            keep &= prefill_in == 0
            steps = np.maximum(tok[1:] / tokens_per_step, 1.0)
            gaps.append(((t1 - t0) / steps)[keep])
            batch.append(decoding[keep])
            # No other request between its send and its first token (queued, or prefilling in chunks
            # that would stretch the gap without a first token in it).
            clean.append(in_server(g, t0[keep], "sent_us", "first_token_us") == 0)
            per_request.append((gaps[-1], batch[-1], int(ts[-1] - ts[0])))
            peak = max(peak, int(decoding.max(initial=0)))
    return gaps, batch, chunk_tokens, clean, per_request, peak


def drafting_step(rows: pd.DataFrame) -> tuple[float, float, int, int] | None:
    """A drafting run's decode step as the model speculates: it drafts in
    every iteration, so its step is the server's mean over all of its steps,
    drafting or not (vLLM's n-gram proposer drafts in about a fifth of them,
    and a step without a draft is cheaper: their median is that step). Each
    chunk one step (a speculative step's accepted tokens come in one chunk,
    so dividing a gap by its tokens would shorten it), gaps that held
    another request's prefill left out; per request decoding alone, its mean
    gap; the median over those requests. Returns (step µs, RMS of the
    requests' means around it, gaps, requests), or None without two such
    requests."""
    *_, per_request, _ = _gaps(rows, math.inf)
    alone = [g[b == 1] for g, b, _ in per_request]
    alone = [g for g in alone if len(g) >= 2]
    if len(alone) < 2:
        return None
    means = np.array([g.mean() for g in alone])
    step = float(np.median(means))
    return step, float(np.sqrt(np.mean((means - step) ** 2))), sum(len(g) for g in alone), len(alone)


def never_shrinking(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The closest non-decreasing sequence to `values` in weighted least
    squares (pool adjacent violators): a step with one more sequence in the
    batch never takes less time, so a size measured below a smaller one is
    the machine's speed moving between the runs that showed them (sizes 1
    and 4 come from different runs), and the two are pooled."""
    blocks: list[list[float]] = []  # [weighted mean, weight, length]
    for v, w in zip(values.astype(float), weights.astype(float)):
        blocks.append([v, w, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (v2, w2, n2), (v1, w1, n1) = blocks.pop(), blocks.pop()
            blocks.append([(v1 * w1 + v2 * w2) / (w1 + w2), w1 + w2, n1 + n2])
    return np.concatenate([np.full(int(n), v) for v, _, n in blocks])


def _table(levels: np.ndarray, medians: np.ndarray, counts: np.ndarray, step: float, a: float, b: float) -> Param:
    """batch_step_factors from the per-size medians of the sizes seen
    `MIN_SIZE_GAPS` times or more, up to the largest, made non-decreasing;
    sizes between them interpolated, sizes below the smallest from the line."""
    well = counts >= MIN_SIZE_GAPS
    seen = levels[well].astype(int)
    top = int(seen.max())
    pooled = never_shrinking(medians[well], counts[well])
    at = {int(k): float(m) for k, m in zip(seen, pooled)}
    raw = {int(k): float(m) for k, m in zip(seen, medians[well])}
    sizes = np.arange(1, top + 1)
    table = np.interp(sizes, seen, [at[k] for k in seen])
    below = sizes < seen.min()
    table[below] = a + b * (sizes[below] - 1)
    missing = [int(k) for k in sizes if int(k) not in at]
    how = (f"the median gap per batch size over step_us, sizes {', '.join(str(int(k)) for k in seen)} seen "
           f"({', '.join(f'{int(k)}: {int(c)}' for k, c in zip(levels, counts) if c >= MIN_SIZE_GAPS)} gaps)")
    if missing:
        how += f"; {', '.join(map(str, missing))} not seen {MIN_SIZE_GAPS} times: interpolated (a run where they decode would measure them)"
    shrank = [k for k in seen if abs(at[k] - raw[k]) > 1e-9 * max(raw[k], 1.0)]
    if shrank:
        how += (f"; sizes {', '.join(map(str, shrank))} pooled (a larger batch measured faster than a smaller one: "
                "the machine's speed moved between the runs; the step never shrinks with the batch)")
    how += f"; beyond {top}: batch_step_cost per sequence"
    factors = [round(float(t) / step, 4) for t in table]
    spread = float(np.sqrt(np.mean([((raw[k] - table[k - 1]) / step) ** 2 for k in seen])))
    return Param("batch_step_factors", "fitted", factors, None, spread * step, int(counts[counts >= MIN_SIZE_GAPS].sum()), how)


def fit_decode(rows: pd.DataFrame, tokens_per_step: float) -> tuple[Param, Param, Param, Param, int, PerRequest]:
    """step_us, batch_step_cost and batch_step_factors from chunk gaps
    against the decoding count; steps_per_chunk from tokens per chunk. Also
    returns the most requests seen decoding at once, and per request its
    kept gaps (per step), the decoding counts in them and its decode span
    (for the speed spread)."""
    gaps, batch, chunk_tokens, clean_parts, per_request, peak = _gaps(rows, tokens_per_step)
    if not gaps or not sum(len(x) for x in gaps):
        unknown = "needs streamed answers of two chunks or more"
        return (Param("step_us", "unknown", needs=unknown), Param("batch_step_cost", "unknown", needs=unknown),
                Param("batch_step_factors", "unknown", needs=unknown), Param("steps_per_chunk", "unknown", needs=unknown),
                peak, per_request)
    gap = np.concatenate(gaps).astype(float)
    d = np.maximum(np.concatenate(batch), 1).astype(float)
    per_chunk = np.concatenate(chunk_tokens)
    steps_per_chunk = Param("steps_per_chunk", "fitted", max(float(per_chunk.mean()) / tokens_per_step, 1.0), None,
                            float(per_chunk.std()), int(len(per_chunk)), "mean tokens per chunk after the first, per decode step")
    clean = np.concatenate(clean_parts)
    levels = np.unique(d)
    # Per batch size, the median gap (robust to the odd late read), of the gaps with no request queued or
    # prefilling beside them when a size has enough of those: a prompt prefilled in chunks stretches the
    # gaps it shares without a first token in them.
    medians = np.array([np.median(gap[(d == k) & clean] if ((d == k) & clean).sum() >= MIN_SIZE_GAPS else gap[d == k])
                        for k in levels])
    counts = np.array([(d == k).sum() for k in levels])
    how = f"{len(gap)} chunk gaps (per step) against the requests decoding at the time, {len(levels)} batch size(s)"
    well = levels[counts >= MIN_SIZE_GAPS]
    if len(well) < 2:
        step = float(np.median(gap))
        rms = float(np.sqrt(np.mean((gap - step) ** 2)))
        needs = f"a run with several requests decoding at once (seen: {int(levels.max())}): e.g. --concurrency 4"
        return (Param("step_us", "fitted", step, None, rms, len(gap), how + ": the median"),
                Param("batch_step_cost", "unknown", needs=needs), Param("batch_step_factors", "unknown", needs=needs),
                steps_per_chunk, peak, per_request)
    sel = np.isin(levels, well)
    b, a = np.polyfit(levels[sel] - 1, medians[sel], 1, w=np.sqrt(counts[sel]))
    a = max(float(a), 1.0)
    # The one-sequence step is its own median when the runs show it (the table starts at 1 then).
    one = levels[sel] == 1
    step = float(medians[sel][one][0]) if one.any() else a
    table = _table(levels, medians, counts, step, a, float(b))
    pred = step * step_factor(d, Param("batch_step_cost", "fitted", max(float(b) / step, 0.0)), table)
    ss_res = float(((gap - pred) ** 2).sum())
    ss_tot = float(((gap - gap.mean()) ** 2).sum())
    r2 = 1 - ss_res / ss_tot if ss_tot > 0 else float("nan")
    rms = float(np.sqrt(ss_res / len(gap)))
    table.r2 = r2
    line = how + ": the line step_us × (1 + batch_step_cost × (decoding − 1)) through the median per batch size, weighted"
    return (Param("step_us", "fitted", step, r2, rms, len(gap),
                  how + (": the median gap with one decoding" if one.any() else ": the line's intercept (no run showed one decoding)")),
            Param("batch_step_cost", "fitted", max(float(b) / step, 0.0), r2, rms, len(gap), line),
            table, steps_per_chunk, peak, per_request)
