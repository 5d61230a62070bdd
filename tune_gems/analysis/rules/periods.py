"""The period rule and what it reads: a family's fold effects, their pooling and the folds' overlap (docs/analysis.md
"Verdicts over periods" derives each choice and its calibration). Ties carry no weight (`informative_rank_test`):
counted, they pull the Hodges-Lehmann estimate to 0 and collapse intervals, so they are dropped first, `n_informative`
and `tied_share` kept. `seed_anova` finds the seeds' part common to every fold (the same seed starts from the same
weights in every period), which no fold dispersion sees; `pool_family` adds it whole to random effects, HKSJ never
narrower than DerSimonian-Laird, tau^2 and the scale shared across the family where they agree. Folds that share
training rows share a part the dispersion cannot see (Nadeau & Bengio 2003), so its variance is multiplied by
`overlap_factor`. `decide_periods` says inconsistent only where a sign change is shown; the seeds' own verdict is no
second gate (stacking two tests put the rule far below its level). Vectorised over a leading axis of datasets."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pandas as pd
from scipy import stats as sps

from tune_gems.analysis import defaults
from tune_gems.analysis.rules.settings import (
    DELETE, EQUIVALENT, HARMFUL, HETEROGENEOUS, INCONCLUSIVE, INCONSISTENT, INSUFFICIENT, KEEP, Thresholds,
)
from tune_gems.contracts.errors import DataError
from tune_gems.stats.inference import RankTest, holm, holm_levels, rank_test, smallest_p


@dataclass(frozen=True)
class FoldData:
    """A family's periods as the period rule reads them ([S, m, K] effects, squared SEs, p,
    informative pairs; [S, m] the seeds' common part, its share and df)."""

    theta: np.ndarray
    var: np.ndarray
    p: np.ndarray | None = None
    n_informative: np.ndarray | None = None
    seed_var: np.ndarray | float = 0.0
    seed_share: np.ndarray | float = 0.0
    seed_df: np.ndarray | None = None
    sample_var: np.ndarray | None = None


@dataclass(frozen=True)
class PooledComponents:
    """The variance parts of one history's pooled effect over K folds of n pairs: the pooled mean's
    variance is

        (tau^2 + (within - seed) / n) (1/K + lambda) + seed / n
    """

    period: float
    within: float
    seed: float = 0.0
    overlap: float = 0.0
    """The folds' overlap, lambda = n2 / n1 (`fold_overlap`: Nadeau-Bengio's rho / (1 - rho)): the
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
    """How much a fold's rank interval over-reads its effect's variance at `n` pairs (2.7 at 6, 1.25
    at 16, 1.09 at 32; 1 below 6): its discrete critical values widen it at few pairs."""
    if n > OVERREAD_MAX:
        return 1.0 + (rank_overread(OVERREAD_MAX) - 1.0) * OVERREAD_MAX / n
    var = fold_estimates(np.random.default_rng(n).standard_normal((OVERREAD_ROWS, max(int(n), 1))))["var"]
    ok = np.isfinite(var)
    return float(var[ok].mean() * n / RANK_EFFICIENCY) if ok.any() else 1.0


def components(var, n_informative, seed_share, tau2, theta=None, sample_var=None) -> PooledComponents:
    """The pooled components of fold data: within the folds' n x se^2 over `rank_overread` (a fold
    without a rank interval: pi / 3 x `sample_var`); seed its common share; period tau^2, or without
    fold variances the moment estimate from `theta`."""
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
class Pooling:
    """How `pool_family` pools (docs/analysis.md "Isolating a heterogeneous contrast" for `isolate_flagged`)."""

    rope: float = 0.0
    share: bool = defaults.SHARE_TAU
    one_sided: bool = False
    isolate_flagged: bool = defaults.ISOLATE_FLAGGED
    isolate_level: float = defaults.ISOLATE_LEVEL
    share_level: float = defaults.TAU_SHARE_LEVEL

    @classmethod
    def of(cls, th: Thresholds, **isolation) -> Pooling:
        """The pooling the analysis's settings ask for."""
        return cls(th.rope, th.share_tau, th.one_sided_keep, **isolation)


def fold_components(fd: FoldData, tau2) -> PooledComponents:
    """The pooled components of a family's fold data: what verdicts, plan and calibrations state power with."""
    return components(fd.var, fd.n_informative, fd.seed_share, tau2, fd.theta, sample_var=fd.sample_var)


def informative_variance(d: np.ndarray) -> np.ndarray:
    """The sample variance of the finite informative differences (ties and NaN left out) along
    the last axis of d (NaN with fewer than two)."""
    d = np.asarray(d, float)
    return sample_variance(d, np.isfinite(d) & ~is_tie(d))


