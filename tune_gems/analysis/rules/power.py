"""The power of the rule that decides, in one place: its minimum detectable effect, the seeds it
needs, and the floor no seed count beats.

Why one module. Every statement of power (the MDE beside a verdict, the seeds that would reach
the ROPE, the floor of periods or of one history's market noise, the seeds `tune-gems confirm`
trains, the designs `tune-gems plan` prices, the MDE the calibrations check by simulation) must
be the power of the test that decides, in the same units, or a user buys seeds that cannot help.
So there is one description of a comparison (`PowerInputs`), one MDE (`mde`), one floor (`floor`),
one solver (`fewest_seeds`), one tie scaling (`seeds_to_run`) and one statement of them all for a
verdict row (`statement`).

The rule that decides, and so its MDE at power 1 - beta and first-Holm-step level a:

- **one period (K = 1)**: the seed rule's signed-rank test (`inference.min_detectable_effect`); on
  one price history the market-noise standard error adds its variance (the one-period gate), at
  `history_level` (selection-adjusted for a confirmation on the search's one history);
- **K >= 2 periods, or several price histories**: the pooled test, whose MDE is the effect its
  first contrast is kept from in a share `power` of the families the rule will see at that design
  (`pooled_mde`, `history_mde`): families drawn from the variance parts (`periods.PooledComponents`,
  `histories.HistoryComponents`) as the rule reads them and pooled by its own stage 2
  (`periods.pool_family`, `histories.pool_histories`). The pooled estimate moves with the effect,
  its se and df do not, so the MDE is the `power`-quantile of the effects the families keep from.
  Why draws, not (t_a + t_power) x se: the rule estimates the seeds' and the calendar's parts from
  few df and adds them whole, cuts the shared scale's df by the contrasts' correlation, weighs
  periods by estimated variances and tests the larger p of HKSJ and DerSimonian-Laird; a closed
  form on known variances misses all of it (docs/analysis.md "The MDE of a layout"). The floor,
  with the seeds' noise gone, is set by the spreads: above the target only more periods or
  histories help.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np
from scipy import stats as sps

from tune_gems.analysis.defaults import HELD_OUT_PERIOD_FLOOR, MIN_SHARED_PERIODS
from tune_gems.analysis.rules.decision import MIN_POOLED_DF, confirm_on_held_out
from tune_gems.analysis.rules.histories import HistoryComponents, HistoryData, one_calendar, own_calendars, pool_histories
from tune_gems.analysis.rules.periods import (
    FOLD_VAR_DF, RANK_EFFICIENCY, FoldData, PooledComponents, Pooling, pool_family, rank_overread, satterthwaite,
)
from tune_gems.analysis.rules.settings import KEEP
from tune_gems.analysis.text import format_number
from tune_gems.stats.inference import min_detectable_effect, smallest_p

N_MAX = 100_000
"""Largest seed count the solver searches (`fewest_seeds`; +inf beyond: effectively never)."""
DRAWS = 1024
"""Families drawn per design to state the pooled rule's power."""
DRAW_CONFIDENCE = 0.95
"""The MDE is stated where the drawn families keep in a share `power` + z x the share's standard
error over DRAWS (one-sided at this confidence): so the draws' own noise errs on the side of a
larger MDE, never a smaller one."""
DRAW_SEED = 2024
"""One seed for every design's draws: the same statement every time, and designs compared on the
same draws."""
SEEDS_WITHOUT_END = 1e9
"""The seed count the floor is stated at (the seeds' noise gone)."""


# -- the pooled rule at a design: families drawn from its parts, pooled by its own stage 2 --------------


def _chi2(rng, df, shape):
    """chi^2_df / df draws (1 where df is infinite)."""
    return rng.chisquare(df, shape) / df if math.isfinite(df) else np.ones(shape)


