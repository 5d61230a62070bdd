"""Pooling of per-period effects (walk-forward folds): the statistics the period rule decides on.

- `fold_estimates`: one fold's effect (Hodges-Lehmann) and its squared standard error, read off
  the fold's signed-rank interval;
- `shared_seed_variance`: the variance of the seeds' part that every fold shares (the same seed
  index starts from the same weights in every period), which the fold dispersion cannot see;
- `hksj`: the random-effects combination of the K fold effects with the Hartung-Knapp-Sidik-
  Jonkman interval (DerSimonian-Laird tau^2, t with K - 1 degrees of freedom, the variance factor
  floored at 1: the "modified" HKSJ, never narrower than the fixed-effect interval), plus the
  shared seed variance. With K = 3..6 periods a normal interval would be far too narrow; the t
  with K - 1 df is what keeps the rule honest at small K (the calibration shows it);
- `t_bounds`: the pooled interval at any per-side tail (the Holm level's, for the decision).

Vectorised over a leading axis of datasets: the verdicts call them on one gem (S = 1), the period
calibration on thousands of simulated ones, so both pool the same way.
"""

from __future__ import annotations

import numpy as np
from scipy import stats as sps

from tune_gems.stats.inference import rank_test

FOLD_SE_TAIL = 0.025
"""Per-side tail of the per-fold rank interval whose half-width, over the normal quantile, is
the fold effect's standard error (the weights of the random-effects combination)."""


def fold_estimates(d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(theta, var) per row of per-seed differences d [S, n]: the Hodges-Lehmann effect and the
    squared standard error read off its 95% signed-rank interval (inf where too few seeds)."""
    with np.errstate(over="ignore"):
        r = rank_test(d, tail=FOLD_SE_TAIL)
    se = (r["high"] - r["low"]) / (2 * sps.norm.ppf(1 - FOLD_SE_TAIL))
    with np.errstate(invalid="ignore"):
        var = np.where(np.isfinite(se) & (se > 0), se**2, np.inf)
    return r["estimate"], var


def shared_seed_variance(d: np.ndarray) -> np.ndarray:
    """Per row of d [S, K, n] (per-seed differences, seeds aligned across the K folds): the
    variance that the seeds' part shared by every fold adds to the mean, sigma_c^2 / n, from the
    two-way ANOVA of seeds x folds, sigma_c^2 = max(0, (MS_seeds - MS_residual) / K), over the
    seeds whose differences are finite in every fold (0 with fewer than 2 such seeds). The fold
    effects' dispersion cannot see this part: every fold carries the same seeds' share."""
    d = np.asarray(d, float)
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
        out = np.maximum(0.0, (ms_seed - ms_resid) / k) / m
    return np.where(m >= 2, out, 0.0)


def t_bounds(mu, se, df, tail) -> tuple[np.ndarray, np.ndarray]:
    """(low, high): mu -+ the t quantile with `df` degrees of freedom at `tail` per side, times se."""
    tq = sps.t.ppf(1 - tail, df)
    return mu - tq * se, mu + tq * se


def hksj(theta: np.ndarray, var: np.ndarray, *, rope: float = 0.0, tail: np.ndarray | float = 0.025,
         extra_var: np.ndarray | float = 0.0) -> dict[str, np.ndarray]:
    """Random-effects pooling of K period effects per row (theta, var: [S, K], K >= 2).

    DerSimonian-Laird tau^2; modified Hartung-Knapp-Sidik-Jonkman variance (factor floored at 1);
    t with K - 1 df. A row whose variances are not all finite is pooled with equal weights (the
    plain t-test of the K effects). `extra_var` [S] is added to the pooled effect's variance
    (`shared_seed_variance`), the t keeping K - 1 degrees of freedom (conservative: a
    Satterthwaite df grows exactly when the fold dispersion is small by chance, which the
    calibration showed liberal at K = 3). Returns arrays [S]: mu, se, low,
    high (at `tail` per side), p (two-sided, H0 mu = 0), p_tost (+-rope), tau2, i2, q_p
    (Cochran's Q test)."""
    theta = np.asarray(theta, float)
    var = np.asarray(var, float)
    s, k = theta.shape
    df = k - 1
    undefined = ~np.isfinite(theta).all(1)  # a fold whose pairs mostly diverged one way
    theta = np.where(undefined[:, None], 0.0, theta)
    bad = ~np.isfinite(var).all(1) | (var <= 0).any(1)
    v = np.where(bad[:, None], 1.0, var)
    w = 1.0 / v
    mu_fe = (w * theta).sum(1) / w.sum(1)
    q = (w * (theta - mu_fe[:, None]) ** 2).sum(1)
    c = w.sum(1) - (w**2).sum(1) / w.sum(1)
    tau2 = np.maximum(0.0, (q - df) / c)
    with np.errstate(invalid="ignore", divide="ignore"):
        i2 = np.where(q > 0, np.maximum(0.0, (q - df) / q), 0.0)
    ws = 1.0 / (v + tau2[:, None])
    mu = (ws * theta).sum(1) / ws.sum(1)
    factor = (ws * (theta - mu[:, None]) ** 2).sum(1) / df
    periods = np.where(bad, factor, np.maximum(factor, 1.0)) / ws.sum(1)
    se = np.sqrt(periods + extra_var)
    with np.errstate(invalid="ignore", divide="ignore"):
        t0 = mu / se
        p = 2 * sps.t.sf(np.abs(t0), df)
        p_tost = np.maximum(sps.t.sf((mu + rope) / se, df), sps.t.cdf((mu - rope) / se, df))
    p = np.where(undefined, np.nan, np.where(se > 0, p, np.where(mu == 0, 1.0, 0.0)))
    p_tost = np.where(undefined, np.nan, p_tost)
    q_p = np.where(bad | undefined, np.nan, sps.chi2.sf(q, k - 1))
    tau2 = np.where(bad, np.nan, tau2)
    i2 = np.where(bad, np.nan, i2)
    mu = np.where(undefined, np.nan, mu)
    low, high = t_bounds(mu, se, df, np.broadcast_to(np.asarray(tail, float), (s,)))
    return dict(mu=mu, se=se, low=low, high=high, p=p, p_tost=p_tost, tau2=tau2, i2=i2, q_p=q_p)
