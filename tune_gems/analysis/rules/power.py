"""The power of the rule that decides, in one place: its minimum detectable effect, the seeds it
needs, and the floor no seed count beats.

Why one module. Every statement of power (the MDE beside a verdict, the seeds that would reach
the ROPE, the floor of periods or of one history's market noise, the seeds `tune-gems confirm`
trains, the designs `tune-gems plan` prices, the MDE the calibrations check by simulation) must
be the power of the test that decides, in the same units, or a user buys seeds that cannot help
(the seed test's "about 68 seeds would detect +-0.1" where the deciding test's MDE is 0.38 and no
seed count gets below 0.29). So there is one description of a comparison (`PowerInputs`), one MDE
(`mde`), one floor (`floor`), one solver (`fewest_seeds`), one tie scaling (`seeds_to_run`) and one
statement of them all for a verdict row (`statement`).

The rule that decides, and so its MDE at power 1 - beta and first-Holm-step level a:

- **one period (K = 1)**: the seed rule's signed-rank test (`inference.min_detectable_effect`); on
  one price history the market-noise standard error adds its variance (the one-period gate), at
  `history_level` (selection-adjusted for a confirmation on the search's one history);
- **K >= 2 periods**: the pooled test, with the variance parts of `PooledComponents`:

      se^2(K, n) = (tau^2 + (within - seed) / n) (1/K + lambda) + seed / n

  (lambda the folds' overlap, 0 without) and the MDE (t_{1-a/2, df} + t_{1-beta, df}) x se. With
  seeds -> infinity it falls to the **floor** (t + t) x tau / sqrt(K): above the target only more
  periods help;
- **several price histories**: the nested rule's `history_mde` (`HistoryComponents`).

Large-sample statements of a rule that is itself checked by simulation: they say which design
can decide, not the exact power.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from scipy import stats as sps

from tune_gems.analysis.text import format_number
from tune_gems.stats.inference import min_detectable_effect, smallest_p

N_MAX = 100_000
"""Largest seed count the solver searches (`fewest_seeds`; +inf beyond: effectively never)."""


@dataclass(frozen=True)
class PooledComponents:
    """The variance parts of a pooled effect (module docstring), per-seed-difference units^2."""

    period: float
    within: float
    seed: float = 0.0
    overlap: float = 0.0
    """The folds' overlap, lambda = n2 / n1 (`rules.periods`: Nadeau-Bengio's rho / (1 - rho)): the
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
    fold (`periods.seed_anova`'s share; NaN: 0) x within; period = tau^2, or where the rule has
    none (a fold variance unknown: the contrast pooled with equal weights) and the fold effects
    `theta` are given, the moment estimate max(0, their variance - (within - seed) / n)."""
    var, n = np.asarray(var, float), np.asarray(n_informative, float)
    with np.errstate(invalid="ignore"):  # a fold without informative pairs: inf x 0, no variance
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


def seeds_would_detect(seeds: float, target: float) -> str:
    """The seeds that would detect the target, in words (the seed rule's power statement)."""
    return f"about {format_number(seeds, '.0f', missing='nan')} seeds would detect +-{target:g}"


def advice(mde: float, floor: float, target: float, seeds_needed: float, *, market: bool = False,
           histories: bool = False) -> str:
    """What the power statement implies, in words: over periods, whether the design reaches the
    target, or the seeds per fold that would, or that only more periods would (over several price
    histories, `histories`: more histories); on one history with a market-noise interval (`market`),
    the seeds that would or that no seed count does."""
    if market:
        return (f"no seed count reaches +-{target:g} on this history's market noise: more periods (data.folds) "
                "or histories, not more seeds" if not math.isfinite(seeds_needed) else
                seeds_would_detect(seeds_needed, target))
    if not math.isfinite(mde):
        return ""
    if mde <= target:
        return f"the design detects +-{target:g}"
    if not math.isfinite(seeds_needed) and floor <= target:  # the floor is no bar: the seeds' count is
        return (f"with infinitely many seeds the MDE is {floor:.3g}, inside +-{target:g}, but no seed count "
                "within reach gets there (mostly tied pairs, or a variance with few degrees of freedom)")
    if not math.isfinite(seeds_needed) or floor > target:
        if histories:
            return (f"no seed count reaches +-{target:g}: with infinitely many seeds the MDE is {floor:.3g} "
                    "(the histories' and periods' spreads); more price histories, not more seeds")
        return (f"no seed count reaches +-{target:g}: with infinitely many seeds the MDE is {floor:.3g} "
                "(the periods' spread); more periods, not more seeds")
    return f"about {seeds_needed:.0f} seeds per fold would detect +-{target:g}"


@dataclass(frozen=True)
class HistoryComponents:
    """The variance parts of the nested rule's pooled effect over H histories of K folds
    (`rules.histories`), per-seed-difference units^2: `history` tau_H^2 (the lasting spread between
    histories), `period` a history's own spread between its folds, `within` one seed's variance
    inside a fold, `seed` its part common to every history and fold (seed-paired), `calendar` the
    spread of the calendar periods the histories share (`rules.histories`; 0 on their own calendars,
    where each history's calendar luck is in `period`), `shared` whether they share one calendar:

        se^2(H, K, n) = tau_H^2 / H + (tau^2 + (within - seed) / n) / (K H) + calendar / K + seed / n

    and the held-out stage's (`test_se`: one test period per history, their spread on the test over
    H; on one calendar the test period is one period of all, whose part the stage reads off the
    spread of the validation periods' means, calendar + (tau^2 + (within - seed) / n) / H):

        se_test^2(H, K, n) = (tau_H^2 + tau^2 + (within - seed) / (K n)) / H + seed / n [+ that part]
    """

    history: float
    period: float
    within: float
    seed: float = 0.0
    calendar: float = 0.0
    shared: bool | np.ndarray = False

    def se(self, histories, folds, seeds):
        """The nested rule's standard error with `histories` x `folds` x `seeds` (numbers or arrays)."""
        fold_level = self.period + (self.within - self.seed) / seeds
        return np.sqrt(self.history / histories + fold_level / (folds * histories) + self.calendar / folds
                       + self.seed / seeds)

    def test_parts(self, histories, folds, seeds):
        """(the histories' spread on the test / H with the seeds' common part, the calendar part):
        the held-out stage's two variances (module docstring), on H - 1 and K - 1 df."""
        spread = (self.history + self.period + (self.within - self.seed) / (folds * seeds)) / histories + self.seed / seeds
        means = np.where(self.shared, self.calendar + (self.period + (self.within - self.seed) / seeds) / histories, 0.0)
        return spread, means

    def test_se(self, histories, folds, seeds):
        """The held-out stage's standard error with `histories` x `folds` x `seeds`."""
        return np.sqrt(sum(self.test_parts(histories, folds, seeds)))

    def test_df(self, histories, folds, seeds):
        """The held-out stage's degrees of freedom (Welch-Satterthwaite of `test_parts`)."""
        spread, means = self.test_parts(histories, folds, seeds)
        num = (spread + means) ** 2
        with np.errstate(invalid="ignore", divide="ignore"):
            return num / (spread**2 / np.maximum(histories - 1.0, 1e-12)
                          + np.where(self.shared, means**2 / np.maximum(folds - 1.0, 1e-12), 0.0))


def history_mde(c: HistoryComponents, histories, folds, seeds, *, df, level, power: float, one_sided: bool = False):
    """The nested rule's minimum detectable effect with `histories` x `folds` x `seeds`, at the
    histories' degrees of freedom `df` (H - 1, or m (H - 1) shared across a family) and `level`
    (the first Holm step's), as `pooled_mde` states the one-history rule's."""
    with np.errstate(invalid="ignore", divide="ignore"):
        out = t_multiplier(df, level, power, one_sided) * c.se(histories, folds, seeds)
    out = np.where((np.asarray(seeds) > 0) & (np.asarray(histories) >= 2) & (np.asarray(folds) >= 1), out, np.nan)
    return float(out) if out.ndim == 0 else out


# -- one comparison: its design, its MDE, its floor, the seeds it needs --------------------------------


@dataclass(frozen=True)
class PowerInputs:
    """What the power statement of one comparison reads: its seeds and periods and the spreads they
    were measured with. `n` seeds (informative pairs; at K >= 2 per fold, a mean: not always whole),
    `sd` the spread of the (fold-averaged) per-seed differences, `p_div` the per-side divergence
    rate; with `folds` >= 2 the pooled components (`tau2` the period-to-period variance of the fold
    effects, `within` one seed's variance inside a fold as the fold's rank interval reads it,
    default `fold_sd`^2 x pi / 3, `seed` its part common to every fold) and `df` the pooled test's
    degrees of freedom (NaN: K - 1), `overlap` the folds' lambda (`PooledComponents.overlap`: folds
    that share training rows; 0: none); on one price history at K = 1, `market_se` the market-noise
    standard error of the difference (0: none, e.g. per-seed paths). Over `histories` >= 2 price
    histories the nested rule decides (`history_mde`): `history_tau2` the spread between histories,
    `tau2` and `within` a history's fold components, `seed` the part common to every history and
    fold, `calendar` the calendar part the histories share (`rules.histories`; NaN: on their own
    calendars, nothing shared), `df` the histories' degrees of freedom (NaN: H - 1), `n` the seeds per
    fold of a history."""

    n: float
    sd: float = math.nan
    p_div: float = 0.0
    folds: int = 1
    fold_sd: float = math.nan
    tau2: float = 0.0
    market_se: float = 0.0
    within: float = math.nan
    seed: float = 0.0
    df: float = math.nan
    overlap: float = 0.0
    histories: int = 1
    history_tau2: float = 0.0
    calendar: float = math.nan

    @property
    def pooled_over(self) -> bool:
        """Whether a pooled test decides (several periods, or several price histories)."""
        return self.folds >= 2 or self.histories >= 2

    def history_components(self) -> HistoryComponents:
        """The nested rule's components of the comparison (several price histories)."""
        c = self.components()
        return HistoryComponents(self.history_tau2 if math.isfinite(self.history_tau2) else 0.0, c.period, c.within,
                                 c.seed, self.calendar if math.isfinite(self.calendar) else 0.0,
                                 math.isfinite(self.calendar))

    @property
    def history_df(self) -> float:
        return float(self.df) if math.isfinite(self.df) and self.df > 0 else float(self.histories - 1)

    def with_seeds(self, n) -> "PowerInputs":
        """The same comparison at `n` seeds (the spreads are per seed, so they stay)."""
        return replace(self, n=n)

    def components(self) -> PooledComponents:
        """The pooled components of the comparison."""
        within = self.within if math.isfinite(self.within) else self.fold_sd**2 * RANK_EFFICIENCY
        tau2 = self.tau2 if math.isfinite(self.tau2) else 0.0
        return PooledComponents(tau2, within, self.seed if math.isfinite(self.seed) else 0.0, self.overlap)

    @property
    def pooled_df(self) -> float:
        return float(self.df) if math.isfinite(self.df) and self.df > 0 else float(self.folds - 1)


def history_inputs(n: float, histories: int, folds: int, c: HistoryComponents, df: float) -> PowerInputs:
    """The power inputs of a comparison the nested rule decides: `n` informative seeds per fold of a
    history, the components `c` (the calendar part included), the histories' degrees of freedom `df`."""
    return PowerInputs(n, folds=folds, tau2=c.period, within=c.within, seed=c.seed, df=df, histories=histories,
                       history_tau2=c.history, calendar=c.calendar if c.shared else math.nan)


def _z(level: float, power: float) -> float:
    return float(sps.norm.ppf(1 - level / 2) + sps.norm.ppf(power))


def mde(d: PowerInputs, level: float, power: float, *, one_sided: bool = False,
        history_level: float | None = None) -> float:
    """The MDE of the deciding rule for comparison `d` (module docstring) at `level` (the first
    Holm step of its family: two-sided for the seed rule, whose one-sided keep test is the
    two-sided one at twice the level; the pooled test's tails by `one_sided`) and `power`;
    `history_level` the level of the history's part, the market-noise part at K = 1 and the pooled
    test at K >= 2 (default `level`). +inf when the seeds cannot reach `level` at all (or, over
    periods, without a within-fold spread); NaN without a spread."""
    h_level = level if history_level is None else history_level
    if d.histories >= 2:  # the nested rule over price histories (`rules.histories`)
        if not (d.n > 0 and math.isfinite(d.components().within)):
            return math.inf if d.n > 0 else math.nan
        return float(history_mde(d.history_components(), d.histories, max(d.folds, 1), d.n, df=d.history_df,
                                 level=h_level, power=power, one_sided=one_sided))
    if d.folds >= 2:
        c = d.components()
        if not (d.n > 0 and math.isfinite(c.within)):
            return math.inf if d.n > 0 else math.nan
        return float(pooled_mde(c, d.folds, d.n, df=d.pooled_df, level=h_level, power=power, one_sided=one_sided))
    if d.n < 2 or not math.isfinite(d.sd):
        return math.nan
    seed = min_detectable_effect(d.sd, int(d.n), level, power, d.p_div)
    if d.market_se > 0 and math.isfinite(seed):
        return float(math.hypot(seed, _z(h_level, power) * d.market_se))
    return float(seed)


def floor(d: PowerInputs, level: float, power: float, *, one_sided: bool = False) -> float:
    """`mde` with infinitely many seeds: over periods (t + t) x tau / sqrt(K), which only more
    periods lower; on one history (K = 1) the market-noise part alone, which only more periods or
    histories lower (0 without a market-noise interval); over several price histories the nested
    rule's with seeds without end (the histories' and periods' spreads)."""
    if d.histories >= 2:
        return float(history_mde(d.history_components(), d.histories, max(d.folds, 1), math.inf, df=d.history_df,
                                 level=level, power=power, one_sided=one_sided))
    if d.folds >= 2:
        return float(mde_floor(d.components(), d.folds, df=d.pooled_df, level=level, power=power, one_sided=one_sided))
    return float(_z(level, power) * d.market_se)


def fewest_seeds(d: PowerInputs, target: float, level: float, power: float, *, one_sided: bool = False,
                 history_level: float | None = None, n_min: int = 2, n_max: int = N_MAX) -> float:
    """The one solver: the fewest seeds (informative pairs; per fold at K >= 2) in [n_min, n_max]
    whose `mde` is at most `target`: +inf when even `n_max` seeds are not enough (a floor of
    periods or market noise above the target, or too few seeds); NaN when it cannot be stated (no
    target, or no spread to plan with). The MDE falls with the seeds, so a bisection: O(log n_max)
    evaluations, bounded memory at any spread."""
    def at(n: int) -> float:
        return mde(d.with_seeds(n), level, power, one_sided=one_sided, history_level=history_level)

    if not (target > 0):
        return math.nan
    top = at(n_max)
    if top > target:  # +inf included: n_max seeds cannot reach the level
        return math.inf
    if not top > 0:  # NaN, or no spread at all: nothing to plan with
        return math.nan
    if at(n_min) <= target:
        return float(n_min)
    lo, hi = n_min, n_max
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if at(mid) <= target else (mid, hi)
    return float(hi)


def informative_of(seeds: int, tied: float) -> int:
    """The informative pairs `seeds` seeds are expected to give at tied share `tied` (ties carry
    no weight: rules.periods)."""
    return int(math.floor(seeds * (1.0 - tied) + 1e-9))


def seeds_to_run(informative: float, tied: float) -> float:
    """The fewest seeds expected to give `informative` informative pairs when a share `tied` of the
    pairs ties (NaN share: none; a share of 1: +inf, nothing is ever informative)."""
    if tied >= 1:
        return math.inf
    if not math.isfinite(informative):
        return informative
    tied = tied if math.isfinite(tied) else 0.0
    n = max(int(math.ceil(informative / (1.0 - tied) - 1e-9)), int(math.ceil(informative)))
    while informative_of(n, tied) < informative:
        n += 1
    return float(n)


def finite_interval(n: int, level: float) -> bool:
    """Whether n seeds can give a finite signed-rank interval at two-sided `level` (and so reach
    it at all: the smallest exact p, every sign equal, is 2 / 2^n)."""
    return n >= 2 and smallest_p(int(n)) <= level


def market_se_of(low: float, high: float, two_sided_level: float) -> float:
    """The market-noise standard error of a difference from its interval at `two_sided_level`
    (a normal interval's half-width over z); 0 where there is none (per-seed paths, or an interval
    not computed), so that `mde` is then the seed rule's."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return 0.0
    return float((high - low) / (2 * sps.norm.ppf(1 - two_sided_level / 2)))


def two_stage_mde(se1, df1, se2, df2, *, level: float, test_level: float, power: float, one_sided: bool = False):
    """The effect that reads `keep wired` through both stages with probability `power`: the
    discovery at `level` (the first Holm step; two-sided unless `one_sided`), standard error `se1`
    with `df1`, and the held-out stage one-sided at `test_level` (alpha / m), `se2` with `df2`, each
    stage's power read as its MDE reads it (a t shifted by effect / se) and the two taken as
    independent: P1 P2 = power. Positive dependence (the seeds' common part, a history's lasting
    part) only raises the joint power, so this is the larger, safe statement. Numbers or arrays
    (broadcast); NaN where a part is missing."""
    se1, df1, se2, df2 = np.broadcast_arrays(*(np.asarray(x, float) for x in (se1, df1, se2, df2)))
    ok = np.isfinite(se1) & np.isfinite(se2) & (se1 > 0) & (se2 > 0) & (df1 > 0) & (df2 > 0)
    d1, d2 = np.where(ok, df1, 1.0), np.where(ok, df2, 1.0)
    s1, s2 = np.where(ok, se1, 1.0), np.where(ok, se2, 1.0)
    c1 = sps.t.ppf(1 - (level if one_sided else level / 2), d1)
    c2 = sps.t.ppf(1 - test_level, d2)

    def joint(delta):
        return sps.t.cdf(delta / s1 - c1, d1) * sps.t.cdf(delta / s2 - c2, d2) - power

    lo = np.fmax(t_multiplier(d1, level, power, one_sided) * s1, t_multiplier(d2, test_level, power, True) * s2)
    hi = 2 * lo
    for _ in range(64):  # the joint power at 2^64 x the larger MDE: reached
        low = joint(hi) < 0
        if not low.any():
            break
        lo, hi = np.where(low, hi, lo), np.where(low, 2 * hi, hi)
    for _ in range(50):  # bisection: the joint power rises with the effect
        mid = 0.5 * (lo + hi)
        below = joint(mid) < 0
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    out = np.where(ok, hi, np.nan)
    return float(out) if out.ndim == 0 else out


def two_stage(d: PowerInputs, level: float, power: float, *, test_level: float | None = None,
              period_floor: float = 0.0, one_sided: bool = False) -> float:
    """`two_stage_mde` of comparison `d` at its design (the discovery's se from the components
    `mde` reads; the held-out stage's: one period per history, `HistoryComponents.test_se`, with the
    histories' spread on H - 1 df; on one history over folds the seeds' variance of the test effect
    plus tau^2, at least `period_floor` x one fold's seed variance, on the pooled df; at one period
    the seeds' variance plus the market-noise variance). `test_level` defaults to `level`."""
    t_level = level if test_level is None else test_level
    if d.histories >= 2:
        c = d.history_components()
        k = max(d.folds, 1)
        return two_stage_mde(c.se(d.histories, k, d.n), d.history_df, c.test_se(d.histories, k, d.n),
                             c.test_df(d.histories, k, d.n), level=level, test_level=t_level, power=power,
                             one_sided=one_sided)
    if d.folds >= 2:
        c = d.components()
        fold_var = (c.within - c.seed) / d.n
        se2 = math.sqrt(max(c.period, period_floor * fold_var) + fold_var / d.folds + c.seed / d.n)
        return two_stage_mde(c.se(d.folds, d.n), d.pooled_df, se2, d.pooled_df, level=level, test_level=t_level,
                             power=power, one_sided=one_sided)
    if d.n < 2 or not math.isfinite(d.sd):
        return math.nan
    one = mde(d, level, power, one_sided=one_sided)
    seed_var = d.sd**2 * RANK_EFFICIENCY / d.n
    return two_stage_mde(one / _z(level, power), 1e12, math.sqrt(seed_var + d.market_se**2), 1e12,
                         level=level, test_level=t_level, power=power, one_sided=one_sided)


@dataclass(frozen=True)
class PowerStatement:
    """A verdict row's power statement: the deciding rule's `mde`, its `floor` (infinitely many
    seeds; NaN where the seeds alone decide), the `seeds_needed` for the target (with the ties'
    share scaled in), the `note` in words (`advice`) and `two_stage` the MDE of a keep that must
    also pass the held-out stage (`two_stage`; NaN: not stated)."""

    mde: float
    floor: float
    seeds_needed: float
    note: str
    two_stage: float = math.nan


def statement(d: PowerInputs, target: float, level: float, power: float, *, tied: float = 0.0,
              one_sided: bool = False, test_level: float | None = None, period_floor: float = 0.0) -> PowerStatement:
    """The power statement of comparison `d` at the first Holm step `level` for the `target`
    (the ROPE): over periods the pooled test's with its floor and advice; on one history with a
    market-noise interval the seed and market-noise rule's with its floor; else the seed rule's
    (no floor, no note: the verdict's reason says how many seeds would detect the target); with
    the two-stage MDE (`two_stage` at `test_level`, the held-out stage's level, and `period_floor`)."""
    m = mde(d, level, power, one_sided=one_sided)
    needed = seeds_to_run(fewest_seeds(d, target, level, power, one_sided=one_sided), tied)
    both = two_stage(d, level, power, test_level=test_level, period_floor=period_floor, one_sided=one_sided)
    if d.pooled_over:
        fl = floor(d, level, power, one_sided=one_sided)
        return PowerStatement(m, fl, needed, advice(m, fl, target, needed, histories=d.histories >= 2), both)
    if d.market_se > 0:
        fl = floor(d, level, power)
        return PowerStatement(m, fl, needed, advice(m, fl, target, needed, market=True), both)
    return PowerStatement(m, math.nan, needed, "", both)
