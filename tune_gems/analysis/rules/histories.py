"""The nested rule for several price histories: periods nested in histories, crossed with the calendar where they share
it. With H >= 2 histories the replication unit is the history: what one history's folds share is in none of their
spreads. So each history's effect is the seed-level effect over its folds, and stage 2 pools the histories as
`periods.pool_family`'s periods, adding whole what no spread between them shows: the seeds' common part and, where
histories validate on the same dates, the calendar part (`calendar_part`; leaving it out read 0.11-0.38 family-wise).
docs/analysis.md "Several price histories" and "Histories on one calendar"."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from tune_gems.analysis import defaults
from tune_gems.analysis.rules.periods import (
    FOLD_VAR_DF, RANK_EFFICIENCY, FoldData, PeriodDecision, Pooling, decide_periods, fold_components, fold_data,
    is_tie, pool_family, sample_variance, seed_anova, seed_level_effect,
)
from tune_gems.analysis.rules.settings import Thresholds


@dataclass(frozen=True)
class HistoryData:
    """A family's data over H histories: stage 1 per history [S, m, H], the seeds' common part [S,
    m], and `calendar` [H, K] the period of each fold (-1: none)."""

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
    """Stage 2 over the histories, the calendar part it carries, and where too few histories or
    calendar periods left it `insufficient data`."""

    pooled: dict
    calendar: CalendarPart
    periods: FoldData
    too_few_histories: np.ndarray | None = None
    too_few_periods: np.ndarray | None = None


def history_data(d, calendar=None) -> HistoryData:
    """The data of seed-aligned per-seed differences d [S, m, H, K, n] on `calendar` (default `one_calendar`)."""
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


def pool_histories(hd: HistoryData, how: Pooling) -> HistoryPooled:
    """Stage 2 (module docstring) on a family's history data: the histories are `pool_family`'s periods."""
    theta, var, df = hd.effect, hd.var, hd.df
    with np.errstate(invalid="ignore", divide="ignore"):
        share_common = np.clip(np.nan_to_num(hd.seed_var[..., None] / var), 0.0, 1.0)
        # the seeds' part common to every history: one share per contrast, its mean over the histories
        c_share = np.where(np.isfinite(theta), share_common, 0.0).sum(-1) / np.maximum(np.isfinite(theta).sum(-1), 1)
        fold_n = np.where(np.isfinite(theta), df / FOLD_VAR_DF + 1.0, np.nan)
    cal = calendar_part(hd.cells, hd.calendar)
    periods = FoldData(theta, var, hd.p, fold_n, hd.seed_var, c_share, hd.seed_df)
    pooled = pool_family(periods, how, extra_var=cal.mean_var, extra_df=cal.df)
    pooled["history_effect"], pooled["history_p"] = theta, hd.p
    return HistoryPooled(pooled, cal, periods)


def decide_histories(hd: HistoryData, th: Thresholds, *, tested=None, seed_verdict=None, removable=None,
                     how: Pooling | None = None) -> tuple[HistoryPooled, PeriodDecision]:
    """The two stages and the period rule with the histories as its periods, deciding only where at
    least `defaults.MIN_HISTORIES` histories and `min_periods` calendar periods carry an effect."""
    hp = pool_histories(hd, how or Pooling.of(th))
    r, cal = hp.pooled, hp.calendar
    shape = r["mu"].shape
    tested = np.ones(shape, bool) if tested is None else np.broadcast_to(np.asarray(tested, bool), shape)
    few_h = r["periods"] < defaults.MIN_HISTORIES
    min_periods = th.min_periods
    shared_too_few = cal.shared & ((cal.periods < max(min_periods, defaults.MIN_SHARED_PERIODS)) | ~np.isfinite(cal.var))
    few_p = ~few_h & ((cal.periods < min_periods) | shared_too_few)
    rule = decide_periods(hp.periods, r, th, tested=tested, seed_verdict=seed_verdict, removable=removable,
                          enough=~(few_h | few_p))
    return replace(hp, too_few_histories=tested & few_h, too_few_periods=tested & few_p), rule


@dataclass(frozen=True)
class HistoryComponents:
    """The variance parts of the nested rule's pooled effect over H histories of K folds; the pooled
    mean's variance is

        tau_H^2 / H + (tau^2 + (within - seed) / n) / (K H) + calendar / K + seed / n
    """

    history: float
    period: float
    within: float
    seed: float = 0.0
    calendar: float = 0.0
    shared: bool | np.ndarray = False


def history_components(hd: HistoryData, hp: HistoryPooled) -> HistoryComponents:
    """The `HistoryComponents` [S, m] of a family's history data."""
    comps = []
    for fd in hd.folds:
        tau2 = pool_family(fd)["tau2"]
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


def one_calendar(histories: int, folds: int) -> np.ndarray:
    """Fold k of every history validates on calendar period k (the columns of one file)."""
    return np.tile(np.arange(folds), (histories, 1))


def own_calendars(histories: int, folds: int) -> np.ndarray:
    """Every history's folds on its own calendar: no period shared."""
    return np.arange(histories * folds).reshape(histories, folds)


