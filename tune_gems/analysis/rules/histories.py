"""The nested rule for several price histories: periods nested in histories, histories crossed with
the calendar where they share it.

Why. With H >= 2 price histories (the columns of a multi-asset file, or files of other eras or
markets) the replication unit is the history: one history's folds are periods of one market, and
what they share (its regime, the training rows its folds overlap on) is in none of their spreads.
So the rule pools in two stages and reads the spread between histories:

1. **each history's effect** is the seed-level effect of its seeds' differences averaged over its
   folds (`held_out_rule.seed_level_effect`: Hodges-Lehmann over the informative seeds, its squared
   standard error pi / 3 x their sample variance / n, n - 1 df): one period per history is a history's
   effect like any other, and the efficient design (many histories, one fold each) is decided. Its
   variance holds only the seeds' noise: everything a history's folds share (its period luck, the
   training rows of overlapping folds) varies between histories and is read in stage 2, so no
   correction by an assumed correlation (Nadeau-Bengio) enters here;
2. **the histories' effects over the histories**, `pooling.pool_family` with the histories as its
   periods (DerSimonian-Laird tau_H^2, the HKSJ scale with the histories' degrees of freedom, H - 1
   or m (H - 1) shared across the family where the contrasts agree, never narrower than
   DerSimonian-Laird), then the period rule with Holm over the family (`periods.decide_periods`: a
   sign change between histories shown by their own intervals reads `inconclusive: inconsistent
   across periods`). Two parts no spread between histories shows are added whole, each with its
   degrees of freedom:
   - the seeds' part common to every history (seed index s starts from the same weights in every
     history and fold: the seeds x histories ANOVA of the seed-level differences,
     `pooling.seed_anova`), split off each history's variance as `pool_family` does for folds;
   - **the calendar part** (`rules.calendar`): histories that validate on the same dates share each
     period's luck, which is estimated from the cells (histories x shared periods, both random)
     and carried into the variance of the mean with the degrees of freedom it has. Histories on
     their own calendars pool as independent.
3. **too few to decide**: fewer than `min_histories` histories with an effect, or fewer than
   `min_periods` calendar periods (the periods the histories validate on, counted once where they
   share them: on one calendar of K folds, K; on their own calendars, every fold), and on a shared
   calendar fewer than `defaults.MIN_SHARED_PERIODS` (the calendar part's estimate needs them)
   read `insufficient data` (`HistoryPooled.too_few_histories`, `too_few_periods`).

A history's degrees of freedom enter stage 2 as its variance's: `pool_family` reads a variance's df
as `FOLD_VAR_DF` (n - 1) of n pairs, so a history's stage-1 df are passed as n = df / `FOLD_VAR_DF` + 1.

The power statement is `power.history_mde` (its components: `history_components`). Arrays in, words
out: the calibration (`decision_calibration`) runs these on thousands of simulated families.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from tune_gems.analysis import defaults
from tune_gems.analysis.rules.calendar import CalendarPart, calendar_part, one_calendar
from tune_gems.analysis.rules.held_out_rule import seed_level_effect
from tune_gems.analysis.rules.period_family import FoldData, fold_components, fold_data, pool_fold_data, sample_variance
from tune_gems.analysis.rules.periods import PeriodDecision, decide_periods
from tune_gems.analysis.rules.pooling import FOLD_VAR_DF, pool_family, seed_anova
from tune_gems.analysis.rules.variance_parts import RANK_EFFICIENCY, HistoryComponents
from tune_gems.analysis.rules.ties import is_tie


@dataclass(frozen=True)
class HistoryData:
    """A family's data over H histories: `folds` one `FoldData` per history ([S, m, K]: the cells the
    calendar part and the power statement read); per contrast and history [S, m, H] the stage-1
    `effect` (each history's seed-level effect over its folds), its squared standard error `var`,
    that variance's `df`, its two-sided signed-rank `p` and informative seeds `n`; per contrast
    [S, m] the seeds' part common to every history `seed_var` (sigma_c^2 / n), its degrees of
    freedom `seed_df` and its share of one seed's variance `seed_share`; `calendar` [H, K] the
    calendar period of each history's folds (`rules.calendar`)."""

    folds: tuple[FoldData, ...]
    effect: np.ndarray
    var: np.ndarray
    df: np.ndarray
    p: np.ndarray
    n: np.ndarray
    seed_var: np.ndarray
    seed_df: np.ndarray
    seed_share: np.ndarray
    calendar: np.ndarray

    @property
    def cells(self) -> np.ndarray:
        """Every history's fold effects, [S, m, H, K]."""
        return np.stack([fd.theta for fd in self.folds], 2)


@dataclass(frozen=True)
class HistoryPooled:
    """Stage 2 (`pool_family`'s dict over the histories, [S, m], with `history_effect` and
    `history_p` [S, m, H] stage 1's), the calendar part it carries, and after the decision
    (`decide_histories`) per contrast [S, m] where too few histories (`too_few_histories`) or too
    few calendar periods (`too_few_periods`) left it `insufficient data`."""

    pooled: dict
    calendar: CalendarPart
    too_few_histories: np.ndarray | None = None
    too_few_periods: np.ndarray | None = None


def history_data(d, calendar=None) -> HistoryData:
    """The data of per-seed differences d [S, m, H, K, n] whose seeds are aligned across every
    history and fold (NaN: no pair; a history with fewer folds pads with NaN), on `calendar` [H, K]
    (default `calendar.one_calendar`: fold k of every history validates on the same dates, as the
    columns of one file do)."""
    d = np.asarray(d, float)
    s, m, h, k, n = d.shape
    folds = tuple(fold_data(d[:, :, j]) for j in range(h))
    r = seed_level_effect(np.moveaxis(d, 2, 1).reshape(s * h * m, k, n))
    effect, p, n_inf = (np.moveaxis(np.asarray(r[key], float).reshape(s, h, m), 1, 2) for key in ("theta", "p", "n"))
    with np.errstate(invalid="ignore"):
        present = ~np.isnan(d)
        per_seed = np.where(present.any(3), np.nansum(np.where(present, d, 0.0), 3) / np.maximum(present.sum(3), 1),
                            np.nan)  # [S, m, H, n]: each seed's difference over a history's folds
    # the Hodges-Lehmann effect's variance from its seeds' sample variance (its efficiency pi / 3 under
    # normal noise), n - 1 df: the rank interval's width over-reads it at few seeds (+35% at 12) and
    # weighs and floors stage 2 with it; a diverged side (+-inf) leaves no finite variance
    keep = ~is_tie(per_seed) & ~np.isnan(per_seed)
    finite = (np.isfinite(per_seed) | ~keep).all(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        var = np.where(finite & (n_inf >= 2), RANK_EFFICIENCY * sample_variance(per_seed, keep) / n_inf, np.inf)
    df = np.maximum(n_inf - 1.0, 0.0)
    anova = [seed_anova(per_seed[:, g]) for g in range(m)]
    with np.errstate(invalid="ignore", divide="ignore"):
        seed_var = np.stack([np.where(a["seeds"] >= 2, np.nan_to_num(a["sigma_c2"]) / np.maximum(a["seeds"], 1), 0.0)
                             for a in anova], 1)
    cal = one_calendar(h, k) if calendar is None else np.asarray(calendar, int)
    return HistoryData(folds, effect, var, df, p, n_inf, seed_var, np.stack([a["df"] for a in anova], 1),
                       np.stack([a["share"] for a in anova], 1), cal)


def pool_histories(hd: HistoryData, *, rope: float, share: bool = defaults.SHARE_TAU, one_sided: bool = False,
                   isolate_flagged: bool = defaults.ISOLATE_FLAGGED,
                   isolate_level: float = defaults.ISOLATE_LEVEL) -> HistoryPooled:
    """Stage 2 (module docstring) on a family's history data."""
    theta, var, df = hd.effect, hd.var, hd.df
    with np.errstate(invalid="ignore", divide="ignore"):
        share_common = np.clip(np.nan_to_num(hd.seed_var[..., None] / var), 0.0, 1.0)
        # the seeds' part common to every history: one share per contrast, its mean over the histories
        c_share = np.where(np.isfinite(theta), share_common, 0.0).sum(-1) / np.maximum(np.isfinite(theta).sum(-1), 1)
        fold_n = np.where(np.isfinite(theta), df / FOLD_VAR_DF + 1.0, np.nan)
    cal = calendar_part(hd.cells, hd.calendar)
    pooled = pool_family(theta, var, seed_share=c_share, seed_var=hd.seed_var, rope=rope, share=share,
                         one_sided=one_sided, fold_n=fold_n, seed_df=hd.seed_df, isolate_flagged=isolate_flagged,
                         isolate_level=isolate_level, extra_var=cal.mean_var, extra_df=cal.df)
    pooled["history_effect"], pooled["history_p"] = theta, hd.p
    return HistoryPooled(pooled, cal)


def decide_histories(hd: HistoryData, *, alpha: float, rope: float, tested=None, seed_verdict=None, removable=None,
                     share: bool = defaults.SHARE_TAU, one_sided: bool = False,
                     min_histories: int = defaults.MIN_HISTORIES, min_periods: int = defaults.MIN_PERIODS,
                     isolate_flagged: bool = defaults.ISOLATE_FLAGGED,
                     isolate_level: float = defaults.ISOLATE_LEVEL) -> tuple[HistoryPooled, PeriodDecision]:
    """The two stages (`pool_histories`) and the period rule with the histories as its periods
    (`periods.decide_periods`: Holm over the family) on one family's history data, deciding only
    where at least `min_histories` histories and `min_periods` calendar periods carry an effect
    (and, where periods are shared, the calendar part can be estimated)."""
    hp = pool_histories(hd, rope=rope, share=share, one_sided=one_sided, isolate_flagged=isolate_flagged,
                        isolate_level=isolate_level)
    r, cal = hp.pooled, hp.calendar
    shape = r["mu"].shape
    tested = np.ones(shape, bool) if tested is None else np.broadcast_to(np.asarray(tested, bool), shape)
    few_h = r["periods"] < min_histories
    shared_too_few = cal.shared & ((cal.periods < max(min_periods, defaults.MIN_SHARED_PERIODS)) | ~np.isfinite(cal.var))
    few_p = ~few_h & ((cal.periods < min_periods) | shared_too_few)
    rule = decide_periods(tested, r["p"], r["p_tost"], r["mu"], r["se"], r["se_fixed"], r["df"], r["q_p"], r["periods"],
                          r["history_effect"], r["history_p"], alpha=alpha, seed_verdict=seed_verdict,
                          removable=removable, one_sided=one_sided, df_fixed=r["df_fixed"], enough=~(few_h | few_p))
    return replace(hp, too_few_histories=tested & few_h, too_few_periods=tested & few_p), rule


def history_components(hd: HistoryData, hp: HistoryPooled) -> HistoryComponents:
    """The variance parts of the nested rule's pooled effect ([S, m] each; `variance_parts.HistoryComponents`):
    `within` one seed's variance inside a fold and `period` the spread of a history's folds that is
    its own (each history's folds pooled, `period_family.pool_fold_data`, their mean over the
    histories, the calendar part taken out where histories share it), `calendar` the calendar part
    (`rules.calendar`; 0 where nothing is shared; `shared` where it is), `history` the spread between
    histories less what their own periods give it (stage 2's tau_H^2 - period / K), `seed` the share
    common to every history and fold x within."""
    comps = []
    for fd in hd.folds:
        tau2 = pool_fold_data(fd, rope=0.0)["tau2"]
        comps.append(fold_components(fd, np.where(np.isfinite(tau2), tau2, 0.0)))
    with np.errstate(invalid="ignore"):
        within = np.nanmean(np.stack([np.asarray(c.within, float) for c in comps]), 0)
        period = np.nanmean(np.stack([np.asarray(c.period, float) for c in comps]), 0)
        cal = hp.calendar
        calendar = np.where(cal.shared, cal.var, 0.0)
        period = np.maximum(0.0, period - np.nan_to_num(calendar))
        k = np.maximum(np.isfinite(hd.cells).sum(-1).mean(-1), 1.0)
        history = np.maximum(0.0, hp.pooled["tau2"] - period / k)
    return HistoryComponents(history=history, period=period, within=within, seed=np.nan_to_num(hd.seed_share) * within,
                             calendar=calendar, shared=cal.shared)
