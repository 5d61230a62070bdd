"""The minimum detectable effect of the rule that decides, for one comparison (`PowerInputs`).

Why its own module: the factor table (`factors.py`) states an MDE per row, and `tune-gems
confirm` chooses its seeds so that the confirmation's MDE is at most the discovery's; both must
mean the same thing by "MDE" (the same rule, the same units: the verdict metric's Sharpe units),
so both call `rule_mde` with the components of the comparison (the spread of the per-seed
differences, the seeds, the periods and their spread, the market-noise standard error) and the
level of the decisive test. What it states is the shift the deciding rule detects with
probability `power`:

- **one period (K = 1)**: the seed rule's signed-rank test (`inference.min_detectable_effect`,
  the t quantiles with n - 1 df times the rank test's efficiency, divergence accounted for); on
  one price history the verdict must also hold for the combined seed + market-noise interval
  (the one-period gate), so the market-noise standard error adds its variance:
  sqrt(seed MDE^2 + ((z_level + z_power) x market se)^2), the market part at `history_level`
  (a confirmation on the search's one history takes it at the selection-adjusted level);
- **K >= 2 periods**: the pooled test decides (`rules.periods.decide_periods`; the seed test is no
  second gate), so the MDE is the pooled rule's own, `rules.power.pooled_mde` on the comparison's
  pooled components (`rules.power.PooledComponents`: the period spread tau^2, one seed's variance
  inside a fold `within` and its part common to every fold `seed`, as the verdict row states them
  in `tau2`, `var_within` and `var_seed`) with the rule's degrees of freedom (`pooled_df`, K - 1
  when not stated): the number the gem verdicts print. As n grows it falls to the floor
  (`rules.power.mde_floor`, (t + t) x tau / sqrt(K)) that no seed count beats; the pooled test
  at `history_level` (the periods are the history's part on one price history).

These are large-sample statements of a rule that is itself checked by simulation (the
calibrations of docs/analysis.md); they say which design can decide, not the exact power.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from scipy import stats as sps

from tune_gems.analysis.rules.power import PooledComponents, mde_floor, pooled_mde
from tune_gems.stats.inference import min_detectable_effect, smallest_p

RANK_EFFICIENCY = math.pi / 3.0
"""Variance ratio of the signed-rank test to the t-test under normal differences (the factor
`inference.min_detectable_effect` uses): a fold's rank interval is this much wider in variance;
`within` from a fold spread where a verdict row does not state it."""


@dataclass(frozen=True)
class PowerInputs:
    """What the power statement of one comparison reads: its seeds and periods and the spreads
    they were measured with ("design" in the analysis is the experiment's, what was trained).
    `n` seeds (units; at K >= 2 informative pairs per fold), `sd` the spread of the
    (fold-averaged) per-seed differences, `p_div` the per-side divergence rate; with `folds` >= 2
    the pooled components (`tau2` the period-to-period variance of the fold effects, `within`
    one seed's variance inside a fold as the fold's rank interval reads it, default
    `fold_sd`^2 x pi / 3, `seed` its part common to every fold) and `df` the pooled test's
    degrees of freedom (NaN: K - 1); on one price history at K = 1, `market_se` the market-noise
    standard error of the difference (0: none, e.g. per-seed paths)."""

    n: int
    sd: float
    p_div: float = 0.0
    folds: int = 1
    fold_sd: float = math.nan
    tau2: float = 0.0
    market_se: float = 0.0
    within: float = math.nan
    seed: float = 0.0
    df: float = math.nan

    def with_seeds(self, n: int) -> "PowerInputs":
        """The same comparison at `n` seeds (the spreads are per seed, so they stay)."""
        return replace(self, n=int(n))

    def components(self) -> PooledComponents:
        """The pooled components of the comparison (`rules.power`)."""
        within = self.within if math.isfinite(self.within) else self.fold_sd**2 * RANK_EFFICIENCY
        tau2 = self.tau2 if math.isfinite(self.tau2) else 0.0
        return PooledComponents(tau2, within, self.seed if math.isfinite(self.seed) else 0.0)

    @property
    def pooled_df(self) -> float:
        return float(self.df) if math.isfinite(self.df) and self.df > 0 else float(self.folds - 1)


def _z(level: float, power: float) -> float:
    return float(sps.norm.ppf(1 - level / 2) + sps.norm.ppf(power))


def pooled_rule_mde(d: PowerInputs, level: float, power: float) -> float:
    """The pooled test's MDE at K = `d.folds` >= 2 (`rules.power.pooled_mde`, module docstring);
    +inf below two folds or without a within-fold spread."""
    c = d.components()
    if d.folds < 2 or d.n < 2 or not math.isfinite(c.within):
        return math.inf
    return float(pooled_mde(c, d.folds, d.n, df=d.pooled_df, level=level, power=power))


def period_floor(d: PowerInputs, level: float, power: float) -> float:
    """The pooled MDE with infinitely many seeds (`rules.power.mde_floor`): what only more periods
    lower (0 without a period spread; +inf below two folds)."""
    if d.folds < 2:
        return math.inf
    return float(mde_floor(d.components(), d.folds, df=d.pooled_df, level=level, power=power))


def rule_mde(d: PowerInputs, level: float, power: float, *, history_level: float | None = None) -> float:
    """The MDE of the deciding rule for comparison `d` at two-sided `level` (the first Holm step of
    its family) and `power` (module docstring); `history_level` the level of the history's part,
    the market-noise part at K = 1 and the pooled test at K >= 2 (default `level`). +inf when n
    seeds cannot reach `level` at all; NaN without a spread."""
    h_level = level if history_level is None else history_level
    if d.folds >= 2:
        return pooled_rule_mde(d, h_level, power) if d.n >= 2 else math.nan
    if d.n < 2 or not math.isfinite(d.sd):
        return math.nan
    seed = min_detectable_effect(d.sd, d.n, level, power, d.p_div)
    if d.market_se > 0 and math.isfinite(seed):
        return float(math.hypot(seed, _z(h_level, power) * d.market_se))
    return float(seed)


def market_se_of(low: float, high: float, two_sided_level: float) -> float:
    """The market-noise standard error of a difference from its interval at `two_sided_level`
    (a normal interval's half-width over z); 0 where there is none (per-seed paths, or an
    interval not computed), so that `rule_mde` is then the seed rule's."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return 0.0
    return float((high - low) / (2 * sps.norm.ppf(1 - two_sided_level / 2)))


def history_floor(market_se: float, level: float, power: float) -> float:
    """On one price history (K = 1): `rule_mde` with infinitely many seeds, the market-noise
    part alone, which only more periods or histories lower."""
    return float(_z(level, power) * market_se)


def finite_interval(n: int, level: float) -> bool:
    """Whether n seeds can give a finite signed-rank interval at two-sided `level` (and so reach
    it at all: the smallest exact p, every sign equal, is 2 / 2^n)."""
    return n >= 2 and smallest_p(int(n)) <= level


def seeds_for(d: PowerInputs, target: float, level: float, power: float, *, history_level: float | None = None,
              n_min: int = 2, n_max: int = 4096) -> int | None:
    """The fewest seeds in [n_min, n_max] whose `rule_mde` is at most `target` (and finite), or
    None when none does (a floor of periods or market noise above it, or n_max too few). The MDE
    falls with n, so a bisection."""
    def ok(n: int) -> bool:
        m = rule_mde(d.with_seeds(n), level, power, history_level=history_level)
        return math.isfinite(m) and m <= target

    if not ok(n_max):
        return None
    lo, hi = n_min, n_max
    if ok(lo):
        return lo
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi
