"""Output lengths per prompt class (`specreplay calibrate`, docs/predict.md).

A prompt class is the request's API and its prompt-length bucket: prompts of
at most 2^k server tokens (`chat/<=256`). Each class keeps the measured
(reasoning, content) pairs of its answers, which the prediction draws from
per request; a bucket with fewer than `MIN_CLASS_SAMPLES` answers is left
out (its prompts draw from the API's class, which holds every answer).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

#: Paired output-length samples kept per prompt class.
MAX_OUTPUT_SAMPLES = 2000
#: Answers a prompt-length bucket needs to be a class of its own.
MIN_CLASS_SAMPLES = 8


def bucket(prompt_tokens: float) -> int:
    """The prompt-length bucket's upper bound: the next power of two."""
    return 1 << max(int(math.ceil(math.log2(max(prompt_tokens, 1.0)))), 0)


def _samples(g: pd.DataFrame, rng: np.random.Generator) -> dict[str, Any]:
    if len(g) > MAX_OUTPUT_SAMPLES:
        g = g.iloc[np.sort(rng.choice(len(g), MAX_OUTPUT_SAMPLES, replace=False))]
    return {
        "reasoning": [int(x) for x in g["reasoning_tokens"].fillna(0)],
        "content": [int(x) for x in g["content_tokens"].fillna(0)],
        "samples": len(g),
        "cut_at_budget": int((g["finish_reason"] == "length").sum()),
    }


def fit_outputs(rows: pd.DataFrame, seed: int) -> dict[str, dict[str, Any]]:
    """Per API (every answer) and per API and prompt-length bucket, paired
    (reasoning, content) samples of the measured answers."""
    out: dict[str, dict[str, Any]] = {}
    rng = np.random.default_rng(seed)
    for api, g in rows.groupby("api"):
        g = g[g["output_tokens"].notna()]
        if not len(g):
            continue
        out[str(api)] = {"api": str(api), **_samples(g, rng)}
        if not g["prompt_tokens"].notna().any():
            continue
        buckets = g["prompt_tokens"].map(lambda p: bucket(float(p)) if pd.notna(p) else 0)
        kept = [b for b in sorted(set(buckets)) if b > 0 and (buckets == b).sum() >= MIN_CLASS_SAMPLES]
        if len(kept) < 2:  # one bucket is the API's class again
            continue
        for b in kept:
            out[f"{api}/<={b}"] = {"api": str(api), "max_prompt_tokens": int(b), **_samples(g[buckets == b], rng)}
    return out


def core_classes(output: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The classes as `_core.predict_point` reads them (a class written by an
    older calibrate, keyed by API alone, has no `api` field)."""
    classes = []
    for key, cls in output.items():
        entry: dict[str, Any] = {
            "api": str(cls.get("api", key)),
            "reasoning": [int(x) for x in cls["reasoning"]],
            "content": [int(x) for x in cls["content"]],
        }
        if cls.get("max_prompt_tokens") is not None:
            entry["max_prompt_tokens"] = int(cls["max_prompt_tokens"])
        classes.append(entry)
    return classes
