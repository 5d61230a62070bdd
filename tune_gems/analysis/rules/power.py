"""The power of the rule that decides: its minimum detectable effect, the seeds it needs, and the
floor no seed count beats.

Why. With K >= 2 validation periods the pooled test decides (`periods.decide_periods`), and
its variance has a part that seeds cannot shrink: the periods' own spread tau^2 / K. Stating
the seed rule's MDE there (issue 30: "0.173, about 68 seeds would detect +-0.1" where the
deciding test's MDE was 0.38 and no seed count got below 0.29) sends a user to buy seeds that
cannot help. So the power statement is made of the deciding test's parts:

    se^2(K, n) = (tau^2 + (within - seed) / n) / K + seed / n

- `period` tau^2: the period-to-period spread of the effect (the rule's DerSimonian-Laird
  estimate, shared across the family when `pool_family` shares it);
- `within`: one seed's variance inside a fold as the fold's rank interval reads it (n times the
  fold effect's squared standard error, averaged over folds): seed and seed x fold noise;
- `seed`: its part common to every fold (the seeds' share, `pooling.seed_anova`), which does
  not average out over folds (`pool_family` adds it whole);

and the MDE at power 1 - beta is (t_{1-a/2, df} + t_{1-beta, df}) x se, a the first Holm
step's level (alpha / m; alpha / m one-sided with the one-sided keep test), df the rule's
degrees of freedom (K - 1 per contrast, or the family's shared df scaled to K). With seeds -> infinity
the MDE falls to its **floor**, (t + t) x tau / sqrt(K): when that exceeds the target, only more
periods help ("more periods, not more seeds"). The period calibration checks the stated MDE
against simulated power (`walk_forward_calibration`).

With folds that share training rows the fold-level part gets Nadeau-Bengio's (1/K + n2/n1)
instead of 1/K (`PooledComponents.overlap`, `rules.overlap`); over several price histories the
nested rule's MDE is `history_mde` (`HistoryComponents`, `rules.histories`).

Pure functions of numbers: the verdicts (`walk_forward.py`), the plan step (`analysis/plan.py`)
and the calibration call them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

N_MAX = 100_000
"""Largest seed count searched for `seeds_needed` (+inf beyond: effectively never)."""


@dataclass(frozen=True)
class PooledComponents:
    """The variance parts of a pooled effect (module docstring), per-seed-difference units^2."""

    period: float
    within: float
    seed: float = 0.0
    overlap: float = 0.0
    """The folds' overlap, lambda = n2 / n1 (`rules.overlap`: Nadeau-Bengio's rho / (1 - rho)): the
    part of the fold-level variance common to folds that share training rows, which averaging
    folds does not shrink (0: none)."""

    def se(self, periods, seeds):
        """The pooled effect's standard error with `periods` folds of `seeds` informative pairs
        (numbers or arrays): NB's (1/K + lambda) on the fold-level part."""
        fold_level = self.period + (self.within - self.seed) / seeds
        common = fold_level * self.overlap if np.any(self.overlap) else 0.0  # none: the rule before, to the bit
        return np.sqrt(fold_level / periods + common + self.seed / seeds)


RANK_EFFICIENCY = math.pi / 3.0
"""n x the squared standard error of a Hodges-Lehmann effect over the variance of one pair's
difference (normal differences): how a fold's sample variance reads as `within` where its rank
interval is too short for a standard error."""


def components(var, n_informative, seed_share, tau2, theta=None, sample_var=None) -> PooledComponents:
    """The pooled components of gems' fold data (arrays broadcast; the fold axis last for
    `var`, `n_informative`, `theta` and `sample_var` [.., K]): within = the mean over folds of n x
    the fold effect's squared standard error, or, in a fold whose rank interval gives none (too
    few informative pairs for its level), pi / 3 x the sample variance of its informative
    differences (`sample_var`, when given); seed = its share common to every
    fold (`pooling.seed_anova`'s share; NaN: 0) x within; period = tau^2, or where the rule has
    none (a fold variance unknown: the contrast pooled with equal weights) and the fold effects
    `theta` are given, the moment estimate max(0, their variance - (within - seed) / n)."""
    var, n = np.asarray(var, float), np.asarray(n_informative, float)
    per_seed = var * n
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


def t_multiplier(df, level, power: float, one_sided: bool = False):
    """(t_{1-a/2, df} + t_{power, df}): the MDE over the model se (a = level; one-sided:
    t_{1-a})."""
    df = np.asarray(df, float)
    tail = np.asarray(level, float) if one_sided else np.asarray(level, float) / 2
    with np.errstate(invalid="ignore"):
        out = sps.t.ppf(1 - tail, df) + sps.t.ppf(power, df)
    out = np.where(np.isfinite(df) & (df > 0), out, np.nan)
    return float(out) if out.ndim == 0 else out


