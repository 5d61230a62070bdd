"""The calendar part of histories that share validation periods: history x period, both random.

Why. Histories cut from one file's columns validate on the same dates, and a contrast's effect in a
period is partly the period's (a regime every market lives through) and partly the history's own.
The spread between histories, which the nested rule reads, cannot show a part common to all of
them: leaving it out read 0.11-0.38 family-wise at 6-8 histories (docs/analysis.md "Histories on
one calendar"). So the effect in (history h, period p) is mu + a_h + c_p + e_hp; var(c_p) is the
two-way ANOVA's (MS_periods - MS_residual) / H over the shared periods, at least 0, on its
Satterthwaite df (at most K - 1), and the mean over histories carries var(c_p) sum_p B_p^2 (1 / K
on one calendar). Histories on their own calendars share nothing and pool as independent; one
shared period cannot separate the calendar part at all.

`calendar` [H, K] int: the period fold k of history h validates on (-1: no such fold); equal ids in
two histories are one period (`one_calendar`, `own_calendars`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def one_calendar(histories: int, folds: int) -> np.ndarray:
    """Fold k of every history validates on calendar period k (the columns of one file)."""
    return np.tile(np.arange(folds), (histories, 1))


def own_calendars(histories: int, folds: int) -> np.ndarray:
    """Every history's folds on its own calendar: no period shared."""
    return np.arange(histories * folds).reshape(histories, folds)


@dataclass(frozen=True)
class CalendarPart:
    """The calendar part of a family over histories ([S, m] arrays): `var` sigma_c^2 (NaN where
    periods are shared but fewer than two of them carry an effect in every history that shares
    them: it cannot be estimated), `df` its degrees of freedom (inf where it is 0), `periods` the
    calendar periods that carry an effect, `shared` whether any of them carries one in two or more
    histories, `weight` sum_p B_p^2 over the shared periods (0 without), `mean_var` what the mean
    over histories carries (var x weight; 0 where nothing is shared, NaN where it cannot be
    estimated)."""

    var: np.ndarray
    df: np.ndarray
    periods: np.ndarray
    shared: np.ndarray
    weight: np.ndarray
    means_var: np.ndarray
    """[S, m] the spread of the shared periods' means over the histories (MS_periods / H: the calendar
    part and what the histories' own parts leave in a period's mean, never truncated at 0; NaN where
    it cannot be estimated, 0 where nothing is shared), on `means_df` = K - 1 degrees of freedom: the
    held-out stage's calendar part, one period of every history (`held_out_rule.held_out_stage`)."""
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
