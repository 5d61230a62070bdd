"""The power of the rule that decides, in one place: its MDE, the seeds it needs and the floor no seed count beats.
Every statement of power (beside a verdict, in `tune-gems confirm` and `tune-gems plan`, in the calibrations) must be
the deciding test's, or a user buys seeds that cannot help: one `PowerInputs`, one `mde`, one `floor`, one solver
(`fewest_seeds`), one `statement` for a verdict row. At one period: the seed rule's signed-rank MDE (with the
market-noise variance on one history). Over periods or histories: the `power`-quantile of the effects the first contrast
is kept from in families drawn from the variance parts and pooled by the rule's own stage 2 (`pool_family`,
`pool_histories`), since the rule estimates its parts from few df, cuts the shared scale's df and tests the larger p of
HKSJ and DerSimonian-Laird, which a closed form on known variances misses (docs/analysis.md "The MDE of a layout")."""

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
"""The kept share is raised by z x its se over DRAWS: the draws' noise errs towards a larger MDE."""
DRAW_SEED = 2024
"""One seed for every design's draws: the same statement every time, designs compared on the same draws."""
SEEDS_WITHOUT_END = 1e9
"""The seed count the floor is stated at (the seeds' noise gone)."""


# -- the pooled rule at a design: families drawn from its parts, pooled by its own stage 2 --------------


def _chi2(rng, df, shape):
    """chi^2_df / df draws (1 where df is infinite)."""
    return rng.chisquare(df, shape) / df if math.isfinite(df) else np.ones(shape)


def _seed_anova(rng, cell: float, common: float, units: int, seeds: float, m: int):
    """(sigma_c^2, its share, its df) [DRAWS, m] of the seeds x units ANOVA (`periods.seed_anova`)."""
    p, q = seeds - 1.0, (units - 1.0) * (seeds - 1.0)
    ms_seed = (cell + units * common) * _chi2(rng, p, (DRAWS, m))
    ms_resid = cell * _chi2(rng, q, (DRAWS, m))
    sigma = np.maximum(0.0, (ms_seed - ms_resid) / units)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(sigma + ms_resid > 0, sigma / (sigma + ms_resid), 0.0)
        df = np.where(sigma > 0, (ms_seed - ms_resid) ** 2 / (ms_seed**2 / p + ms_resid**2 / q), np.inf)
    return sigma, share, df


def _first(pooled: dict, test: dict) -> dict:
    """The first contrast's pooled test and held-out stage (`test`)."""
    out = {key: np.asarray(pooled[key], float)[:, 0] for key in ("mu", "se", "se_fixed", "df", "df_fixed")}
    return out | {f"test_{key}": np.broadcast_to(np.asarray(value, float), (DRAWS, pooled["mu"].shape[1]))[:, 0]
                  for key, value in test.items()}


@lru_cache(maxsize=1024)
def _fold_draws(c: PooledComponents, periods: int, seeds: float, contrasts: int) -> dict:
    """The pooled rule over `periods` folds of `seeds` pairs on DRAWS null families of parts `c`,
    with the held-out stage as `decision.held_out_stage` reads it; the folds' overlap a part common
    to them (lambda x the fold-level variance)."""
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
    """The nested rule over `histories` x `folds` x `seeds` on DRAWS null families of parts `c` (`c.shared`: on
    `calendars` calendars), with the held-out stage as `decision.held_out_stage` reads it."""
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
    """Per drawn family the smallest effect its first contrast is kept from at `level` (+inf below MIN_POOLED_DF df)."""
    tail = level if one_sided else level / 2
    with np.errstate(invalid="ignore"):
        hksj = sps.t.ppf(1 - tail, np.maximum(draws["df"], MIN_POOLED_DF)) * draws["se"]
        dff = np.where(np.isfinite(draws["df_fixed"]), draws["df_fixed"], 1e12)
        fixed = np.where(draws["se_fixed"] > 0, sps.t.ppf(1 - tail, dff) * draws["se_fixed"], 0.0)
        out = np.fmax(hksj, fixed) - draws["mu"]
    return np.where((draws["df"] >= MIN_POOLED_DF) & np.isfinite(out), out, np.inf)


