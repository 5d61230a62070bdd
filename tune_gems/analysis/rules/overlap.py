"""The overlap of folds that share training rows, in the pooled variance.

Why. The validation periods of the folds are disjoint, but a purged fold trains on the other
groups and an expanding walk-forward window starts where every other one starts: learners
trained on mostly the same rows make fold effects that share a part. The fold dispersion
cannot see a part common to every fold (it cancels in the residuals), so the pooled variance
read off the dispersion is too small: simulated at the real shapes, the family-wise false
rate of the pooled rule is 2-7x its level at Nadeau and Bengio's correlation
(`decision_calibration`, docs/analysis.md "The overlap of folds", which derives what follows).

The correction (Nadeau & Bengio 2003, "Inference for the generalization error"): the variance
read off the dispersion is multiplied by 1 + K n2 / n1 (n1 training rows, n2 validation rows of
a fold). The correlation of two folds' errors is not estimable from one history's folds, so it
is taken from the layout. Unequal or partly overlapping folds load a common part with
lambda_k = n2_k / n1_k, shared only by folds whose training rows meet; with the random-effects
weights w the factor is

    F = 1 + (sqrt w)' Lambda (sqrt w) / sum w        (`overlap_factor`)

NB's factor for K equal folds that all share rows; a pair that shares any row counts in full
(conservative for windows that barely meet).

`pooling.pool_family` multiplies by F the part of the pooled variance the fold dispersion
measures (the HKSJ and DerSimonian-Laird variances, tau^2 included), not the seeds' common
share, which the seeds x folds ANOVA already adds whole: the overlap is a part common to the
folds as periods (training luck on shared rows), invisible to that ANOVA and to the
dispersion alike, present even where tau^2 is estimated at 0.

Pure numpy; a fold table (`folds.parquet`, `data.segments.fold_table`) gives the matrix in one
call (`fold_overlap`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tune_gems.contracts.errors import DataError

FOLD_TABLE_NEEDS = ("fold", "train_runs", "train_rows", "group_rows")
"""The fold-table columns the overlap is read from (`data.segments.FOLD_TABLE_COLUMNS`)."""


@dataclass(frozen=True)
class FoldOverlap:
    """A layout's overlap: `folds` the fold ids in order, `corr` [K, K] the correlation of the
    fold effects that the shared training gives (`correlation_of`; the diagonal: a fold's own
    rho_k, 0 where it shares rows with no other fold), `factor` NB's factor for equal weights
    (`nb_factor`)."""

    folds: tuple[int, ...]
    corr: np.ndarray
    factor: float


def parse_runs(text: str) -> tuple[tuple[int, int], ...]:
    """The runs of rows of a fold table's `train_runs` cell (`start:end` half-open, space-separated)."""
    out = []
    for part in str(text).split():
        lo, _, hi = part.partition(":")
        out.append((int(lo), int(hi)))
    return tuple(out)


def shared_rows(runs_a, runs_b) -> int:
    """Rows two folds' training runs have in common."""
    return int(sum(max(0, min(a1, b1) - max(a0, b0)) for a0, a1 in runs_a for b0, b1 in runs_b))


def loading_matrix(train_rows, val_rows, shares) -> np.ndarray:
    """Lambda [K, K] (module docstring): sqrt(lambda_k lambda_l) where folds k and l share
    training rows (`shares` [K, K] bool, the diagonal ignored), lambda_k = n2_k / n1_k on the
    diagonal of a fold that shares with any other, 0 elsewhere."""
    n1, n2 = np.asarray(train_rows, float), np.asarray(val_rows, float)
    if (n1 <= 0).any() or (n2 <= 0).any():
        raise ValueError("overlap: every fold needs training and validation rows (n1, n2 > 0)")
    lam = n2 / n1
    s = np.asarray(shares, bool).copy()
    np.fill_diagonal(s, False)
    s = s | s.T
    np.fill_diagonal(s, s.any(1))
    return np.where(s, np.sqrt(np.outer(lam, lam)), 0.0)


