"""Regressions of the calibration: costs are never negative, and a shared
machine's slow spells should move a fit no more than one sample."""

from __future__ import annotations

import numpy as np


def _nonnegative_lstsq(design: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares with every coefficient >= 0 (a cost is never negative):
    the best feasible fit over the subsets of columns (a few columns here).
    Clamping an unconstrained fit instead would keep the other coefficients
    that a negative one had bent."""
    k = design.shape[1]
    best, best_res = np.zeros(k), float(((y - 0) ** 2).sum())
    for mask in range(1, 1 << k):
        cols = [j for j in range(k) if mask >> j & 1]
        coef, *_ = np.linalg.lstsq(design[:, cols], y, rcond=None)
        if np.any(coef < 0):
            continue
        full = np.zeros(k)
        full[cols] = coef
        res = float(((y - design @ full) ** 2).sum())
        if res < best_res:
            best, best_res = full, res
    return best


#: Iterations of the least-absolute-deviations fit (reweighted least squares).
LAD_ITERATIONS = 30


def robust_lstsq(design: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative least absolute deviations by iteratively reweighted
    least squares: the fit of the median, not the mean, so a shared
    machine's slow spell (a prefill taking 2-3x its usual time) moves it no
    more than one sample; the speed spread carries that variation instead
    (`spread.py`), around costs that are medians as the decode step is."""
    coef = _nonnegative_lstsq(design, y)
    scale = max(float(np.median(np.abs(y))) * 1e-3, 1.0)
    for _ in range(LAD_ITERATIONS):
        w = 1.0 / np.sqrt(np.maximum(np.abs(y - design @ coef), scale))
        coef = _nonnegative_lstsq(design * w[:, None], y * w)
    return coef