def _seed_anova(rng, cell: float, common: float, units: int, seeds: float, m: int):
    """(sigma_c^2, its share, its df) [DRAWS, m]: the seeds x units ANOVA (`periods.seed_anova`) of
    seeds whose per-unit values vary by `cell` around a part `common` to every unit."""
    p, q = seeds - 1.0, (units - 1.0) * (seeds - 1.0)
    ms_seed = (cell + units * common) * _chi2(rng, p, (DRAWS, m))
    ms_resid = cell * _chi2(rng, q, (DRAWS, m))
    sigma = np.maximum(0.0, (ms_seed - ms_resid) / units)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(sigma + ms_resid > 0, sigma / (sigma + ms_resid), 0.0)
        df = np.where(sigma > 0, (ms_seed - ms_resid) ** 2 / (ms_seed**2 / p + ms_resid**2 / q), np.inf)
    return sigma, share, df


def _first(pooled: dict, test: dict) -> dict:
    """The first contrast's pooled test (mu, se, se_fixed, df, df_fixed) and held-out stage
    (`test`: its effect, the seeds' variance and df, the period's variance and df)."""
    out = {key: np.asarray(pooled[key], float)[:, 0] for key in ("mu", "se", "se_fixed", "df", "df_fixed")}
    return out | {f"test_{key}": np.broadcast_to(np.asarray(value, float), (DRAWS, pooled["mu"].shape[1]))[:, 0]
                  for key, value in test.items()}


@lru_cache(maxsize=1024)
def _fold_draws(c: PooledComponents, periods: int, seeds: float, contrasts: int) -> dict:
    """The pooled rule over one history's `periods` folds of `seeds` informative pairs, on DRAWS
    families of `contrasts` contrasts with parts `c` and no effect (`pool_family`), and its
    held-out stage (one test period: its own period luck and the seeds' noise over the folds' members;
    its variance the seeds' and the pooled tau^2, at least HELD_OUT_PERIOD_FLOOR x a fold's seed
    variance, on DerSimonian-Laird's df as `decision.held_out_stage` reads them). The folds' overlap is a part
    common to them of lambda x the fold-level variance, which the rule corrects with NB's factor
    1 + K lambda."""
    rng = np.random.default_rng(DRAW_SEED)
    k, n, m = periods, seeds, contrasts
    own = c.within - c.seed
    fold_level = c.period + own / n
    seed_part = math.sqrt(c.seed / n) * rng.standard_normal((DRAWS, m, 1))
    theta = (math.sqrt(c.overlap * fold_level) * rng.standard_normal((DRAWS, m, 1))
             + math.sqrt(fold_level) * rng.standard_normal((DRAWS, m, k)) + seed_part)
    # the variance a fold's rank interval reads: over-read at few pairs, its spread a chi^2 on 0.8 (n - 1) df
    overread = rank_overread(round(n))
    var = overread * c.within / n * _chi2(rng, FOLD_VAR_DF * (n - 1), (DRAWS, m, k))
    sigma, share, seed_df = _seed_anova(rng, own, c.seed, k, n, m)
    fd = FoldData(theta, var, np.full(theta.shape, np.nan), np.full(theta.shape, float(n)), sigma / n, share, seed_df)
    with np.errstate(all="ignore"):  # every pair of folds at lambda: NB's factor 1 + K lambda at equal weights
        pooled = pool_family(fd, Pooling(share=m > 1), fold_corr=c.overlap / (1.0 + c.overlap))
        seeds_var = (c.seed + own / k) / n
        v_bar = (var * (1 - share[..., None])).mean(-1)
        floor = HELD_OUT_PERIOD_FLOOR * v_bar
        tau2 = pooled["tau2"]
        test = dict(effect=seed_part[..., 0] + math.sqrt(c.period + own / (k * n)) * rng.standard_normal((DRAWS, m)),
                    var=overread * seeds_var * _chi2(rng, FOLD_VAR_DF * (n - 1), (DRAWS, m)), df=FOLD_VAR_DF * (n - 1),
                    period_var=np.fmax(tau2, floor),
                    period_df=np.where(tau2 > floor, pooled["df"] * (tau2 / (tau2 + v_bar)) ** 2, FOLD_VAR_DF * k * (n - 1)))
        return _first(pooled, test)