def confirm_effects(draws: dict, test_level: float) -> np.ndarray:
    """Per drawn family the smallest effect the held-out stage confirms one-sided at `test_level` (+inf: none)."""
    keep = np.full(draws["test_effect"].shape, KEEP, dtype=object)
    held = confirm_on_held_out(keep, draws["test_effect"], draws["test_var"], draws["test_period_var"], test_level,
                               test_df=draws["test_df"], period_df=draws["test_period_df"])
    return np.where(np.isfinite(held.low), -held.low, np.inf)


def _quantile(effects: np.ndarray, power: float) -> float:
    """The effect kept in a share `power` of the families, raised by the draws' noise (DRAW_CONFIDENCE)."""
    share = min(1.0, power + float(sps.norm.ppf(DRAW_CONFIDENCE)) * math.sqrt(power * (1 - power) / effects.size))
    if np.isfinite(effects).mean() < share:
        return math.inf
    return float(np.quantile(effects, share, method="higher"))


def _valid(*parts: float) -> bool:
    return all(math.isfinite(float(x)) and float(x) >= 0 for x in parts)


def pooled_mde(c: PooledComponents, periods: int, seeds: float, *, contrasts: int = 1, level: float, power: float,
               one_sided: bool = False) -> float:
    """`mde` of the pooled rule over one history's folds; NaN without parts or below 2 folds."""
    ok = periods >= 2 and seeds > 1 and _valid(c.period, c.within, c.seed, c.overlap)
    d = PowerInputs(seeds, folds=int(periods), tau2=c.period, within=c.within, seed=c.seed, contrasts=int(contrasts),
                    overlap=c.overlap)
    return mde(d, level, power, one_sided=one_sided) if ok else math.nan


def history_mde(c: HistoryComponents, histories: int, folds: int, seeds: float, *, contrasts: int = 1, level: float,
                power: float, one_sided: bool = False) -> float:
    """`mde` of the nested rule over `histories` x `folds` x `seeds`; NaN without parts or below 2 histories."""
    ok = histories >= 2 and folds >= 1 and seeds > 1 and _valid(c.history, c.period, c.within, c.seed, c.calendar)
    d = history_inputs(seeds, int(histories), int(folds), c, int(contrasts))
    return mde(d, level, power, one_sided=one_sided) if ok else math.nan


def seeds_would_detect(seeds: float, target: float) -> str:
    """The seed rule's power statement in words."""
    return f"about {format_number(seeds, '.0f', missing='nan')} seeds would detect +-{target:g}"


def advice(mde: float, floor: float, target: float, seeds_needed: float, *, market: bool = False,
           histories: bool = False) -> str:
    """What the power statement implies, in words: the seeds that would reach the target, or that only more periods
    (histories) would; on one history (`market`) that no seed count beats its market noise."""
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
    """What the power statement of one comparison reads. `n` informative pairs (per fold at K >= 2), `sd` their spread,
    `p_div` the divergence rate; over folds the pooled components (`tau2`, `within`, `seed`, `overlap`:
    `periods.PooledComponents`) and the `contrasts` sharing the scale; `market_se` one history's market-noise se (0:
    none); over `histories` >= 2 the nested rule's (`history_tau2`, `calendar`: NaN on own calendars, `calendars`)."""

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
        """Whether a pooled test decides."""
        return self.folds >= 2 or self.histories >= 2

    def history_components(self) -> HistoryComponents:
        """The nested rule's components."""
        c = self.components()
        return HistoryComponents(self.history_tau2 if math.isfinite(self.history_tau2) else 0.0, c.period, c.within,
                                 c.seed, self.calendar if math.isfinite(self.calendar) else 0.0,
                                 math.isfinite(self.calendar))

    def with_seeds(self, n) -> "PowerInputs":
        """The same comparison at `n` seeds (the spreads are per seed)."""
        return replace(self, n=n)

    def components(self) -> PooledComponents:
        """The pooled components."""
        within = self.within if math.isfinite(self.within) else self.fold_sd**2 * RANK_EFFICIENCY
        tau2 = self.tau2 if math.isfinite(self.tau2) else 0.0
        return PooledComponents(tau2, within, self.seed if math.isfinite(self.seed) else 0.0, self.overlap)


