"""Fitting the server model to real runs (`specreplay calibrate`, docs/predict.md).

Each parameter comes from what the runs show directly:

- prefill (frontend, per prompt token, per cached token): TTFT against the
  prompt of requests that had the server to themselves until their first
  token, least squares;
- the decode step against the batch, per batch size and as a line
  (`decode.py`);
- the batch limit: the most requests running while the server's metrics
  said some waited; the KV budget: from `vllm:kv_cache_usage_perc` at
  preemption; both unknown when no run got there;
- delivery: tokens per chunk after the first, per step;
- speculation: `vllm:spec_decode_*` counters (acceptance by position);
  without them, chunks of several tokens that took as long per token as
  chunks of one are steps merged in the stream, not speculation;
- prompt tokens per counted word: the server's prompt counts against the
  trace's prompts counted the simulator's way;
- the speed spread: each request's decode steps against the fitted step
  (`spread.py`);
- output lengths: the measured (reasoning, content) pairs per API and
  prompt-length bucket (`outputs.py`).
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from specreplay.results.files import CONFIG_KEY
from specreplay.run.calibrate.decode import drafting_step, fit_decode, in_server as _in_server, step_factor
from specreplay.run.calibrate.model import PARAMS, Param, ServerModel
from specreplay.run.calibrate.outputs import fit_outputs
from specreplay.run.calibrate.regress import robust_lstsq
from specreplay.run.calibrate.spread import fit_speed

#: A TTFT sample is "alone" when no other request was in the server between its send and its first token.
#: Prompt lengths must vary by this coefficient of variation to separate the frontend from the prefill.
MIN_PROMPT_CV = 0.05
#: A cached count this share of the median prompt away from the usual one is
#: a second variable in the TTFT fit, not noise around the intercept.
MIN_CACHED_SPREAD = 0.25


def _runs(paths: Sequence[str]) -> tuple[pd.DataFrame, pd.DataFrame, list[dict[str, Any]]]:
    """Every path's successful measured rows (with `file`), metric samples and run config."""
    import specreplay

    frames, samples, configs = [], [], []
    for i, path in enumerate(paths):
        df = specreplay.load(path)
        config = json.loads(df.attrs.get(CONFIG_KEY, "{}"))
        if config.get("predicted"):
            raise ValueError(f"{path}: a prediction, not a measurement: calibrate from real runs")
        rows = df[df["error_kind"].isna() & ~df["warmup"].astype(bool)].copy()
        rows["file"] = i
        # Points of different files never overlap in time as far as the fit is concerned.
        rows["group"] = str(i) + "/" + rows["label"].astype(str) + "/" + rows["point"].astype(str)
        frames.append(rows)
        m = specreplay.load(path, metrics=True)
        if len(m):
            m = m.copy()
            m["group"] = str(i) + "/" + m["label"].astype(str) + "/" + m["point"].astype(str)
            samples.append(m)
        configs.append(config)
    rows = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    metrics = pd.concat(samples, ignore_index=True) if samples else pd.DataFrame()
    return rows, metrics, configs


def fit_jitter(rows: pd.DataFrame) -> Param:
    """frontend_jitter_us: the width of the uniform spread of the frontend
    time, from the first-byte delays of requests alone (a uniform's width is
    twice its interquartile range). Which of two requests sent together
    reaches an idle llama.cpp loop first is a race (the usage probe's
    cached request went alone in 5 of 9 parts, des.rs `admit`); the spread
    makes it one in the model. Not the TTFT residual: that is the machine's
    noise (hundreds of ms), and it broke up batches the server makes."""
    alone = _alone(rows)
    if "first_byte_us" not in alone or alone["first_byte_us"].notna().sum() < 8:
        return Param("frontend_jitter_us", "unknown",
                     needs="8 requests alone in the server with their first-byte times (a run at concurrency 1)")
    delay = (alone["first_byte_us"] - alone["sent_us"]).dropna().to_numpy(dtype=float)
    q1, q3 = np.percentile(delay, [25, 75])
    return Param("frontend_jitter_us", "fitted", float(2 * (q3 - q1)), None, float(np.std(delay)), int(len(delay)),
                 "twice the interquartile range of the first-byte delays of requests alone (a uniform's width)")


#: Requests sent within this of each other were "sent together" (a closed
#: loop's start; streams in lockstep, whose last chunks llama.cpp writes a
#: few ms apart), and first tokens this close came from one iteration, µs.
#: A server whose prefill of the rest of a group takes less than this is
#: taken as launching them together: the prediction differs by as little.
SENT_TOGETHER_US = 5_000


