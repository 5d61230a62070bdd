"""The variance parts of a pooled effect: what the rule's power is stated with.

Why their own module. The rule's modules read these parts off a family's data (`period_family`
over one history's folds, `histories` over several histories), and the power statement
(`power`) runs the rule's own pooling on families drawn from them; so they sit below both.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from tune_gems.analysis.rules.pooling import fold_estimates


@dataclass(frozen=True)
class PooledComponents:
    """The variance parts of one history's pooled effect over K folds of n informative pairs,
    per-seed-difference units^2: `period` tau^2 (the folds' spread), `within` one seed's variance
    inside a fold (n x the variance of a fold's Hodges-Lehmann effect), `seed` its part common to
    every fold, `overlap` the folds' lambda; the pooled mean's variance is

        (tau^2 + (within - seed) / n) (1/K + lambda) + seed / n
    """

    period: float
    within: float
    seed: float = 0.0
    overlap: float = 0.0
    """The folds' overlap, lambda = n2 / n1 (`rules.overlap`: Nadeau-Bengio's rho / (1 - rho)): the
    part of the fold-level variance common to folds that share training rows, which averaging
    folds does not shrink (0: none)."""


RANK_EFFICIENCY = math.pi / 3.0
"""n x the squared standard error of a Hodges-Lehmann effect over the variance of one pair's
difference (normal differences): how a fold's sample variance reads as `within` where its rank
interval is too short for a standard error."""


OVERREAD_ROWS = 2000
"""Normal samples `rank_overread` reads the rank interval's over-read from, per pair count."""
OVERREAD_MAX = 64
"""Pair counts above this take the over-read at OVERREAD_MAX, shrinking as 1 / n."""


@lru_cache(maxsize=None)
def rank_overread(n: int) -> float:
    """How much a fold's rank interval over-reads its effect's variance at `n` informative pairs:
    E[n x se^2 of `pooling.fold_estimates`] over pi / 3 sigma^2 (the Hodges-Lehmann effect's
    variance), under normal differences (fixed draws: the same number every time). 2.7 at 6 pairs,
    1.25 at 16, 1.09 at 32: the signed-rank interval's discrete critical values widen it at few
    pairs. 1 below 6 pairs (no finite interval: the sample variance stands in) and towards 1
    beyond OVERREAD_MAX."""
    if n > OVERREAD_MAX:
        return 1.0 + (rank_overread(OVERREAD_MAX) - 1.0) * OVERREAD_MAX / n
    var = fold_estimates(np.random.default_rng(n).standard_normal((OVERREAD_ROWS, max(int(n), 1))))["var"]
    ok = np.isfinite(var)
    return float(var[ok].mean() * n / RANK_EFFICIENCY) if ok.any() else 1.0


def components(var, n_informative, seed_share, tau2, theta=None, sample_var=None) -> PooledComponents:
    """The pooled components of gems' fold data (arrays broadcast; the fold axis last for
    `var`, `n_informative`, `theta` and `sample_var` [.., K]): within = the mean over folds of n x
    the fold effect's squared standard error over the rank interval's over-read at n pairs
    (`rank_overread`), or, in a fold whose rank interval gives none (too few informative pairs for
    its level), pi / 3 x the sample variance of its informative differences (`sample_var`, when
    given); seed = its share common to every
    fold (`pooling.seed_anova`'s share; NaN: 0) x within; period = tau^2, or where the rule has
    none (a fold variance unknown: the contrast pooled with equal weights) and the fold effects
    `theta` are given, the moment estimate max(0, their variance - (within - seed) / n)."""
    var, n = np.asarray(var, float), np.asarray(n_informative, float)
    overread = np.vectorize(lambda x: rank_overread(int(x)) if x >= 1 else 1.0, otypes=[float])(n) if n.size else n
    with np.errstate(invalid="ignore"):  # a fold without informative pairs: inf x 0, no variance
        per_seed = var * n / overread
    if sample_var is not None:  # a fold without a finite rank interval: its sample variance
        with np.errstate(invalid="ignore"):
            per_seed = np.where(np.isfinite(var), per_seed, RANK_EFFICIENCY * np.asarray(sample_var, float))
    fin = np.isfinite(per_seed) & (n > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        within = np.where(fin, per_seed, 0.0).sum(-1) / fin.sum(-1)
        seed = np.nan_to_num(np.asarray(seed_share, float)) * within
        period = np.asarray(tau2, float)
        if theta is not None:
            th = np.asarray(theta, float)
            ok = np.isfinite(th)
            k = ok.sum(-1)
            mean = np.where(ok, th, 0.0).sum(-1) / k
            spread = np.where(ok, (th - mean[..., None]) ** 2, 0.0).sum(-1) / (k - 1)
            n_bar = np.where(ok & (n > 0), n, 0.0).sum(-1) / np.maximum((ok & (n > 0)).sum(-1), 1)
            moments = np.maximum(0.0, spread - (within - seed) / n_bar)
            period = np.where(np.isfinite(period), period, np.where(k >= 2, moments, np.nan))
    return PooledComponents(period, within, seed)


@dataclass(frozen=True)
class HistoryComponents:
    """The variance parts of the nested rule's pooled effect over H histories of K folds
    (`rules.histories`), per-seed-difference units^2: `history` tau_H^2 (the lasting spread between
    histories), `period` a history's own spread between its folds, `within` one seed's variance
    inside a fold, `seed` its part common to every history and fold (seed-paired), `calendar` the
    spread of the calendar periods the histories share (`rules.calendar`; 0 on their own calendars,
    where each history's calendar luck is in `period`), `shared` whether they share one calendar;
    the pooled mean's variance is

        tau_H^2 / H + (tau^2 + (within - seed) / n) / (K H) + calendar / K + seed / n
    """

    history: float
    period: float
    within: float
    seed: float = 0.0
    calendar: float = 0.0
    shared: bool | np.ndarray = False
