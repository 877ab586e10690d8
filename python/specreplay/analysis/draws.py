"""The bootstrap's draws: a point's seeded generator, resamples of its units
as counts per unit, and the batches the figures are computed on
(`resampling` computes the figures)."""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Sequence

import numpy as np


def rng(seed: int, point: str) -> np.random.Generator:
    """The generator of a point's resamples: the same files give the same intervals."""
    return np.random.default_rng([seed, zlib.crc32(point.encode())])


def draw(generator: np.random.Generator, n: int, size: int) -> np.ndarray:
    """`size` resamples of n units with replacement, as counts per unit."""
    if n == 0:
        return np.zeros((size, 0), dtype="int64")
    return generator.multinomial(n, np.full(n, 1.0 / n), size=size)


#: Elements a block of draws (resamples × the most samples a figure has), or
#: a batch of figures (resamples × the most requests or units a side has), holds.
_ELEMENTS = 2_000_000


def draw_batches(generator: np.random.Generator, n_units: Sequence[int], resamples: int, biggest: int, widest: int) -> Iterator[list[np.ndarray]]:
    """`resamples` resamples of each side's `n_units`, as unit counts (one
    array per side, rows = resamples), handed out a batch at a time. The
    draws come in blocks of `_ELEMENTS // biggest` resamples, the sides
    taking turns: the blocks' sizes and turns are what a seed reproduces.
    The figures are computed on batches of blocks (`_ELEMENTS // widest`
    resamples), so that each matrix product is worth its call: one resample
    at a time (blocks of one, on a million-sample point) `compare` of the
    100,000-request bench file took 41-45 s of CPU with one BLAS thread and
    90-273 s with OpenBLAS's two on a shared box, on batches 11-18 s
    (docs/benchmarks.md, "Analysis of a large results file")."""
    block = max(1, min(resamples, _ELEMENTS // max(biggest, 1)))
    batch = max(block, min(resamples, _ELEMENTS // max(widest, 1)))
    pending: list[list[np.ndarray]] = [[] for _ in n_units]
    done = drawn = 0
    while done < resamples:
        size = min(block, resamples - done)
        for blocks, n in zip(pending, n_units):
            blocks.append(draw(generator, n, size))
        done, drawn = done + size, drawn + size
        if drawn >= batch or done == resamples:
            yield [np.concatenate(blocks) for blocks in pending]
            pending, drawn = [[] for _ in n_units], 0