@lru_cache(maxsize=1024)
def _history_draws(c: HistoryComponents, histories: int, folds: int, seeds: float, contrasts: int,
                   calendars: int = 1) -> dict:
    """The nested rule over `histories` x `folds` x `seeds` (`pool_histories`) on DRAWS families of
    `contrasts` contrasts with parts `c` and no effect, where `c.shared` on `calendars` calendars the
    histories split into (fold k of a calendar's histories one period) else each on its own, and its
    held-out stage (one test period per history, one per calendar where they share it; its variance the histories' spread on the test over H, the
    seeds' common part and on one calendar the spread of the shared periods' means, as
    `decision.held_out_stage` reads them). A history's effect is the mean of its fold effects; the variance
    the rule reads for it is pi / 3 x its seeds' sample variance / n (n - 1 df)."""
    rng = np.random.default_rng(DRAW_SEED)
    h, k, n, m = histories, folds, seeds, contrasts
    own = c.within - c.seed
    lasting = math.sqrt(c.history) * rng.standard_normal((DRAWS, m, h, 1))
    seed_part = math.sqrt(c.seed / n) * rng.standard_normal((DRAWS, m, 1, 1))
    group = np.arange(h) * max(min(calendars, h), 1) // h  # the calendar of each history
    calendar = (math.sqrt(c.calendar) * rng.standard_normal((DRAWS, m, group[-1] + 1, k + 1))[:, :, group] if c.shared
                else np.zeros((1, 1, 1, k + 1)))
    cells = (lasting + calendar[..., :k] + math.sqrt(c.period + own / n) * rng.standard_normal((DRAWS, m, h, k))
             + seed_part)
    var = (c.seed + own / k) / n * _chi2(rng, n - 1, (DRAWS, m, h))
    sigma, share, seed_df = _seed_anova(rng, own / k, c.seed, h, n, m)
    folds_data = tuple(FoldData(cells[:, :, j], *(None,) * 6) for j in range(h))
    hd = HistoryData(folds_data, cells.mean(-1), var, np.full(var.shape, n - 1.0), np.full(var.shape, np.nan),
                     np.full(var.shape, float(n)), sigma / n, seed_df, share,
                     group[:, None] * k + one_calendar(h, k) if c.shared else own_calendars(h, k))
    with np.errstate(all="ignore"):
        hp = pool_histories(hd, Pooling(share=m > 1))
        tests = (lasting[..., 0] + calendar[..., k] + seed_part[..., 0]
                 + math.sqrt(c.period + own / (k * n)) * rng.standard_normal((DRAWS, m, h)))
        spread = tests.var(-1, ddof=1) / h
        t_sigma, _, t_df = _seed_anova(rng, own / k, c.seed, h, n, m)
        cal = hp.calendar
        bounded = cal.periods >= MIN_SHARED_PERIODS
        test = dict(effect=tests.mean(-1), var=spread + t_sigma / n,
                    df=satterthwaite([spread, t_sigma / n], [h - 1.0, t_df]),
                    period_var=np.where(cal.shared, np.where(bounded, cal.means_var, np.nan), 0.0),
                    period_df=np.where(cal.shared, cal.means_df, np.inf))
        return _first(hp.pooled, test)


