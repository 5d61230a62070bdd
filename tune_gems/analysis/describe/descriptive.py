"""Robust aggregates for the descriptive Sharpe tables (the verdicts use `inference.py`): the
interquartile mean and a percentile bootstrap stratified like the runs are nested, trials then
members within them (Agarwal et al. 2021); deterministic given `seed`."""

from __future__ import annotations

import math
import warnings
from typing import Sequence

import numpy as np

from tune_gems.analysis import defaults

_CHUNK = 256  # resamples per vectorised block (bounds memory; fixed so results are seeded)


def iqm(values) -> float:
    """Interquartile mean as `scipy.stats.trim_mean(x, 0.25)` (and rliable), ignoring NaNs; NaN for no values."""
    arr = np.asarray(values, dtype=float).ravel()
    arr = arr[~np.isnan(arr)]
    if arr.size == 0:
        return math.nan
    return float(_iqm_rows(arr[None, :])[0])


def _iqm_rows(mat: np.ndarray) -> np.ndarray:
    """IQM of each row of a NaN-padded matrix (rows may hold different numbers of values)."""
    srt = np.sort(mat, axis=1)  # NaN sort last
    n = np.sum(~np.isnan(srt), axis=1)
    k = (0.25 * n).astype(int)
    csum = np.concatenate([np.zeros((srt.shape[0], 1)), np.cumsum(np.nan_to_num(srt), axis=1)], axis=1)
    rows = np.arange(srt.shape[0])
    total = csum[rows, n - k] - csum[rows, k]
    cnt = n - 2 * k
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(cnt > 0, total / np.maximum(cnt, 1), np.nan)


def _stat_rows(mat: np.ndarray, statistic: str) -> np.ndarray:
    if statistic == "iqm":
        return _iqm_rows(mat)
    if statistic == "mean":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return np.nanmean(mat, axis=1)
    raise ValueError(f"statistic must be 'iqm' or 'mean', got {statistic!r}")


def location(values, statistic: str = defaults.STATISTIC) -> float:
    """`iqm` or `mean` of the finite values."""
    arr = np.asarray(values, dtype=float).ravel()
    arr = arr[np.isfinite(arr)]
    if arr.size == 0:
        return math.nan
    return float(_stat_rows(arr[None, :], statistic)[0])


def _hierarchical_resamples(groups: list[np.ndarray], n_boot: int, statistic: str, rng) -> np.ndarray:
    """`n_boot` values of the statistic over two-level resamples (groups, then values within)."""
    t = len(groups)
    sizes = np.array([g.size for g in groups])
    nmax = int(sizes.max())
    padded = np.full((t, nmax), np.nan)
    for i, g in enumerate(groups):
        padded[i, : g.size] = g
    out = np.empty(n_boot)
    for start in range(0, n_boot, _CHUNK):
        c = min(_CHUNK, n_boot - start)
        ti = rng.integers(0, t, size=(c, t))
        n_sel = sizes[ti]  # [c, t]
        mi = np.floor(rng.random((c, t, nmax)) * n_sel[..., None]).astype(int)
        vals = padded[ti[..., None], mi]
        vals[np.arange(nmax)[None, None, :] >= n_sel[..., None]] = np.nan
        out[start : start + c] = _stat_rows(vals.reshape(c, t * nmax), statistic)
    return out


def _interval(boot: np.ndarray, confidence: float) -> tuple[float, float]:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.nanquantile(boot, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def stratified_bootstrap_ci(groups: Sequence, *, statistic: str = defaults.STATISTIC, n_boot: int = defaults.N_BOOT,
                            confidence: float = defaults.CONFIDENCE,
                            seed: int = defaults.SEED) -> tuple[float, float, float]:
    """(estimate, low, high) of `statistic` over the pooled finite values of `groups` (one per trial):
    resample groups, then values within each; the percentile interval. NaNs below 2 values."""
    groups = [np.asarray(g, dtype=float).ravel() for g in groups]
    groups = [a[np.isfinite(a)] for a in groups if np.isfinite(a).any()]
    pooled = np.concatenate(groups) if groups else np.empty(0)
    if pooled.size < 2:
        est = location(pooled, statistic) if pooled.size else math.nan
        return est, math.nan, math.nan
    rng = np.random.default_rng(seed)
    boot = _hierarchical_resamples(groups, n_boot, statistic, rng)
    return (location(pooled, statistic), *_interval(boot, confidence))