def pooled_mde(c: PooledComponents, periods, seeds, *, df, level, power: float, one_sided: bool = False):
    """The pooled rule's minimum detectable effect with `periods` folds of `seeds` pairs."""
    with np.errstate(invalid="ignore", divide="ignore"):
        out = t_multiplier(df, level, power, one_sided) * c.se(periods, seeds)
    out = np.where((np.asarray(seeds) > 0) & (np.asarray(periods) >= 2), out, np.nan)
    return float(out) if out.ndim == 0 else out


def mde_floor(c: PooledComponents, periods, *, df, level, power: float, one_sided: bool = False):
    """The MDE with infinitely many seeds: (t + t) x tau / sqrt(K). No seed count beats it."""
    with np.errstate(invalid="ignore", divide="ignore"):
        out = t_multiplier(df, level, power, one_sided) * np.sqrt(c.period / np.asarray(periods, float))
    out = np.where(np.asarray(periods) >= 2, out, np.nan)
    return float(out) if out.ndim == 0 else out


def pooled_seeds_needed(c: PooledComponents, periods: int, effect: float, *, df: float, level: float, power: float,
                        one_sided: bool = False, n_max: int = N_MAX) -> float:
    """Fewest informative pairs per fold whose pooled MDE is at most `effect`; +inf when the
    floor (`mde_floor`) is above it or beyond `n_max`; NaN when it cannot be stated."""
    kw = dict(df=df, level=level, power=power, one_sided=one_sided)
    if not (effect > 0) or not math.isfinite(t_multiplier(df, level, power, one_sided)):
        return math.nan
    if pooled_mde(c, periods, n_max, **kw) > effect:
        return math.inf
    lo, hi = 1, n_max
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if pooled_mde(c, periods, mid, **kw) <= effect else (mid, hi)
    return float(hi)


def scaled_df(df: float, periods_from: int, periods_to: int) -> float:
    """The rule's degrees of freedom at another period count: (K - 1) x df / (K_from - 1) (a
    family that shares tau keeps its contrasts-per-period ratio)."""
    if periods_from < 2 or not math.isfinite(df):
        return float(periods_to - 1)
    return float(df) * (periods_to - 1) / (periods_from - 1)


def periods_needed(c: PooledComponents, seeds: float, effect: float, *, df_per_period: float, level: float,
                   power: float, one_sided: bool = False, k_max: int = 64) -> float:
    """Fewest periods K (>= 2) at `seeds` pairs per fold whose pooled MDE is at most `effect`
    (df = df_per_period x (K - 1)); +inf beyond `k_max`."""
    for k in range(2, k_max + 1):
        if pooled_mde(c, k, seeds, df=df_per_period * (k - 1), level=level, power=power, one_sided=one_sided) <= effect:
            return float(k)
    return math.inf


def advice(mde: float, floor: float, target: float, seeds_needed: float) -> str:
    """What the power statement implies, in words."""
    if not math.isfinite(mde):
        return ""
    if mde <= target:
        return f"the design detects +-{target:g}"
    if not math.isfinite(seeds_needed) or floor > target:
        return (f"no seed count reaches +-{target:g}: with infinitely many seeds the MDE is {floor:.3g} "
                "(the periods' spread); more periods, not more seeds")
    return f"about {seeds_needed:.0f} seeds per fold would detect +-{target:g}"


@dataclass(frozen=True)
class HistoryComponents:
    """The variance parts of the nested rule's pooled effect over H histories of K folds
    (`rules.histories`), per-seed-difference units^2: `history` tau_H^2 (the spread between
    histories), `period` tau^2 (between the folds of a history), `within` one seed's variance
    inside a fold, `seed` its part common to every history and fold (seed-paired), `overlap` the
    folds' lambda = n2 / n1 inside a history:

        se^2(H, K, n) = tau_H^2 / H + (tau^2 + (within - seed) / n) (1/K + lambda) / H + seed / n
    """

    history: float
    period: float
    within: float
    seed: float = 0.0
    overlap: float = 0.0

    def se(self, histories, folds, seeds):
        """The nested rule's standard error with `histories` x `folds` x `seeds` (numbers or arrays)."""
        per_history = PooledComponents(self.period, self.within, self.seed, self.overlap)
        one = per_history.se(folds, seeds) ** 2 - self.seed / seeds  # a history's variance less the seeds' common part
        return np.sqrt((self.history + one) / histories + self.seed / seeds)


def history_mde(c: HistoryComponents, histories, folds, seeds, *, df, level, power: float, one_sided: bool = False):
    """The nested rule's minimum detectable effect with `histories` x `folds` x `seeds`, at the
    histories' degrees of freedom `df` (H - 1, or m (H - 1) shared across a family) and `level`
    (the first Holm step's), as `pooled_mde` states the one-history rule's."""
    with np.errstate(invalid="ignore", divide="ignore"):
        out = t_multiplier(df, level, power, one_sided) * c.se(histories, folds, seeds)
    out = np.where((np.asarray(seeds) > 0) & (np.asarray(histories) >= 2) & (np.asarray(folds) >= 1), out, np.nan)
    return float(out) if out.ndim == 0 else out