def sample_variance(d: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """The sample variance of the entries of d that `keep` marks, along the last axis (NaN with fewer than two)."""
    d = np.asarray(d, float)
    cnt = keep.sum(-1)
    x = np.where(keep, d, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = x.sum(-1) / cnt
        ss = np.where(keep, (d - mean[..., None]) ** 2, 0.0).sum(-1)
        return np.where(cnt >= 2, ss / (cnt - 1), np.nan)


def fold_data(d: np.ndarray) -> FoldData:
    """The fold data of per-seed differences d [S, m, K, n] whose seeds are aligned across the
    K folds (a simulated family; NaN: no pair)."""
    d = np.asarray(d, float)
    s, m, k, n = d.shape
    fe = fold_estimates(d.reshape(s * m * k, n))
    theta, var, p, n_inf = (fe[key].reshape(s, m, k) for key in ("theta", "var", "p", "n_informative"))
    seed_var = np.stack([shared_seed_variance(d[:, g]) for g in range(m)], 1)
    anova = [seed_anova(d[:, g]) for g in range(m)]
    return FoldData(theta, var, p, n_inf, seed_var, np.stack([a["share"] for a in anova], 1),
                    np.stack([a["df"] for a in anova], 1), informative_variance(d))


def decide_fold_data(fd: FoldData, th: Thresholds, *, tested=None, seed_verdict=None, removable=None, fold_corr=0.0,
                     how: Pooling | None = None) -> tuple[dict[str, np.ndarray], PeriodDecision]:
    """(`pool_family` as `how` pools, `decide_periods`) on one family's fold data; `fold_corr` the folds' overlap."""
    pooled = pool_family(fd, how or Pooling.of(th), fold_corr=fold_corr)
    return pooled, decide_periods(fd, pooled, th, tested=tested, seed_verdict=seed_verdict, removable=removable)


@dataclass(frozen=True)
class PeriodDecision:
    """The period rule on families of gems ([S, m] arrays, the gems on the last axis; the fold arrays [S, m, K])."""

    verdict: np.ndarray
    p_adjusted: np.ndarray
    tost_p_adjusted: np.ndarray
    q_p_adjusted: np.ndarray
    level: np.ndarray
    low: np.ndarray
    high: np.ndarray
    flips: np.ndarray
    heterogeneous: np.ndarray
    too_few_periods: np.ndarray
    fold_p_adjusted: np.ndarray
    fold_level: np.ndarray


def sign_change_shown(fold_effect, fold_p, alpha: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(shown [S, m], fold Holm p, fold Holm levels): a significant fold of each sign, Holm over all
    (gem, fold) tests."""
    fold_effect = np.asarray(fold_effect, float)
    fold_p = np.asarray(fold_p, float)
    s, m, k = fold_p.shape
    flat = fold_p.reshape(s, m * k)
    adj = holm(flat).reshape(s, m, k)
    lvl = holm_levels(flat, alpha).reshape(s, m, k)
    sig = np.nan_to_num(adj, nan=1.0) <= alpha
    shown = (sig & (fold_effect > 0)).any(-1) & (sig & (fold_effect < 0)).any(-1)
    return shown, adj, lvl


def decide_periods(fd: FoldData, pooled: dict, th: Thresholds, *, tested=None, seed_verdict=None, removable=None,
                   enough=None) -> PeriodDecision:
    """The period rule (module docstring) on a family's periods `fd` and their pooled test `pooled`;
    `enough` where the design can decide (default `periods >= min_periods`)."""
    alpha, one_sided = th.alpha, th.one_sided_keep
    p, p_tost, mu, se, se_fixed, df, q_p, periods, df_fixed = (
        pooled[key] for key in ("p", "p_tost", "mu", "se", "se_fixed", "df", "q_p", "periods", "df_fixed"))
    fold_effect, fold_p = fd.theta, fd.p
    tested = np.broadcast_to(np.asarray(True if tested is None else tested, bool), mu.shape)
    enough = tested & (periods >= th.min_periods if enough is None else np.asarray(enough, bool))
    few = tested & ~enough
    p_in = np.where(enough, p, np.nan)
    p_adj, pt_adj = holm(p_in), holm(np.where(enough, p_tost, np.nan))
    q_adj = holm(np.where(enough & np.isfinite(p), q_p, np.nan))
    level = holm_levels(p_in, alpha)
    with np.errstate(invalid="ignore"):
        if one_sided:
            low, _ = pooled_bounds(mu, se, se_fixed, df, level, df_fixed)
            high = np.where(np.isfinite(low), np.inf, np.nan)
        else:
            low, high = pooled_bounds(mu, se, se_fixed, df, level / 2, df_fixed)
        significant = np.nan_to_num(p_adj, nan=1.0) <= alpha
        equivalent = np.nan_to_num(pt_adj, nan=1.0) <= alpha
        heterogeneous = np.nan_to_num(q_adj, nan=1.0) <= alpha
    shown, fold_adj, fold_level = sign_change_shown(fold_effect, np.where(enough[..., None], fold_p, np.nan), alpha)
    flips = enough & heterogeneous & shown
    removable = np.zeros(tested.shape, bool) if removable is None else np.asarray(removable, bool)
    keep_seed = np.broadcast_to(np.asarray(INCONCLUSIVE if seed_verdict is None else seed_verdict, dtype=object),
                                tested.shape)
    verdict = np.select(
        [~tested, few, flips, enough & significant & (mu > 0), enough & significant & (mu < 0) & (not one_sided),
         enough & equivalent & removable, enough & equivalent, enough & heterogeneous],
        [keep_seed, INSUFFICIENT, INCONSISTENT, KEEP, HARMFUL, DELETE, EQUIVALENT, HETEROGENEOUS], INCONCLUSIVE)
    return PeriodDecision(verdict, p_adj, pt_adj, q_adj, level, low, high, flips, enough & heterogeneous & ~flips,
                          few, fold_adj, fold_level)


FOLD_SE_TAIL = 0.025
"""Per-side tail of the per-fold rank interval whose half-width, over the normal quantile, is
the fold effect's standard error (the weights of the random-effects combination)."""


FOLD_VAR_DF = 0.8
"""Degrees of freedom of a fold variance read off the rank interval of n informative pairs, per
n - 1: its relative spread under normal noise is that of a chi2 with 0.8 (n - 1) df (measured:
6.6, 13, 25, 49 df at 8, 16, 32, 64 pairs; the interval's order statistics are coarser than
a sample variance)."""

COLLAPSED = 1e-9
"""A fold interval narrower than this (relative to the effect, at least 1) has collapsed: its
informative pairs are one value repeated, which gives no standard error (rounding would give a
weight of 1e30)."""


def fold_estimates(d: np.ndarray) -> dict[str, np.ndarray]:
    """Per row of d [S, n], on its informative pairs: the Hodges-Lehmann `theta`, `var` off its 95%
    signed-rank interval (inf: too few pairs), `p`, `n_informative`, `tied_share`."""
    with np.errstate(over="ignore", invalid="ignore"):  # a diverged side: an infinite interval, no se
        r = informative_rank_test(d, tail=FOLD_SE_TAIL)
        se = (r.high - r.low) / (2 * sps.norm.ppf(1 - FOLD_SE_TAIL))
    with np.errstate(invalid="ignore"):
        # an interval that collapsed (every informative pair the same difference, up to rounding)
        # says nothing about the fold's spread: unknown, like one too short for its level
        spread = np.isfinite(se) & (se > COLLAPSED * np.maximum(1.0, np.abs(np.nan_to_num(r.estimate))))
        var = np.where(spread, se**2, np.inf)
    return dict(theta=r.estimate, var=var, p=r.p, n_informative=r.n_informative, tied_share=r.tied_share)


def seed_anova(d: np.ndarray) -> dict[str, np.ndarray]:
    """The seeds x folds ANOVA per row of d [S, K, n] over the seeds finite in every fold:
    `sigma_c2` the seeds' common part (NaN below 2 seeds), its `share` and Satterthwaite `df`."""
    d = np.asarray(d, float)
    d = np.where(is_tie(d), np.nan, d)
    s, k, n = d.shape
    ok = np.isfinite(d).all(1)  # [S, n]
    m = ok.sum(1)
    x = np.where(ok[:, None, :], d, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        grand = x.sum((1, 2)) / (k * m)
        seed_mean = x.sum(1) / k  # [S, n]
        fold_mean = x.sum(2) / m[:, None]  # [S, K]
        ms_seed = k * (np.where(ok, seed_mean - grand[:, None], 0.0) ** 2).sum(1) / (m - 1)
        resid = np.where(ok[:, None, :], x - seed_mean[:, None, :] - fold_mean[:, :, None] + grand[:, None, None], 0.0)
        ms_resid = (resid**2).sum((1, 2)) / ((k - 1) * (m - 1))
        sigma_c2 = np.maximum(0.0, (ms_seed - ms_resid) / k)
        share = np.where(sigma_c2 + ms_resid > 0, sigma_c2 / (sigma_c2 + ms_resid), 0.0)
        # Satterthwaite df of (MS_seed - MS_resid): fewer than the n - 1 seeds when the two are close
        df = np.where(sigma_c2 > 0, (ms_seed - ms_resid) ** 2 / (ms_seed**2 / (m - 1) + ms_resid**2 / ((k - 1) * (m - 1))),
                      np.inf)
    few = m < 2
    return dict(ms_seed=np.where(few, np.nan, ms_seed), ms_resid=np.where(few, np.nan, ms_resid), seeds=m,
                sigma_c2=np.where(few, np.nan, sigma_c2), share=np.where(few, 0.0, share),
                df=np.where(few, np.inf, df))


def shared_seed_variance(d: np.ndarray) -> np.ndarray:
    """sigma_c^2 / n per row: what `pool_family` adds for a contrast pooled with equal weights."""
    a = seed_anova(d)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(a["seeds"] >= 2, np.nan_to_num(a["sigma_c2"]) / np.maximum(a["seeds"], 1), 0.0)


def pooled_bounds(mu, se, se_fixed, df, tail, df_fixed=np.inf) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) of the pooled effect at `tail` per side: the wider of the HKSJ interval (t
    with `df`, `se`) and the DerSimonian-Laird one (t with `df_fixed`, `se_fixed`)."""
    tail = np.asarray(tail, float)
    dff = np.asarray(df_fixed, float)
    with np.errstate(invalid="ignore"):
        half = np.fmax(sps.t.ppf(1 - tail, df) * se, sps.t.ppf(1 - tail, np.where(np.isfinite(dff), dff, 1e12)) * se_fixed)
    return mu - half, mu + half


def _scale_excess_p(q: np.ndarray, df: np.ndarray, on: np.ndarray) -> np.ndarray:
    """Per contrast `on`: the one-sided F test p of its scale exceeding the others' pooled scale
    (only a larger scale endangers the shared test)."""
    dfo = np.where(on, df, 0).astype(float)
    qo = np.where(on, q, 0.0)
    df_rest = dfo.sum(-1, keepdims=True) - dfo
    with np.errstate(invalid="ignore", divide="ignore"):
        rest = (qo.sum(-1, keepdims=True) - qo) / df_rest
        ratio = (q / np.where(on, df, 1)) / rest
        p = sps.f.sf(ratio, np.maximum(dfo, 1), np.maximum(df_rest, 1))
    p = np.where(rest > 0, p, np.where(q > 0, 0.0, 1.0))
    return np.where(on & (df_rest > 0), p, np.nan)


def _residual_r2(e: np.ndarray, inc: np.ndarray, on: np.ndarray) -> np.ndarray:
    """Per row: the mean squared correlation of the contrasts' standardised fold residuals, debiased
    for their K - 1 df."""
    e = np.where(inc, e, 0.0)
    incf = inc.astype(float)
    num = np.einsum("smk,snk->smn", e, e)
    den = np.einsum("smk,snk->smn", e**2, incf) * np.einsum("smk,snk->smn", incf, e**2)
    common = np.einsum("smk,snk->smn", incf, incf)
    with np.errstate(invalid="ignore", divide="ignore"):
        r2 = np.where(den > 0, num**2 / den, 0.0)
        dfc = common - 1
        adj = np.where(dfc > 1, np.maximum(0.0, (r2 - 1 / dfc) / (1 - 1 / np.where(dfc > 1, dfc, 2))), 1.0)
    m = e.shape[1]
    pair = on[:, :, None] & on[:, None, :] & ~np.eye(m, dtype=bool)[None]
    n_pairs = pair.sum((1, 2))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n_pairs > 0, np.where(pair, adj, 0.0).sum((1, 2)) / np.maximum(n_pairs, 1), 0.0)


def satterthwaite(parts, dfs) -> np.ndarray:
    """The Welch-Satterthwaite degrees of freedom of a sum of variance estimates `parts` with
    `dfs` each (arrays broadcast; an infinite df: a known part)."""
    num = sum(parts) ** 2
    with np.errstate(invalid="ignore", divide="ignore"):
        den = sum(np.where(np.isfinite(d), np.asarray(a, float) ** 2 / d, 0.0) for a, d in zip(parts, dfs))
        return np.where(den > 0, num / den, np.inf)


def pool_family(fd: FoldData, how: Pooling = Pooling(), *, fold_corr=0.0, extra_var=0.0,
                extra_df=np.inf) -> dict[str, np.ndarray]:
    """Random-effects pooling of each contrast's periods, a family per row, as `how` pools (docs/analysis.md "Verdicts
    over periods"); `fold_corr` the folds' overlap; `extra_var` a variance no period's dispersion shows (the calendar
    part), added whole with its df `extra_df`. Returns arrays [S, m] (mu, se, p, tau2, ...) and [S] r2."""
    theta, seed_share, seed_var, fold_n, seed_df = fd.theta, fd.seed_share, fd.seed_var, fd.n_informative, fd.seed_df
    rope, share, share_level, isolate_level = how.rope, how.share, how.share_level, how.isolate_level
    theta = np.asarray(theta, float)
    s, m, k = theta.shape
    var = np.broadcast_to(np.asarray(fd.var, float), theta.shape)
    c_share = np.clip(np.nan_to_num(np.broadcast_to(np.asarray(seed_share, float), (s, m))), 0.0, 1.0)
    inc = ~np.isnan(theta)
    periods = inc.sum(-1)
    df_own = periods - 1
    undefined = (inc & np.isinf(theta)).any(-1)
    ok = (periods >= 2) & ~undefined
    th = np.where(inc & np.isfinite(theta), theta, 0.0)
    bad = (inc & (~np.isfinite(var) | (var <= 0))).any(-1)
    v_all = np.where(inc & ~bad[..., None], var, 1.0)
    v = np.where(bad[..., None], 1.0, v_all * (1 - c_share[..., None]))  # the part that varies between folds
    v = np.where(v > 0, v, v_all)  # a share of 1 leaves nothing to weigh by: the whole variance
    w = np.where(inc, 1.0 / v, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        big_w = w.sum(-1)
        mu_fe = (w * th).sum(-1) / big_w
        q = (w * (th - mu_fe[..., None]) ** 2).sum(-1)
        c = big_w - (w**2).sum(-1) / big_w
        tau2_own = np.maximum(0.0, (q - df_own) / c)
        i2 = np.where(q > 0, np.maximum(0.0, (q - df_own) / q), 0.0)


    def fit(tau2):
        ws = np.where(inc, 1.0 / (v + tau2[..., None]), 0.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            mu = (ws * th).sum(-1) / ws.sum(-1)
            resid = np.where(inc, th - mu[..., None], 0.0)
            # the common seed part of the weighted mean: (sum_k w_k sqrt(c v_k))^2, weights normalised
            common = np.where(bad, np.broadcast_to(np.asarray(seed_var, float), (s, m)),
                              c_share * ((ws * np.sqrt(np.where(inc, v_all, 0.0))).sum(-1) / ws.sum(-1)) ** 2)
            return ws, mu, (ws * resid**2).sum(-1), np.sqrt(ws) * resid, np.nan_to_num(common)

    def shared_tau2(members):  # DL tau^2 over the contrasts `members` [S, m]: one per family
        n_in = members.sum(-1)
        with np.errstate(invalid="ignore", divide="ignore"):
            t2 = np.maximum(0.0, (np.where(members, q, 0).sum(-1) - np.where(members, df_own, 0).sum(-1))
                            / np.where(members, c, 0).sum(-1))
        return np.where(n_in >= 2, t2, 0.0)

    # the family's shared fit: DL tau^2 over the contrasts that can share, one HKSJ scale
    can = ok & ~bad
    n_can = can.sum(-1)
    tau2_sh = shared_tau2(can)
    ws_sh, mu_sh, qs_sh, e_sh, common_sh = fit(np.broadcast_to(tau2_sh[:, None], (s, m)))
    share_p = _scale_excess_p(qs_sh, df_own, can)
    flagged = can & (n_can >= 2)[:, None] & ~(np.nan_to_num(share_p, nan=0.0) > share_level)
    if how.isolate_flagged and bool(share):
        # a contrast flagged at `isolate_level` leaves the family's tau^2 and scale: refit the
        # others, and test them again against each other, until none is flagged
        isolated = can & (n_can >= 2)[:, None] & (np.nan_to_num(share_p, nan=1.0) <= isolate_level)
        for _ in range(m):
            if not isolated.any():
                break
            flagged = flagged | isolated
            can = can & ~isolated
            n_can = can.sum(-1)
            tau2_sh = shared_tau2(can)
            ws_sh, mu_sh, qs_sh, e_sh, common_sh = fit(np.broadcast_to(tau2_sh[:, None], (s, m)))
            again = _scale_excess_p(qs_sh, df_own, can)
            isolated = can & (n_can >= 2)[:, None] & (np.nan_to_num(again, nan=1.0) <= isolate_level)
            flagged = flagged | (can & (n_can >= 2)[:, None] & ~(np.nan_to_num(again, nan=0.0) > share_level))
    shared = bool(share) & can & (n_can >= 2)[:, None] & ~flagged
    r2 = np.where(shared.any(-1), _residual_r2(e_sh, inc, can), 0.0)
    df_tot = np.where(can, df_own, 0).sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        scale_sh = np.where(can, qs_sh, 0).sum(-1) / df_tot  # with isolate_flagged off, every contrast's
        df_sh = df_tot / (1 + (n_can - 1) * r2)               # residuals (a flagged one's too)
    # each contrast on its own (a flagged one: its scale exceeds the family's; K - 1 df)
    ws_own, mu_own, qs_own, _, common_own = fit(tau2_own)
    with np.errstate(invalid="ignore", divide="ignore"):
        scale_own = qs_own / np.maximum(df_own, 1)
        vary_own = scale_own / ws_own.sum(-1)
        vary_sh = scale_sh[:, None] / ws_sh.sum(-1)
        fixed_own = np.where(bad, 0.0, 1.0 / ws_own.sum(-1))  # equal weights: no known variance
        fixed_sh = 1.0 / ws_sh.sum(-1)
    overlap = np.ones((s, m))
    if np.any(np.asarray(fold_corr, float) != 0):  # folds that share training rows (`rules.periods`)
        rho = np.asarray(fold_corr, float)
        rho = rho[:, None] if rho.ndim == 3 else rho  # [S, K, K] -> one per family, every contrast
        f_own, f_sh = overlap_factor(ws_own, rho), overlap_factor(ws_sh, rho)
        vary_own, fixed_own, vary_sh, fixed_sh = vary_own * f_own, fixed_own * f_own, vary_sh * f_sh, fixed_sh * f_sh
        overlap = np.where(shared, f_sh, f_own)
    mu = np.where(shared, mu_sh, mu_own)
    extra = np.nan_to_num(np.broadcast_to(np.asarray(extra_var, float), (s, m)), nan=np.inf)
    common_seed = np.where(shared, common_sh, common_own)
    common = common_seed + extra
    vary = np.where(shared, vary_sh, vary_own)
    vary_fixed = np.where(shared, fixed_sh, fixed_own)
    se, se_fixed = np.sqrt(vary + common), np.where(bad, 0.0, np.sqrt(vary_fixed + common))
    df = np.where(shared, np.broadcast_to(df_sh[:, None], (s, m)), df_own).astype(float)
    tau2 = np.where(shared, np.broadcast_to(tau2_sh[:, None], (s, m)), tau2_own)
    # the degrees of freedom of the seed-level estimates behind the variances
    n_fold = np.full(theta.shape, np.inf) if fold_n is None else np.asarray(fold_n, float)
    df_seed = np.full((s, m), np.inf) if seed_df is None else np.asarray(seed_df, float)
    df_extra = np.broadcast_to(np.asarray(extra_df, float), (s, m))
    with np.errstate(invalid="ignore", divide="ignore"):
        df_common = satterthwaite([common_seed, extra], [df_seed, df_extra])  # the parts added whole
        df_within = np.where(inc, FOLD_VAR_DF * (n_fold - 1), 0).sum(-1)
        df_fixed = satterthwaite([vary_fixed, common], [df_within, df_common])
        # Cochran's Q against F(K - 1, one fold variance's df), not chi2: each term divides by its
        # own estimated variance (a t^2 with that df), so the sum's tail is heavier (1.24 x the
        # chi2 scale at 32 seeds and 8 folds, where the chi2 read 0.062 for 0.05)
        df_fold = np.where(inc, FOLD_VAR_DF * (n_fold - 1), 0).sum(-1) / np.maximum(periods, 1)
        q_p = sps.f.sf(q / np.maximum(df_own, 1), np.maximum(df_own, 1), np.where(np.isfinite(df_fold), df_fold, 1e12))
        df = np.fmin(df, satterthwaite([vary, common], [df, df_common]))
    t_dist, fixed_dist = sps.t(df), sps.t(np.where(np.isfinite(df_fixed), df_fixed, 1e12))

    def both(fn) -> np.ndarray:  # the larger p of the HKSJ (t, se) and the DL (t of the seeds' df, se_fixed) test
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            return np.fmax(fn(t_dist, se), np.where(se_fixed > 0, fn(fixed_dist, se_fixed), 0.0))

    p_two = both(lambda dist, x: 2 * dist.sf(np.abs(mu) / x))
    p_one = both(lambda dist, x: dist.sf(mu / x))
    p_tost = both(lambda dist, x: np.maximum(dist.sf((mu + rope) / x), dist.cdf((mu - rope) / x)))
    zero_se = ~(se > 0)
    p_two = np.where(zero_se, np.where(mu == 0, 1.0, 0.0), p_two)
    p_one = np.where(zero_se, np.where(mu > 0, 0.0, 1.0), p_one)
    nan = ~ok
    out = dict(mu=mu, se=se, se_fixed=se_fixed, df=df, df_fixed=df_fixed, p=p_one if how.one_sided else p_two,
               p_two_sided=p_two, p_tost=p_tost, tau2=tau2, tau2_own=tau2_own, i2=i2, q_p=q_p, common=common)
    out = {key: np.where(nan, np.nan, val) for key, val in out.items()}
    for key in ("tau2", "tau2_own", "i2", "q_p"):
        out[key] = np.where(bad, np.nan, out[key])
    out.update(periods=periods, shared=shared, share_p=share_p, r2=r2, overlap=np.where(nan, np.nan, overlap))
    return out


def hksj(theta: np.ndarray, var: np.ndarray, *, rope: float = 0.0, tail: np.ndarray | float = 0.025,
         seed_share=0.0) -> dict[str, np.ndarray]:
    """Random-effects pooling of K period effects per row, one contrast (`pool_family` with m = 1)."""
    theta = np.asarray(theta, float)
    s = theta.shape[0]
    r = pool_family(FoldData(theta[:, None, :], np.asarray(var, float)[:, None, :],
                             seed_share=np.broadcast_to(np.asarray(seed_share, float), (s,))[:, None]),
                    Pooling(rope, share=False))
    out = {key: r[key][:, 0] for key in ("mu", "se", "se_fixed", "df", "df_fixed", "p", "p_tost", "tau2", "i2", "q_p")}
    out["low"], out["high"] = pooled_bounds(out["mu"], out["se"], out["se_fixed"], out["df"],
                                            np.broadcast_to(np.asarray(tail, float), (s,)), out["df_fixed"])
    return out


def seed_level_effect(d_test) -> dict[str, np.ndarray]:
    """The test-segment effect per row of d_test [S, K, n]: the Hodges-Lehmann effect of the seeds'
    fold-averaged differences, its `var` with df `FOLD_VAR_DF` (n - 1), `p` and `n`."""
    d = np.asarray(d_test, float)
    with np.errstate(invalid="ignore"):
        present = ~np.isnan(d)
        seed = np.where(present.any(1), np.nansum(np.where(present, d, 0.0), 1) / np.maximum(present.sum(1), 1), np.nan)
    est = fold_estimates(seed)
    n = np.asarray(est["n_informative"], float)
    return dict(theta=est["theta"], var=est["var"], df=FOLD_VAR_DF * np.maximum(n - 1, 0.0), p=est["p"], n=n)


KEYS = ("estimate", "p", "p_greater", "p_less", "p_tost", "low", "high")
"""The statistics of `inference.rank_test`, one per row."""


def is_tie(d) -> np.ndarray:
    """Where a per-unit difference is an exact tie (0: identical outcomes, or both sides diverged)."""
    return np.asarray(d, float) == 0.0


def informative_rank_test(d, *, rope: float = 0.0, tail=0.025) -> RankTest:
    """`inference.rank_test` per row of d [S, n] after dropping its ties, with `n_informative` and `tied_share`."""
    d = np.atleast_2d(np.asarray(d, float))
    s, n = d.shape
    tails = np.broadcast_to(np.asarray(tail, float), (s,))
    present = ~np.isnan(d)
    keep = present & ~is_tie(d)
    counts = keep.sum(1)
    out = {k: np.full(s, np.nan) for k in KEYS}
    for c in np.unique(counts):
        if c == 0:
            continue
        rows = np.nonzero(counts == c)[0]
        sub = d[rows][keep[rows]].reshape(len(rows), int(c))  # row-major: each row's kept values in order
        t = tails[rows]
        r = rank_test(sub, rope=rope, tail=t if np.unique(t).size > 1 else float(t[0]))
        for k in KEYS:
            out[k][rows] = getattr(r, k)
    with np.errstate(invalid="ignore", divide="ignore"):
        tied = np.where(present.sum(1) > 0, (present & ~keep).sum(1) / present.sum(1), np.nan)
    return RankTest(**out, n_informative=counts, tied_share=tied)


def cannot_decide(n_informative, level) -> np.ndarray:
    """Where n informative pairs cannot reach a two-sided p <= `level` even with every sign equal
    (`inference.smallest_p`): no effect of any size, and no equivalence, can be shown with them."""
    n = np.asarray(n_informative)
    lv = np.broadcast_to(np.asarray(level, float), n.shape)
    flat = [smallest_p(int(k)) > float(a) if k > 0 else True for k, a in zip(n.ravel(), lv.ravel())]
    return np.asarray(flat, bool).reshape(n.shape)


FOLD_TABLE_NEEDS = ("fold", "train_runs", "train_rows", "group_rows")
"""The fold-table columns the overlap is read from (`data.segments.FOLD_TABLE_COLUMNS`)."""


@dataclass(frozen=True)
class FoldOverlap:
    """A layout's overlap: `corr` [K, K] of the fold effects the shared training gives, `factor`
    NB's for equal weights."""

    folds: tuple[int, ...]
    corr: np.ndarray
    factor: float


def parse_runs(text: str) -> tuple[tuple[int, int], ...]:
    """The runs of rows of a fold table's `train_runs` cell (`start:end` half-open, space-separated)."""
    out = []
    for part in str(text).split():
        lo, _, hi = part.partition(":")
        out.append((int(lo), int(hi)))
    return tuple(out)


def shared_rows(runs_a, runs_b) -> int:
    """Rows two folds' training runs have in common."""
    return int(sum(max(0, min(a1, b1) - max(a0, b0)) for a0, a1 in runs_a for b0, b1 in runs_b))


def loading_matrix(train_rows, val_rows, shares) -> np.ndarray:
    """Lambda [K, K]: sqrt(lambda_k lambda_l) where folds k and l share training rows, lambda_k = n2_k / n1_k."""
    n1, n2 = np.asarray(train_rows, float), np.asarray(val_rows, float)
    if (n1 <= 0).any() or (n2 <= 0).any():
        raise ValueError("overlap: every fold needs training and validation rows (n1, n2 > 0)")
    lam = n2 / n1
    s = np.asarray(shares, bool).copy()
    np.fill_diagonal(s, False)
    s = s | s.T
    np.fill_diagonal(s, s.any(1))
    return np.where(s, np.sqrt(np.outer(lam, lam)), 0.0)


def correlation_of(loadings) -> np.ndarray:
    """The correlation of fold effects that a loading matrix Lambda stands for: Lambda / (1 +
    Lambda) elementwise (rho = n2 / (n1 + n2) for lambda = n2 / n1); `loadings_of` inverts it."""
    lam = np.asarray(loadings, float)
    return lam / (1.0 + lam)


def loadings_of(fold_corr, k: int) -> np.ndarray:
    """Lambda [..., K, K] from `fold_corr`: one rho for every pair (NB's equal folds), or `FoldOverlap.corr`."""
    rho = np.asarray(fold_corr, float)
    if rho.ndim == 0:
        rho = np.full((k, k), float(rho))
    if rho.shape[-2:] != (k, k):
        raise ValueError(f"fold_corr: expected a number or a [..., {k}, {k}] matrix, got shape {rho.shape}")
    if np.isnan(rho).any() or (rho < 0).any() or (rho >= 1).any():
        raise ValueError("fold_corr: correlations must lie in [0, 1)")
    return rho / (1.0 - rho)


def overlap_factor(weights, fold_corr) -> np.ndarray:
    """F = 1 + (sqrt w)' Lambda (sqrt w) / sum w per row of the random-effects `weights`: the pooled
    variance's growth."""
    w = np.asarray(weights, float)
    lam = loadings_of(fold_corr, w.shape[-1])
    r = np.sqrt(np.where(w > 0, w, 0.0))
    with np.errstate(invalid="ignore", divide="ignore"):
        quad = np.einsum("...k,...kl,...l->...", r, np.broadcast_to(lam, w.shape[:-1] + lam.shape[-2:]), r)
        return 1.0 + quad / w.sum(-1)


def nb_factor(fold_corr, k: int | None = None) -> float:
    """The factor for K folds of equal weight (`overlap_factor` with w = 1): 1 + sum Lambda / K;
    NB's 1 + K n2 / n1 for equal folds that all share rows. `k` is needed with a number rho."""
    rho = np.asarray(fold_corr, float)
    k = rho.shape[-1] if rho.ndim else int(k)
    return float(overlap_factor(np.ones(k), rho))


def fold_overlap(table: pd.DataFrame, history=None) -> FoldOverlap:
    """The overlap of a fold table's folds (FOLD_TABLE_NEEDS), for one `history` where it has a
    `history` column; a missing column or history is a one-line DataError."""
    missing = [c for c in FOLD_TABLE_NEEDS if c not in table.columns]
    if missing:
        raise DataError(f"fold table: missing column {missing[0]!r} (the overlap of folds reads {', '.join(FOLD_TABLE_NEEDS)})")
    t = table
    if "history" in t.columns:
        if history is None:
            if t["history"].nunique() > 1:
                raise DataError("fold table: several histories; name the one whose folds overlap (history=...)")
        else:
            t = t[t["history"] == history]
            if t.empty:
                raise DataError(f"fold table: no folds of history {history!r}")
    t = t.sort_values("fold")
    try:
        runs = [parse_runs(x) for x in t["train_runs"]]
    except ValueError:
        raise DataError("fold table: column 'train_runs' must hold start:end runs of rows") from None
    k = len(runs)
    shares = np.array([[shared_rows(runs[i], runs[j]) > 0 for j in range(k)] for i in range(k)], bool)
    corr = correlation_of(loading_matrix(t["train_rows"].to_numpy(float), t["group_rows"].to_numpy(float), shares))
    return FoldOverlap(tuple(int(f) for f in t["fold"]), corr, nb_factor(corr) if k else 1.0)