def keep_effects(draws: dict, level: float, one_sided: bool = False) -> np.ndarray:
    """Per drawn family the smallest effect its first contrast is kept from at `level` (the larger
    p of HKSJ and DerSimonian-Laird, as the rule tests): +inf where its pooled variance has fewer
    than MIN_POOLED_DF df."""
    tail = level if one_sided else level / 2
    with np.errstate(invalid="ignore"):
        hksj = sps.t.ppf(1 - tail, np.maximum(draws["df"], MIN_POOLED_DF)) * draws["se"]
        dff = np.where(np.isfinite(draws["df_fixed"]), draws["df_fixed"], 1e12)
        fixed = np.where(draws["se_fixed"] > 0, sps.t.ppf(1 - tail, dff) * draws["se_fixed"], 0.0)
        out = np.fmax(hksj, fixed) - draws["mu"]
    return np.where((draws["df"] >= MIN_POOLED_DF) & np.isfinite(out), out, np.inf)


def confirm_effects(draws: dict, test_level: float) -> np.ndarray:
    """Per drawn family the smallest effect its held-out stage confirms from, one-sided at
    `test_level` (`decision.confirm_on_held_out`: the test effect moves with the effect, its
    variance does not); +inf where it confirms nothing."""
    keep = np.full(draws["test_effect"].shape, KEEP, dtype=object)
    held = confirm_on_held_out(keep, draws["test_effect"], draws["test_var"], draws["test_period_var"], test_level,
                               test_df=draws["test_df"], period_df=draws["test_period_df"])
    return np.where(np.isfinite(held.low), -held.low, np.inf)


def _quantile(effects: np.ndarray, power: float) -> float:
    """The smallest effect kept in a share `power` of the families, raised by the draws' noise
    (DRAW_CONFIDENCE); +inf where too few can keep."""
    share = min(1.0, power + float(sps.norm.ppf(DRAW_CONFIDENCE)) * math.sqrt(power * (1 - power) / effects.size))
    if np.isfinite(effects).mean() < share:
        return math.inf
    return float(np.quantile(effects, share, method="higher"))


def _valid(*parts: float) -> bool:
    return all(math.isfinite(float(x)) and float(x) >= 0 for x in parts)


def pooled_mde(c: PooledComponents, periods: int, seeds: float, *, contrasts: int = 1, level: float, power: float,
               one_sided: bool = False) -> float:
    """`mde` of the pooled rule over one history's `periods` folds of `seeds` informative pairs with
    parts `c`, its scale shared by `contrasts`; NaN without parts or below 2 folds."""
    ok = periods >= 2 and seeds > 1 and _valid(c.period, c.within, c.seed, c.overlap)
    d = PowerInputs(seeds, folds=int(periods), tau2=c.period, within=c.within, seed=c.seed, contrasts=int(contrasts),
                    overlap=c.overlap)
    return mde(d, level, power, one_sided=one_sided) if ok else math.nan


def history_mde(c: HistoryComponents, histories: int, folds: int, seeds: float, *, contrasts: int = 1, level: float,
                power: float, one_sided: bool = False) -> float:
    """`mde` of the nested rule over `histories` x `folds` x `seeds` with parts `c`, the histories'
    scale shared by `contrasts`; NaN without parts or below 2 histories."""
    ok = histories >= 2 and folds >= 1 and seeds > 1 and _valid(c.history, c.period, c.within, c.seed, c.calendar)
    d = history_inputs(seeds, int(histories), int(folds), c, int(contrasts))
    return mde(d, level, power, one_sided=one_sided) if ok else math.nan


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


# -- one comparison: its design, its MDE, its floor, the seeds it needs --------------------------------