def correlation_of(loadings) -> np.ndarray:
    """The correlation of fold effects that a loading matrix Lambda stands for: Lambda / (1 +
    Lambda) elementwise (rho = n2 / (n1 + n2) for lambda = n2 / n1); `loadings_of` inverts it."""
    lam = np.asarray(loadings, float)
    return lam / (1.0 + lam)


def loadings_of(fold_corr, k: int) -> np.ndarray:
    """Lambda [..., K, K] from `fold_corr`: a number rho (every pair of the K folds shares
    training rows, each at rho: Lambda = rho / (1 - rho) everywhere, NB's equal folds) or an
    array broadcastable to [..., K, K] of the correlations `correlation_of` gives (a
    `FoldOverlap.corr`)."""
    rho = np.asarray(fold_corr, float)
    if rho.ndim == 0:
        rho = np.full((k, k), float(rho))
    if rho.shape[-2:] != (k, k):
        raise ValueError(f"fold_corr: expected a number or a [..., {k}, {k}] matrix, got shape {rho.shape}")
    if np.isnan(rho).any() or (rho < 0).any() or (rho >= 1).any():
        raise ValueError("fold_corr: correlations must lie in [0, 1)")
    return rho / (1.0 - rho)


def overlap_factor(weights, fold_corr) -> np.ndarray:
    """F [...] = 1 + (sqrt w)' Lambda (sqrt w) / sum w per row of `weights` [..., K] (the
    random-effects weights; 0: a fold that carries no weight), Lambda from `fold_corr`
    (`loadings_of`): the factor by which the pooled variance grows (module docstring)."""
    w = np.asarray(weights, float)
    lam = loadings_of(fold_corr, w.shape[-1])
    r = np.sqrt(np.where(w > 0, w, 0.0))
    with np.errstate(invalid="ignore", divide="ignore"):
        quad = np.einsum("...k,...kl,...l->...", r, np.broadcast_to(lam, w.shape[:-1] + lam.shape[-2:]), r)
        return 1.0 + quad / w.sum(-1)


def nb_factor(fold_corr, k: int | None = None) -> float:
    """The factor for K folds of equal weight (`overlap_factor` with w = 1): 1 + sum Lambda / K;
    NB's 1 + K n2 / n1 for equal folds that all share rows. `k` is needed with a number rho."""
    rho = np.asarray(fold_corr, float)
    k = rho.shape[-1] if rho.ndim else int(k)
    return float(overlap_factor(np.ones(k), rho))


def fold_overlap(table: pd.DataFrame, history=None) -> FoldOverlap:
    """The overlap of a fold table's folds (FOLD_TABLE_NEEDS; `folds.parquet` / `folds.csv`):
    which folds share training rows (their `train_runs` meet), n1 = `train_rows`, n2 =
    `group_rows`. A table with a `history` column (several price histories) is read for one
    `history` (folds of different histories share no rows); a missing column or a `history`
    the table lacks is a one-line DataError naming it."""
    missing = [c for c in FOLD_TABLE_NEEDS if c not in table.columns]
    if missing:
        raise DataError(f"fold table: missing column {missing[0]!r} (the overlap of folds reads {', '.join(FOLD_TABLE_NEEDS)})")
    t = table
    if "history" in t.columns:
        if history is None:
            if t["history"].nunique() > 1:
                raise DataError("fold table: several histories; name the one whose folds overlap (history=...)")
        else:
            t = t[t["history"] == history]
            if t.empty:
                raise DataError(f"fold table: no folds of history {history!r}")
    t = t.sort_values("fold")
    try:
        runs = [parse_runs(x) for x in t["train_runs"]]
    except ValueError:
        raise DataError("fold table: column 'train_runs' must hold start:end runs of rows") from None
    k = len(runs)
    shares = np.array([[shared_rows(runs[i], runs[j]) > 0 for j in range(k)] for i in range(k)], bool)
    corr = correlation_of(loading_matrix(t["train_rows"].to_numpy(float), t["group_rows"].to_numpy(float), shares))
    return FoldOverlap(tuple(int(f) for f in t["fold"]), corr, nb_factor(corr) if k else 1.0)