@dataclass(frozen=True)
class CalendarPart:
    """The calendar part of a family over histories ([S, m]): `var` (NaN: too few shared periods),
    `df`, `periods`, `shared`, and `mean_var` what the mean over histories carries."""

    var: np.ndarray
    df: np.ndarray
    periods: np.ndarray
    shared: np.ndarray
    weight: np.ndarray
    means_var: np.ndarray
    """[S, m] the spread of the shared periods' means over the histories (MS_periods / H: the calendar
    part and what the histories' own parts leave in a period's mean, never truncated at 0; NaN where
    it cannot be estimated, 0 where nothing is shared), on `means_df` = K - 1 degrees of freedom: the
    held-out stage's calendar part, one period of every history (`decision.held_out_stage`)."""
    means_df: np.ndarray

    @property
    def mean_var(self) -> np.ndarray:
        with np.errstate(invalid="ignore"):
            return np.where(self.shared, self.var * self.weight, 0.0)


def _groups(calendar: np.ndarray) -> list[list[int]]:
    """The histories connected by a shared calendar period (union-find over equal ids)."""
    h = calendar.shape[0]
    parent = list(range(h))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for p in np.unique(calendar[calendar >= 0]):
        rows = np.flatnonzero((calendar == p).any(1))
        for r in rows[1:]:
            parent[root(int(r))] = root(int(rows[0]))
    out: dict[int, list[int]] = {}
    for i in range(h):
        out.setdefault(root(i), []).append(i)
    return list(out.values())


def calendar_part(theta: np.ndarray, calendar) -> CalendarPart:
    """The calendar part (module docstring) of the cells theta [S, m, H, K] (each history's fold
    effects; NaN or +-inf: no effect) on `calendar` [H, K]."""
    theta = np.asarray(theta, float)
    cal = np.asarray(calendar, int)
    s, m, h, k = theta.shape
    if cal.shape != (h, k):
        raise ValueError(f"calendar: expected [{h}, {k}] period ids, got shape {cal.shape}")
    ids = np.unique(cal[cal >= 0])
    onto = (cal[:, :, None] == ids[None, None, :]).astype(float)  # [H, K, P]
    present = np.isfinite(theta) & (cal >= 0)
    per_history = np.einsum("smhk,hkp->smhp", present.astype(float), onto) > 0  # [S, m, H, P]
    holders = per_history.sum(2)  # [S, m, P]
    periods = (holders > 0).sum(-1)
    shared_p = holders >= 2
    k_h = present.sum(-1)  # [S, m, H] each history's folds with an effect
    h_eff = (k_h > 0).sum(-1)  # [S, m]
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(present, 1.0 / (np.maximum(k_h, 1)[..., None] * np.maximum(h_eff, 1)[..., None, None]), 0.0)
    b = np.einsum("smhk,hkp->smp", share, onto)
    weight = np.where(shared_p, b**2, 0.0).sum(-1)
    ss_p, df_p, ss_e, df_e, div = (np.zeros((s, m)) for _ in range(5))
    for group in _groups(cal):
        if len(group) < 2:
            continue
        g_ids = np.unique(cal[group][cal[group] >= 0])
        x = np.full((s, m, len(group), len(g_ids)), np.nan)
        for a, hist in enumerate(group):
            for b_, p in enumerate(g_ids):
                at = np.flatnonzero(cal[hist] == p)
                if at.size:
                    x[:, :, a, b_] = theta[:, :, hist, at[0]]
        col = np.isfinite(x).all(2)  # [S, m, P_g]: periods every history of the group has an effect in
        kc = col.sum(-1)
        xc = np.where(col[:, :, None, :], x, 0.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            row_mean = xc.sum(-1) / kc[..., None]  # [S, m, G]
            col_mean = xc.mean(2)  # [S, m, P_g]
            grand = np.where(col, col_mean, 0.0).sum(-1) / kc
            resid = np.where(col[:, :, None, :], xc - row_mean[..., None] - col_mean[:, :, None, :]
                             + grand[..., None, None], 0.0)
            use = kc >= 2
            ss_p += np.where(use, len(group) * np.where(col, (col_mean - grand[..., None]) ** 2, 0.0).sum(-1), 0.0)
            ss_e += np.where(use, (resid**2).sum((-1, -2)), 0.0)
        df_p += np.where(use, kc - 1, 0)
        df_e += np.where(use, (len(group) - 1) * (kc - 1), 0)
        div += np.where(use, (kc - 1) * len(group), 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        ms_p, ms_e = ss_p / df_p, ss_e / df_e
        var = np.where(df_p > 0, np.maximum(0.0, (ss_p - df_p * ms_e) / div), np.nan)
        df = np.where(var > 0, (ms_p - ms_e) ** 2 / (ms_p**2 / df_p + ms_e**2 / df_e), np.inf)
        means_var = np.where(df_p > 0, ss_p / div, np.nan)  # MS_periods / H
    shared = shared_p.any(-1)
    return CalendarPart(np.where(shared, var, 0.0), np.where(shared, df, np.inf), periods, shared, weight,
                        np.where(shared, means_var, 0.0), np.where(shared, df_p, np.inf))
