"""The minimum detectable effect of the rule that decides, for one comparison's design.

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
- **K >= 2 periods**: the period rule needs the seed test on the fold-averaged differences AND
  the pooled (HKSJ) test, t with K - 1 df at the level; its MDE is the larger of the two, the
  pooled one (t_{K-1} quantiles) x sqrt((fold se^2 + tau^2) / K), fold se = fold sd x
  sqrt(pi/3) / sqrt(n) (the rank interval's width per fold). As n grows it falls to the floor
  (t + t) x tau / sqrt(K) that no seed count beats (`period_floor`); the pooled part at
  `history_level` (the periods are the history's part on one price history).

These are large-sample statements of a rule that is itself checked by simulation (the
calibrations of docs/analysis.md); they say which design can decide, not the exact power.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy import stats as sps

from tune_gems.stats.inference import min_detectable_effect, smallest_p

RANK_EFFICIENCY = math.pi / 3.0
"""Variance ratio of the signed-rank test to the t-test under normal differences (the factor
`inference.min_detectable_effect` uses): a fold's rank interval is this much wider in variance."""


@dataclass(frozen=True)
class Design:
    """One comparison's design as the rule sees it: `n` seeds (units), `sd` the spread of the
    (fold-averaged) per-seed differences, `p_div` the per-side divergence rate; with `folds` >= 2
    `fold_sd` the spread inside one fold and `tau2` the period-to-period variance of the fold
    effects; on one price history at K = 1, `market_se` the market-noise standard error of the
    difference (0: none, e.g. per-seed paths)."""

    n: int
    sd: float
    p_div: float = 0.0
    folds: int = 1
    fold_sd: float = math.nan
    tau2: float = 0.0
    market_se: float = 0.0

    def with_seeds(self, n: int) -> "Design":
        """The same comparison at `n` seeds (the spreads are per seed, so they stay)."""
        from dataclasses import replace

        return replace(self, n=int(n))


def _z(level: float, power: float) -> float:
    return float(sps.norm.ppf(1 - level / 2) + sps.norm.ppf(power))


def pooled_mde(d: Design, level: float, power: float) -> float:
    """The pooled test's MDE at K = `d.folds` >= 2 (module docstring); +inf below two folds or
    without a spread."""
    if d.folds < 2 or d.n < 2 or not math.isfinite(d.fold_sd):
        return math.inf
    df = d.folds - 1
    fold_var = d.fold_sd**2 * RANK_EFFICIENCY / d.n
    tau2 = d.tau2 if math.isfinite(d.tau2) else 0.0
    se = math.sqrt((fold_var + tau2) / d.folds)
    return float((sps.t.ppf(1 - level / 2, df) + sps.t.ppf(power, df)) * se)


def period_floor(d: Design, level: float, power: float) -> float:
    """The pooled MDE with infinitely many seeds: what only more periods lower (0 without a
    period spread; +inf below two folds)."""
    if d.folds < 2:
        return math.inf
    df = d.folds - 1
    tau2 = d.tau2 if math.isfinite(d.tau2) else 0.0
    return float((sps.t.ppf(1 - level / 2, df) + sps.t.ppf(power, df)) * math.sqrt(tau2 / d.folds))


def rule_mde(d: Design, level: float, power: float, *, history_level: float | None = None) -> float:
    """The MDE of the deciding rule for design `d` at two-sided `level` (the first Holm step of
    its family) and `power` (module docstring); `history_level` the level of the history's part,
    the market-noise part at K = 1 and the pooled test at K >= 2 (default `level`). +inf when n
    seeds cannot reach `level` at all; NaN without a spread."""
    if d.n < 2 or not math.isfinite(d.sd):
        return math.nan
    seed = min_detectable_effect(d.sd, d.n, level, power, d.p_div)
    h_level = level if history_level is None else history_level
    if d.folds >= 2:
        return max(seed, pooled_mde(d, h_level, power))
    if d.market_se > 0 and math.isfinite(seed):
        return float(math.hypot(seed, _z(h_level, power) * d.market_se))
    return float(seed)


def finite_interval(n: int, level: float) -> bool:
    """Whether n seeds can give a finite signed-rank interval at two-sided `level` (and so reach
    it at all: the smallest exact p, every sign equal, is 2 / 2^n)."""
    return n >= 2 and smallest_p(int(n)) <= level


def seeds_for(d: Design, target: float, level: float, power: float, *, history_level: float | None = None,
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