@dataclass(frozen=True)
class PowerInputs:
    """What the power statement of one comparison reads: its seeds and periods and the spreads they
    were measured with. `n` seeds (informative pairs; at K >= 2 per fold, a mean: not always whole),
    `sd` the spread of the (fold-averaged) per-seed differences, `p_div` the per-side divergence
    rate; with `folds` >= 2 the pooled components (`tau2` the period-to-period variance of the fold
    effects, `within` one seed's variance inside a fold as the fold's rank interval reads it,
    default `fold_sd`^2 x pi / 3, `seed` its part common to every fold), `contrasts` the family's
    contrasts that share the pooled scale with it (1: pooled on its own), `overlap` the folds'
    lambda (`PooledComponents.overlap`: folds that share training rows; 0: none); on one price
    history at K = 1, `market_se` the market-noise standard error of the difference (0: none, e.g.
    per-seed paths). Over `histories` >= 2 price histories the nested rule decides (`history_mde`):
    `history_tau2` the spread between histories, `tau2` and `within` a history's fold components,
    `seed` the part common to every history and fold, `calendar` the calendar part the histories
    share (`histories.calendar_part`; NaN: on their own calendars, nothing shared) on `calendars` calendars,
    `n` the seeds per fold of a history."""

    n: float
    sd: float = math.nan
    p_div: float = 0.0
    folds: int = 1
    fold_sd: float = math.nan
    tau2: float = 0.0
    market_se: float = 0.0
    within: float = math.nan
    seed: float = 0.0
    contrasts: int = 1
    overlap: float = 0.0
    histories: int = 1
    history_tau2: float = 0.0
    calendar: float = math.nan
    calendars: int = 1

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

    def with_seeds(self, n) -> "PowerInputs":
        """The same comparison at `n` seeds (the spreads are per seed, so they stay)."""
        return replace(self, n=n)

    def components(self) -> PooledComponents:
        """The pooled components of the comparison."""
        within = self.within if math.isfinite(self.within) else self.fold_sd**2 * RANK_EFFICIENCY
        tau2 = self.tau2 if math.isfinite(self.tau2) else 0.0
        return PooledComponents(tau2, within, self.seed if math.isfinite(self.seed) else 0.0, self.overlap)


def history_inputs(n: float, histories: int, folds: int, c: HistoryComponents, contrasts: int,
                   calendars: int = 1) -> PowerInputs:
    """The power inputs of a comparison the nested rule decides: `n` informative seeds per fold of a
    history, the components `c` (the calendar part included, on `calendars` calendars where shared),
    the `contrasts` sharing its scale."""
    return PowerInputs(n, folds=folds, tau2=c.period, within=c.within, seed=c.seed, contrasts=contrasts,
                       histories=histories, history_tau2=c.history, calendar=c.calendar if c.shared else math.nan,
                       calendars=calendars)


def _z(level: float, power: float) -> float:
    return float(sps.norm.ppf(1 - level / 2) + sps.norm.ppf(power))


def _draws_of(d: PowerInputs) -> dict | None:
    """The pooled rule's draws at the comparison's design (None: not pooled, or no parts)."""
    if d.histories >= 2:
        c = d.history_components()
        if not (d.n > 1 and _valid(c.history, c.period, c.within, c.seed, c.calendar)):
            return None
        return _history_draws(c, d.histories, max(d.folds, 1), float(d.n), max(d.contrasts, 1), d.calendars)
    c = d.components()
    if not (d.folds >= 2 and d.n > 1 and _valid(c.period, c.within, c.seed, c.overlap)):
        return None
    return _fold_draws(c, d.folds, float(d.n), max(d.contrasts, 1))


@lru_cache(maxsize=4096)
def _effects(d: PowerInputs, level: float, test_level: float | None, one_sided: bool) -> np.ndarray | None:
    """Per drawn family the effect its first contrast is kept from at `level` (`keep_effects`), or
    with `test_level` kept and confirmed by the held-out stage (`confirm_effects`); None: no draws."""
    draws = _draws_of(d)
    if draws is None:
        return None
    first = keep_effects(draws, level, one_sided)
    return first if test_level is None else np.fmax(first, confirm_effects(draws, test_level))