def _groups_sent_together(rows: pd.DataFrame) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Each group of two or more requests sent within `SENT_TOGETHER_US` of
    each other to an idle server (nothing of the run in it): their send and
    first-token stamps and which of them found their prompt cached whole."""
    for _, g in rows.groupby("group"):
        g = g.sort_values("sent_us")
        sent = g["sent_us"].to_numpy(dtype=np.int64)
        first = g["first_token_us"].to_numpy(dtype=np.int64)
        end = g["end_us"].to_numpy(dtype=np.int64)
        prompt = g["prompt_tokens"].to_numpy(dtype=float)
        cached = g["cached_tokens"].to_numpy(dtype=float) if "cached_tokens" in g else np.zeros(len(g))
        start = 0
        while start < len(g):
            stop = start + 1
            while stop < len(g) and sent[stop] - sent[stop - 1] < SENT_TOGETHER_US:
                stop += 1
            idle = not (end[:start] > sent[start]).any()
            if stop - start >= 2 and idle:
                yield sent[start:stop], first[start:stop], np.nan_to_num(cached[start:stop]) * 2 >= prompt[start:stop]
            start = stop


def _one_iteration(ttft_us: float) -> float:
    """How close first tokens from one iteration are: read within ms; a
    prefill apart is more, µs."""
    return SENT_TOGETHER_US + 0.02 * ttft_us


def fit_co_launch(rows: pd.DataFrame) -> Param:
    """co_launch: the share of requests sent together to an idle server that
    it started in one iteration (their first tokens at one moment). llama.cpp's
    loop launches every request sent by the time it starts; vLLM's busy loop
    and the simulator start the first arrival at once and prefill the rest
    one iteration later, so their first tokens are a prefill apart. A group
    with a prompt found cached whole is left out (`fit_cached_co_launch`
    measures those)."""
    together = 0
    groups = 0
    for sent, first, whole in _groups_sent_together(rows):
        if whole.any():
            continue
        groups += 1
        together += int(first.max() - first.min() <= _one_iteration((first - sent).min()))
    if groups == 0:
        return Param("co_launch", "unknown",
                     needs="requests sent together to an idle server, none a prompt found cached whole (the usage probe "
                           "leaves a point's first request cached): e.g. a closed-loop run at --concurrency 2 with one output length "
                           "(each pair ends, and sends its next, together)")
    return Param("co_launch", "fitted", together / groups, None, None, groups,
                 "groups of requests sent within 5 ms to an idle server whose first tokens came at one moment, as a share")


def fit_cached_co_launch(rows: pd.DataFrame) -> Param:
    """cached_co_launch: of the groups sent together to an idle server with
    one prompt found cached whole (every concurrent run's start: the usage
    probe cached its first request), the chance that the next one's cached
    request has its first token with the others' first, not well before
    them (started alone, the others prefilled in its first decode gap). A
    group whose cached request came after the others' first (it waited for
    a slot) tells neither."""
    together = 0
    groups = 0
    for sent, first, whole in _groups_sent_together(rows):
        if whole.sum() != 1:
            continue
        mine, others = int(first[whole][0]), int(first[~whole].min())
        near = _one_iteration((first - sent).min())
        if abs(mine - others) <= near:
            together += 1
        elif mine > others:
            continue
        groups += 1
    if groups == 0:
        return Param("cached_co_launch", "unknown",
                     needs="requests sent together to an idle server, one a prompt found cached whole: a closed-loop run at "
                           "--concurrency 2 or more, its usage probe on (the probe caches the run's first prompt)")
    # The chance of the next group, not the share seen: a calibration shows
    # 2 or 3 such groups (one per concurrent part), and 2 of 2 must not
    # read as "never alone" (Laplace's rule: the uniform prior's predictive).
    return Param("cached_co_launch", "fitted", round((together + 1) / (groups + 2), 4), None, None, groups,
                 f"{together} of {groups} groups sent within 5 ms to an idle server, one prompt cached whole, had their first tokens "
                 "at one moment; the chance for the next, (together + 1) / (groups + 2)")


def _alone(rows: pd.DataFrame) -> pd.DataFrame:
    """The requests alone in the server from their send to their first token."""
    alone_parts = []
    for _, g in rows.groupby("group"):
        sent = g["sent_us"].to_numpy(dtype=np.int64)
        first = g["first_token_us"].to_numpy(dtype=np.int64)
        # Others in the server at my send, or sent before my first token.
        busy_at_send = _in_server(g, sent, "sent_us", "end_us") - 1
        sent_sorted = np.sort(sent)
        sent_between = np.searchsorted(sent_sorted, first, side="left") - np.searchsorted(sent_sorted, sent, side="right")
        alone_parts.append(g[(busy_at_send == 0) & (sent_between == 0)])
    return pd.concat(alone_parts) if alone_parts else rows.iloc[:0]


def _lstsq_above(design: np.ndarray, ttft: np.ndarray, floor: float) -> np.ndarray:
    """robust_lstsq with the intercept (column 0) at least `floor`: refitted
    with the intercept fixed there when the free fit put it below."""
    coef = robust_lstsq(design, ttft)
    if coef[0] >= floor:
        return coef
    return np.concatenate([[floor], robust_lstsq(design[:, 1:], ttft - floor)])


def _first_byte_floor(alone: pd.DataFrame) -> float:
    """The median time from send to the server's first byte of requests
    alone: the frontend takes at least that (llama.cpp answers with its
    headers when it launches the request's slot, 4-17 ms on this machine).
    The TTFT intercept alone is the machine's noise at this scale (its
    residual is hundreds of ms; it came out 0 and 9.6 ms in two sittings),
    and the frontend decides which requests sent close together share a
    prefill iteration (des.rs, `queue_arrivals`)."""
    if "first_byte_us" not in alone or not alone["first_byte_us"].notna().any():
        return 0.0
    delay = (alone["first_byte_us"] - alone["sent_us"]).dropna().to_numpy(dtype=float)
    return max(float(np.median(delay)), 0.0) if len(delay) else 0.0


def _floor_note(floor: float) -> str:
    return f", the frontend at least the median first-byte delay ({floor / 1000:.1f} ms)" if floor > 0 else ""


def fit_prefill(rows: pd.DataFrame) -> tuple[Param, Param, Param]:
    """frontend_us, prefill_us_per_token and prefill_us_per_cached_token from
    the TTFT of requests alone in the server until their first token."""
    alone = _alone(rows)
    n = len(alone)
    low_load = "a run at concurrency 1 (requests alone in the server)"
    if n < 3:
        unknown = f"needs {low_load}: {n} request(s) were alone"
        return (Param("frontend_us", "unknown", needs=unknown), Param("prefill_us_per_token", "unknown", needs=unknown),
                Param("prefill_us_per_cached_token", "unknown", needs=unknown))
    ttft = (alone["first_token_us"] - alone["sent_us"]).to_numpy(dtype=float)
    prompt = alone["prompt_tokens"].to_numpy(dtype=float)
    cached = alone["cached_tokens"].fillna(0).to_numpy(dtype=float)
    computed = prompt - cached
    # Cached counts that vary separate their cost: two requests off the usual count, or one far off it. A
    # replay's usage probe leaves one prompt cached whole per run, and its TTFT (tens of ms) carries little of
    # the machine's noise. Requiring two left a one-run calibration with no prefix cache modelled while
    # llama.cpp finds its chat template's prefix (24 tokens of SmolLM2's ~140) cached on every request: the
    # slope was fitted per computed token and charged per prompt token (TTFT +45-66% at concurrency 2).
    usual = np.median(cached)
    far_off = np.abs(cached - usual) >= MIN_CACHED_SPREAD * float(np.median(prompt))
    has_cache = (cached > 0).sum() >= 2 and ((cached != usual).sum() >= 2 or far_off.any())
    cv = float(np.std(computed) / np.mean(computed)) if np.mean(computed) > 0 else 0.0
    how = f"TTFT of {n} requests alone in the server"
    floor = _first_byte_floor(alone)
    if has_cache:
        design = np.column_stack([np.ones(n), computed, cached])
        coef = _lstsq_above(design, ttft, floor)
        pred = design @ coef
        ss_res = float(((ttft - pred) ** 2).sum())
        ss_tot = float(((ttft - ttft.mean()) ** 2).sum())
        r2 = 1 - ss_res / ss_tot if ss_tot > 0 else float("nan")
        rms = float(np.sqrt(ss_res / n))
        a, b, c = (float(v) for v in coef)
        fit = how + ": TTFT = frontend + per_token × computed + per_cached × cached, least absolute deviations" + _floor_note(floor)
        return (Param("frontend_us", "fitted", max(a, 0.0), r2, rms, n, fit),
                Param("prefill_us_per_token", "fitted", max(b, 0.0), r2, rms, n, fit),
                Param("prefill_us_per_cached_token", "fitted", max(c, 0.0), r2, rms, n, fit))
    no_cache = Param("prefill_us_per_cached_token", "unknown",
                     needs="a run whose prompts hit the prefix cache (the server reports cached_tokens), e.g. the same trace replayed twice")
    if cv >= MIN_PROMPT_CV:
        design = np.column_stack([np.ones(n), computed])
        a, b = (float(v) for v in _lstsq_above(design, ttft, floor))
        res = ttft - (a + b * computed)
        ss_tot = float(((ttft - ttft.mean()) ** 2).sum())
        r2 = 1 - float((res ** 2).sum()) / ss_tot if ss_tot > 0 else float("nan")
        rms = float(np.sqrt(np.mean(res ** 2)))
        fit = how + ": TTFT = frontend + per_token × prompt, least absolute deviations" + _floor_note(floor)
        return (Param("frontend_us", "fitted", max(a, 0.0), r2, rms, n, fit),
                Param("prefill_us_per_token", "fitted", max(b, 0.0), r2, rms, n, fit), no_cache)
    per_token = float(np.mean(ttft) / np.mean(computed))
    rms = float(np.sqrt(np.mean((ttft - per_token * computed) ** 2)))
    varied = "a run with varied prompt lengths (e.g. synth --prompt-tokens 100 400) to separate it from the per-token cost"
    return (Param("frontend_us", "unknown", needs=varied),
            Param("prefill_us_per_token", "fitted", per_token, None, rms, n,
                  how + f" over prompts of one length ({np.mean(computed):.0f} tokens): the frontend's time is folded in"),
            no_cache)


def fit_template_cache(rows: pd.DataFrame, cached: Param) -> Param:
    """template_cached_tokens: the median cached count of requests that were
    not a cache hit of their own prompt (under half of it cached). llama.cpp
    finds its chat template's first tokens (24 for SmolLM2) in the slot
    whatever the prompt; the model's prefix cache matches whole prompts'
    blocks only, so without this it charged each prefill 24 tokens more
    than the fit's slope was measured on (150 ms at 6.4 ms a token, +8% of
    a 1.9 s TTFT)."""
    name = "template_cached_tokens"
    if cached.status == "unknown":
        return Param(name, "unknown", needs="a server that reports cached prompt tokens (prefill_us_per_cached_token first)")
    c = rows["cached_tokens"].to_numpy(dtype=float) if "cached_tokens" in rows else np.array([])
    prompt = rows["prompt_tokens"].to_numpy(dtype=float) if len(c) else np.array([])
    ok = ~np.isnan(c) & ~np.isnan(prompt) & (c < 0.5 * prompt)
    if not ok.any():
        return Param(name, "unknown", needs="requests whose cached count the server reports, not whole cache hits")
    value = int(np.median(c[ok]))
    return Param(name, "fitted", value, None, float(np.sqrt(np.mean((c[ok] - value) ** 2))), int(ok.sum()),
                 "the median cached_tokens of requests not a hit of their own prompt (under half of it cached)")


def fit_token_budget(rows: pd.DataFrame, frontend: Param, prefill: Param, step: Param, batch_cost: Param, factors: Param) -> Param:
    """max_num_batched_tokens (chunked prefill) from the stalls newcomers'
    prefills put in the chunk gaps of the requests already decoding. A gap
    in which another request got its first token holds the end of that
    prefill: if its excess over the decode step is the whole prompt (at
    prefill_us_per_token), prompts were prefilled whole and no budget below
    the longest prompt seen shows (unknown; the model prefills whole, as the
    runs did). If it is a fraction, prompts came in chunks: a gap while a
    newcomer was still prefilling (sent, past its frontend time, no first
    token yet) holds one full chunk, and the budget is that chunk in tokens
    plus the decode tokens sharing the iteration (the median)."""
    name = "max_num_batched_tokens"
    if prefill.status != "fitted" or step.status != "fitted" or not float(prefill.value) > 0:
        return Param(name, "unknown", needs="prefill_us_per_token and step_us first (runs at low load and at concurrency >= 2)")
    per_token = float(prefill.value)
    ahead = float(frontend.value) if frontend.status == "fitted" else 0.0
    ratios: list[float] = []
    budgets: list[float] = []
    longest = 0
    same_iteration = int(float(step.value) / 2)
    for _, g in rows.groupby("group"):
        g = g[g["first_token_us"].notna()]
        if len(g) < 2:
            continue
        cached = g["cached_tokens"].fillna(0) if "cached_tokens" in g else 0
        computed = (g["prompt_tokens"].fillna(0) - cached).to_numpy(dtype=float)
        firsts = g["first_token_us"].to_numpy(dtype=np.int64)
        ready = g["sent_us"].to_numpy(dtype=np.int64) + int(ahead)
        longest = max(longest, int(computed.max(initial=0)))
        order = np.argsort(firsts)
        sorted_firsts, sorted_computed = firsts[order], computed[order]
        for ts in g["chunk_ts_us"]:
            ts = np.unique(np.asarray(ts, dtype=np.int64))
            if len(ts) < 2:
                continue
            t0, t1 = ts[:-1], ts[1:]
            # A first token within half a step of t0 came from t0's own iteration (requests prefilled
            # together, their chunks read a few ms apart), not from a prefill in the gap.
            lo = np.searchsorted(sorted_firsts, t0 + same_iteration, side="right")
            hi = np.searchsorted(sorted_firsts, t1, side="right")
            decoding = np.maximum(_in_server(g, (t0 + t1) // 2, "first_token_us", "last_token_us"), 1)
            excess = (t1 - t0) - float(step.value) * step_factor(decoding, batch_cost, factors)
            for k in range(len(t0)):
                if hi[k] - lo[k] == 1 and sorted_computed[lo[k]] > 0:
                    ratios.append(float(excess[k]) / (per_token * sorted_computed[lo[k]]))
                elif hi[k] == lo[k] and np.any((ready < t0[k]) & (firsts > t1[k])):
                    budgets.append(max(float(excess[k]), 0.0) / per_token + int(decoding[k]))
    if len(ratios) < 5:
        return Param(name, "unknown", needs=(
            f"decoding requests whose chunk gaps hold another request's prefill (seen: {len(ratios)}): "
            "a run at concurrency >= 2 or an open-loop rate, prompts of a few hundred tokens"))
    m = float(np.median(ratios))
    if m >= 0.75:
        return Param(name, "unknown", needs=(
            f"none seen below {longest} prompt tokens: the stalls held the whole prefill (median {m:.2f} of it over "
            f"{len(ratios)} gaps), so the model prefills whole as the runs did; prompts longer than the budget would measure it"))
    if len(budgets) < 5:
        return Param(name, "unknown", needs=(
            f"the gaps ending a prefill held a median {m:.2f} of it ({len(ratios)} gaps), but only {len(budgets)} gaps fell "
            "inside a prefill, too few to size a chunk: a run where newcomers join a decoding batch (an open-loop rate) "
            "would measure it; the model prefills whole until then"))
    b = np.asarray(budgets)
    value = float(np.median(b))
    return Param(name, "fitted", int(round(value)), None, float(np.sqrt(np.mean((b - value) ** 2))), int(len(b)),
                 f"{len(b)} chunk gaps while a newcomer was prefilling: the stall (gap − decode step) in prompt tokens plus "
                 f"the decode tokens, the median (the gaps ending a prefill held a median {m:.2f} of its prompt)")


def _counter_delta(m: pd.DataFrame, name: str) -> pd.Series:
    """Per group and labels, the increase of counter `name` from its first to last sample."""
    s = m[m["name"] == name]
    if not len(s):
        return pd.Series(dtype=float)
    grouped = s.sort_values("ts_us").groupby(["group", "labels"])["value"]
    delta: pd.Series = (grouped.last() - grouped.first())
    return delta


#: Per token, the median gap before a chunk of several tokens over the median
#: gap before a chunk of one, at or above which those tokens took a step each
#: and were only delivered together (text the server held back, llama.cpp's
#: partial stop strings and split UTF-8 among them, or a stream merging steps
#: under load). Speculation makes a chunk's tokens in one step, so there the
#: ratio is about 1/tokens: 0.5 or less.
MERGED_STEPS_RATIO = 0.75

#: Multi-token chunks a gap ratio needs before it says anything.
MIN_MULTI_CHUNKS = 5


def merged_steps_ratio(rows: pd.DataFrame) -> float | None:
    """`MERGED_STEPS_RATIO`'s figure for `rows`, or None where the rows have
    no stamps or too few chunks of either kind. Chunks read at one stamp
    (gap 0) are left out: their step is the chunk before them."""
    if not len(rows) or "chunk_ts_us" not in rows:
        return None
    single: list[np.ndarray] = []
    per_token: list[np.ndarray] = []
    for ts, tok in zip(rows["chunk_ts_us"], rows["chunk_tokens"]):
        if len(ts) < 2 or len(tok) != len(ts):
            continue
        gap = np.diff(np.asarray(ts, dtype=np.int64)).astype(float)
        t = np.asarray(tok, dtype=float)[1:]
        stamped = gap > 0
        single.append(gap[stamped & (t == 1)])
        per_token.append((gap / np.maximum(t, 1.0))[stamped & (t > 1)])
    one = np.concatenate(single) if single else np.array([])
    several = np.concatenate(per_token) if per_token else np.array([])
    if len(one) < MIN_MULTI_CHUNKS or len(several) < MIN_MULTI_CHUNKS:
        return None
    return float(np.median(several) / np.median(one))


def fit_spec(m: pd.DataFrame, rows: pd.DataFrame) -> tuple[Param, float]:
    """spec_acceptance by position from vLLM's counters; tokens per step.
    Without counters, chunks of several tokens are speculation only if they
    came faster per token than chunks of one (`merged_steps_ratio`)."""
    if not len(m) or not (m["name"] == "vllm:spec_decode_num_drafts_total").any():
        multi = float((rows["chunk_tokens"].map(lambda t: (np.asarray(t)[1:] > 1).mean() if len(t) > 1 else 0.0)).mean()) if len(rows) else 0.0
        how = "no speculative-decoding counters in the server's metrics"
        if multi < 0.05:
            return Param("spec_acceptance", "fitted", [], None, None, len(rows), how + " and chunks of one token: no speculation"), 1.0
        ratio = merged_steps_ratio(rows)
        if ratio is not None and ratio >= MERGED_STEPS_RATIO:
            return Param("spec_acceptance", "fitted", [], None, None, len(rows),
                         how + f"; {multi:.0%} of chunks carry several tokens, but each of their tokens took as long as a "
                         f"chunk of one ({ratio:.2f} of its gap, median): steps merged in the stream, no speculation"), 1.0
        if len(m) and m["name"].str.startswith("vllm:").any():
            # vLLM exports vllm:spec_decode_* whenever it drafts: without them
            # it did not, and its multi-token chunks are the stream's merging
            # of steps under load (the delivery fit's steps_per_chunk).
            return Param("spec_acceptance", "fitted", [], None, None, len(rows),
                         f"a vLLM server exporting no vllm:spec_decode_* counters: no speculation ({multi:.0%} of chunks carry several tokens: steps merged in the stream)"), 1.0
        timing = "" if ratio is None else f", {ratio:.2f} of a one-token chunk's gap per token (faster: drafts?)"
        return Param("spec_acceptance", "unknown",
                     needs=how + f", but {multi:.0%} of chunks carry several tokens{timing}: scrape a server that exports vllm:spec_decode_* (--metrics)"), 1.0
    drafts = float(_counter_delta(m, "vllm:spec_decode_num_drafts_total").sum())
    per_pos = _counter_delta(m, "vllm:spec_decode_num_accepted_tokens_per_pos_total")
    by_pos: dict[int, float] = {}
    for key, v in per_pos.items():
        labels = str(key[1]) if isinstance(key, tuple) else "{}"
        pos = int(json.loads(labels).get("position", 0))
        by_pos[pos] = by_pos.get(pos, 0.0) + float(v)
    if drafts <= 0 or not by_pos:
        return Param("spec_acceptance", "unknown", needs="a run long enough for the spec_decode counters to move"), 1.0
    accepted = [by_pos.get(i, 0.0) for i in range(max(by_pos) + 1)]
    steps, how = _decode_steps(m, drafts, sum(accepted))
    conditional, prev = [], steps
    for a in accepted:
        conditional.append(min(a / prev, 1.0) if prev > 0 else 0.0)
        prev = a
    tokens_per_step = 1 + sum(accepted) / drafts
    return Param("spec_acceptance", "fitted", [round(c, 4) for c in conditional], None, None, int(drafts),
                 "vllm:spec_decode_num_accepted_tokens_per_pos_total / the previous position's (" + how + " for the first)"), tokens_per_step


def _decode_steps(m: pd.DataFrame, drafts: float, accepted: float) -> tuple[float, str]:
    """The decode steps that could have drafted, for the first position's
    acceptance per step: vLLM counts a draft only in a step that proposed one
    (an n-gram proposer finds none until the output repeats), and the model
    drafts in every step. Each decode step makes one token plus its accepted
    drafts, and each request's first token is its prefill's, so the steps
    are generated − accepted − finished requests (at least the drafts)."""
    generated = float(_counter_delta(m, "vllm:generation_tokens_total").sum())
    finished = float(_counter_delta(m, "vllm:request_success_total").sum())
    steps = generated - accepted - finished
    if not generated > 0 or steps <= drafts:
        return drafts, "drafts"
    return steps, f"the {steps:.0f} decode steps, {drafts / steps:.0%} of which drafted,"


def fit_limits(m: pd.DataFrame) -> tuple[Param, Param]:
    """max_num_seqs from running counts while requests waited; kv_cache_tokens stays unknown unless preempted."""
    names = {"running": ("vllm:num_requests_running", "llamacpp:requests_processing"),
             "waiting": ("vllm:num_requests_waiting", "llamacpp:requests_deferred")}
    saturate = "a run with more requests in flight than the server runs at once (its metrics show requests waiting): raise --concurrency"
    kv = Param("kv_cache_tokens", "unknown", needs="a run that fills the KV cache (vllm:num_preemptions_total rises): longer prompts or answers, higher concurrency")
    if not len(m):
        return Param("max_num_seqs", "unknown", needs=saturate + "; and scrape its /metrics"), kv
    gauges = m[m["name"].isin(names["running"] + names["waiting"])]
    if not len(gauges):
        return Param("max_num_seqs", "unknown", needs=saturate + "; the metrics had no running/waiting gauges"), kv
    wide = gauges.assign(kind=np.where(gauges["name"].isin(names["running"]), "running", "waiting")).pivot_table(
        index=["group", "ts_us"], columns="kind", values="value", aggfunc="sum")
    if "waiting" in wide and "running" in wide:
        full = wide[wide["waiting"] > 0]
        if len(full):
            return Param("max_num_seqs", "fitted", int(full["running"].max()), None, float(full["running"].std(ddof=0)), len(full),
                         "the most requests running in a scrape that had requests waiting"), kv
    return Param("max_num_seqs", "unknown", needs=saturate), kv


def fit_prompt_ratio(rows: pd.DataFrame, configs: list[dict[str, Any]], paths: Sequence[str]) -> Param:
    """Server prompt tokens per token of the simulator's count, over the traces the runs replayed."""
    from specreplay import _core
    from specreplay.settings.config import ReplayConfig
    from specreplay.trace.shaping import request_batch, request_row
    from specreplay.trace.index import scan_trace
    from specreplay.trace.records import parse_line, read_lines_at

    words: dict[tuple[int, str], int] = {}
    missing = []
    for i, config in enumerate(configs):
        trace = config.get("trace")
        if not trace or not Path(trace).exists():
            missing.append(f"{paths[i]}: its trace {trace!r} is not there")
            continue
        index = scan_trace(trace)
        if config.get("trace_sha256") and index.sha256 != config["trace_sha256"]:
            missing.append(f"{paths[i]}: its trace {trace} changed since the run")
            continue
        rc = ReplayConfig(trace=trace, max_tokens=config.get("max_tokens"), ignore_eos=bool(config.get("ignore_eos")))
        records = [r for _, _, raw in read_lines_at(Path(trace)) if (r := parse_line(trace, 0, raw)) is not None]
        batch = request_batch([request_row(r, rc, "http://predict.invalid/v1", None) for r in records])
        for rec, n in zip(records, _core.sim_prompt_tokens(batch)):
            words[(i, rec.id)] = n
    ids = rows["trace_id"].astype(str).str.replace(r"#\d+$", "", regex=True)
    counted = np.array([words.get((f, t), -1) for f, t in zip(rows["file"], ids)], dtype=float)
    ok = (counted > 0) & rows["prompt_tokens"].notna().to_numpy()
    if ok.sum() < 1:
        return Param("prompt_tokens_per_word", "unknown", needs="the runs' trace files, where they were run (" + "; ".join(missing) + ")")
    real = rows["prompt_tokens"].to_numpy(dtype=float)[ok]
    x = counted[ok]
    ratio = float(real.sum() / x.sum())
    resid = real - ratio * x
    ss_tot = float(((real - real.mean()) ** 2).sum())
    r2 = 1 - float((resid ** 2).sum()) / ss_tot if ss_tot > 0 else float("nan")
    return Param("prompt_tokens_per_word", "fitted", ratio, r2, float(np.sqrt(np.mean(resid ** 2))), int(ok.sum()),
                 "the server's prompt_tokens against the trace's prompts counted the simulator's way")