def history_inputs(n: float, histories: int, folds: int, c: HistoryComponents, contrasts: int,
                   calendars: int = 1) -> PowerInputs:
    """The power inputs of a comparison the nested rule decides, from its components `c`."""
    return PowerInputs(n, folds=folds, tau2=c.period, within=c.within, seed=c.seed, contrasts=contrasts,
                       histories=histories, history_tau2=c.history, calendar=c.calendar if c.shared else math.nan,
                       calendars=calendars)


def _z(level: float, power: float) -> float:
    return float(sps.norm.ppf(1 - level / 2) + sps.norm.ppf(power))


def _draws_of(d: PowerInputs) -> dict | None:
    """The pooled rule's draws at `d`'s design (None: not pooled, or no parts)."""
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
    """Per drawn family the effect kept at `level`, with `test_level` also confirmed by the held-out stage."""
    draws = _draws_of(d)
    if draws is None:
        return None
    first = keep_effects(draws, level, one_sided)
    return first if test_level is None else np.fmax(first, confirm_effects(draws, test_level))


def mde(d: PowerInputs, level: float, power: float, *, one_sided: bool = False,
        history_level: float | None = None) -> float:
    """The MDE of the deciding rule for `d` at the first Holm step `level` and `power`; `history_level` the history
    part's level (default `level`). +inf when the seeds cannot reach `level`; NaN without a spread."""
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
    """`mde` with the seeds' noise gone: over periods their spread's, on one history the market-noise part alone."""
    if d.pooled_over:
        return mde(d.with_seeds(SEEDS_WITHOUT_END), level, power, one_sided=one_sided)
    return float(_z(level, power) * d.market_se)


def fewest_seeds(d: PowerInputs, target: float, level: float, power: float, *, one_sided: bool = False,
                 history_level: float | None = None, n_min: int = 2, n_max: int = N_MAX) -> float:
    """The fewest seeds in [n_min, n_max] whose `mde` is at most `target` (bisection: the MDE falls
    with the seeds); +inf when `n_max` is not enough, NaN when it cannot be stated."""
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
    """The informative pairs `seeds` seeds give at tied share `tied`."""
    return int(math.floor(seeds * (1.0 - tied) + 1e-9))


def seeds_to_run(informative: float, tied: float) -> float:
    """The fewest seeds expected to give `informative` informative pairs at tied share `tied`."""
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
    """Whether n seeds can reach two-sided `level` at all (the smallest exact p is 2 / 2^n)."""
    return n >= 2 and smallest_p(int(n)) <= level


def market_se_of(low: float, high: float, two_sided_level: float) -> float:
    """The market-noise se of a difference from its interval (0 without one: `mde` is the seed rule's)."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return 0.0
    return float((high - low) / (2 * sps.norm.ppf(1 - two_sided_level / 2)))


def two_stage(d: PowerInputs, level: float, power: float, *, test_level: float | None = None,
              one_sided: bool = False) -> float:
    """The effect that reads `keep wired` through both stages with probability `power`: over periods or histories in
    `mde`'s drawn families; at one period the two stages as independent normal tests."""
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
    """A verdict row's power statement (`statement`): `floor` NaN where the seeds alone decide."""

    mde: float
    floor: float
    seeds_needed: float
    note: str
    two_stage: float = math.nan


def statement(d: PowerInputs, target: float, level: float, power: float, *, tied: float = 0.0,
              one_sided: bool = False, test_level: float | None = None) -> PowerStatement:
    """The power statement of `d` at the first Holm step `level` for the `target` (the ROPE), with
    the two-stage MDE at `test_level`."""
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