def mde(d: PowerInputs, level: float, power: float, *, one_sided: bool = False,
        history_level: float | None = None) -> float:
    """The MDE of the deciding rule for comparison `d` (module docstring) at `level` (the first
    Holm step of its family: two-sided for the seed rule, whose one-sided keep test is the
    two-sided one at twice the level; the pooled test's tails by `one_sided`) and `power`;
    `history_level` the level of the history's part, the market-noise part at K = 1 and the pooled
    test at K >= 2 (default `level`). +inf when the seeds cannot reach `level` at all (or, over
    periods, without a within-fold spread); NaN without a spread."""
    h_level = level if history_level is None else history_level
    if d.pooled_over:
        if not (d.n > 0 and math.isfinite(d.components().within)):
            return math.inf if d.n > 0 else math.nan
        effects = _effects(d, h_level, None, one_sided)
        return math.inf if effects is None else _quantile(effects, power)
    if d.n < 2 or not math.isfinite(d.sd):
        return math.nan
    seed = min_detectable_effect(d.sd, int(d.n), level, power, d.p_div)
    if d.market_se > 0 and math.isfinite(seed):
        return float(math.hypot(seed, _z(h_level, power) * d.market_se))
    return float(seed)


def floor(d: PowerInputs, level: float, power: float, *, one_sided: bool = False) -> float:
    """`mde` with the seeds' noise gone (SEEDS_WITHOUT_END): over periods or histories their
    spreads', which only more periods (or histories) lower; on one history (K = 1) the market-noise
    part alone (0 without a market-noise interval)."""
    if d.pooled_over:
        return mde(d.with_seeds(SEEDS_WITHOUT_END), level, power, one_sided=one_sided)
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


def two_stage(d: PowerInputs, level: float, power: float, *, test_level: float | None = None,
              one_sided: bool = False) -> float:
    """The effect that reads `keep wired` through both stages with probability `power`: the
    discovery at `level` and the held-out stage one-sided at `test_level` (default `level`), over
    periods or histories in the same drawn families (`mde`'s; a history's lasting part and the seeds'
    common part are in both stages); at one period the seed rule's keep read as a normal test (its
    MDE's se) and the held-out stage on the seeds' plus the market-noise variance, independent."""
    t_level = level if test_level is None else test_level
    if d.pooled_over:
        effects = _effects(d, level, t_level, one_sided)
        return math.nan if effects is None else _quantile(effects, power)
    if d.n < 2 or not math.isfinite(d.sd):
        return math.nan
    z = np.random.default_rng(DRAW_SEED).standard_normal((2, DRAWS))
    se1 = mde(d, level, power, one_sided=one_sided) / _z(level, power)
    se2 = math.sqrt(d.sd**2 * RANK_EFFICIENCY / d.n + d.market_se**2)
    return _quantile(np.fmax(se1 * (sps.norm.ppf(1 - level / 2) - z[0]), se2 * (sps.norm.ppf(1 - t_level) - z[1])), power)


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
              one_sided: bool = False, test_level: float | None = None) -> PowerStatement:
    """The power statement of comparison `d` at the first Holm step `level` for the `target`
    (the ROPE): over periods the pooled test's with its floor and advice; on one history with a
    market-noise interval the seed and market-noise rule's with its floor; else the seed rule's
    (no floor, no note: the verdict's reason says how many seeds would detect the target); with
    the two-stage MDE (`two_stage` at `test_level`, the held-out stage's level)."""
    m = mde(d, level, power, one_sided=one_sided)
    needed = seeds_to_run(fewest_seeds(d, target, level, power, one_sided=one_sided), tied)
    both = two_stage(d, level, power, test_level=test_level, one_sided=one_sided)
    if d.pooled_over:
        fl = floor(d, level, power, one_sided=one_sided)
        return PowerStatement(m, fl, needed, advice(m, fl, target, needed, histories=d.histories >= 2), both)
    if d.market_se > 0:
        fl = floor(d, level, power)
        return PowerStatement(m, fl, needed, advice(m, fl, target, needed, market=True), both)
    return PowerStatement(m, math.nan, needed, "", both)