def calibrate(paths: Sequence[str], seed: int = 0) -> ServerModel:
    """The server model fitted to the runs at `paths`."""
    rows, metrics, configs = _runs(paths)
    if not len(rows):
        raise ValueError("no successful measured request in " + ", ".join(paths))
    # Speculation is per run: runs with drafts and runs without are fitted apart.
    specs = {}
    for f in sorted(rows["file"].unique()):
        file_metrics = metrics[metrics["group"].str.startswith(f"{f}/")] if len(metrics) else metrics
        specs[int(f)] = fit_spec(file_metrics, rows[rows["file"] == f])
    drafting = [f for f, (p, _) in specs.items() if p.status == "fitted" and p.value]
    plain = [f for f, (p, _) in specs.items() if p.status == "fitted" and not p.value]
    frontend, prefill, cached = fit_prefill(rows)
    base_rows = rows[rows["file"].isin(plain)] if plain else rows[rows["file"].isin(drafting)]
    base_tps = 1.0 if plain else specs[drafting[0]][1] if drafting else 1.0
    step, batch_cost, factors, delivery, peak_decoding, per_request = fit_decode(base_rows if len(base_rows) else rows, base_tps)
    speed, window = fit_speed(per_request, step, batch_cost, factors)
    max_seqs, kv = fit_limits(metrics)
    budget = fit_token_budget(base_rows if len(base_rows) else rows, frontend, prefill, step, batch_cost, factors)
    ratio = fit_prompt_ratio(rows, configs, paths)
    spec_cost = Param("spec_step_cost", "unknown",
                      needs="a run with speculation and one without on the same server (the step's growth per draft)")
    if drafting:
        # The model speculates as the (first) drafting run did.
        spec, tokens_per_step = specs[drafting[0]]
        if plain and step.status == "fitted":
            k = len(spec.value)
            timed = drafting_step(rows[rows["file"].isin(drafting)])
            if timed is not None:
                spec_step_us, spread, gaps, requests = timed
                cost = max(spec_step_us / float(step.value) - 1.0, 0.0) / k
                spec_cost = Param("spec_step_cost", "fitted", cost, None, spread, gaps,
                                  f"the one-sequence step with {k} drafts ({spec_step_us:.0f} µs: the median over {requests} requests "
                                  "decoding alone of their mean chunk gap, every step a chunk, drafting or not) against "
                                  "step_us, per draft")
            else:
                spec_cost = Param("spec_step_cost", "unknown",
                                  needs="a drafting run with requests decoding alone (a run at --concurrency 1)")
        elif not plain:
            spec_cost = Param("spec_step_cost", "unknown",
                              needs="a run without speculation on the same server: step_us is the step with drafts until then")
    elif plain:
        spec = specs[plain[0]][0]
        spec_cost = Param("spec_step_cost", "unknown", needs="a run with speculative decoding on (only matters for a draft-length what-if)")
    else:
        spec = next(iter(specs.values()))[0]
    if len(plain) and len(drafting):
        spec.how += f"; from {paths[drafting[0]]} (the runs without drafts give step_us)"
    jitter = fit_jitter(rows)
    co_launch = fit_co_launch(rows)
    cached_co_launch = fit_cached_co_launch(rows)
    template = fit_template_cache(rows, cached)
    params = {p.name: p for p in (frontend, jitter, co_launch, cached_co_launch, prefill, cached, template, step, batch_cost, factors, max_seqs, budget, kv, ratio, delivery, spec, spec_cost,
                                  speed, window)}
    in_flight = 0
    for _, g in rows.groupby("group"):
        in_flight = max(in_flight, int(_in_server(g, g["sent_us"].to_numpy(dtype=np.int64), "sent_us", "end_us").max()))
    points = sorted({str(p) for p in rows["point"]})
    calibration = {
        "runs": [str(p) for p in paths],
        "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "requests": int(len(rows)),
        "points": points,
        "max_in_flight": in_flight,
        "max_decoding": peak_decoding,
        # The decode step is measured for batches up to this size (beyond: batch_step_cost, with a finding).
        "step_table_sizes": len(factors.value) if factors.status == "fitted" else 0,
        "prompt_tokens": [int(rows["prompt_tokens"].min()), int(rows["prompt_tokens"].max())] if rows["prompt_tokens"].notna().any() else [],
    }
    assert set(params) == set(PARAMS)
    return ServerModel({n: params[n] for n in PARAMS}, fit_outputs(rows, seed), calibration)
