"""Verdicts over periods: per-fold effects and one pooled effect that carries period-to-period
variation (walk-forward folds, issue 20), and the one-period rule when there is one fold.

Why. The seed rule (`verdicts.py`) says how an arm difference varies over seeds. On one price
history every seed sees the same validation period, so the seed interval cannot see whether the
effect holds in another period. With walk-forward folds (`data.folds`: members carry an integer
`fold`, each fold evaluated on its own validation window, seed index s shared across folds and
arms) the periods are replicated, and the verdict becomes:

- **per-fold effects**: the gem's seed-paired differences inside fold k (`designs.paired` on the
  fold's cells), their Hodges-Lehmann effect and signed-rank interval;
- **the pooled effect**: a random-effects combination of the fold effects with the
  Hartung-Knapp-Sidik-Jonkman interval (DerSimonian-Laird tau^2, t with K - 1 degrees of
  freedom, the variance factor floored at 1, the "modified" HKSJ that is never narrower than the
  fixed-effect interval), plus the variance of the seeds' part that every fold shares (the same
  seed index starts from the same weights in every period: `shared_seed_variance`, which the
  fold dispersion cannot see). With K = 3..6 periods a normal interval would be far too narrow;
  the t with K - 1 df is what keeps the rule honest at small K (the calibration shows it);
- **heterogeneity**: tau^2 (DerSimonian-Laird), I^2 and Cochran's Q p;
- **the verdict**: `keep wired` / `harmful` only when the seed rule on the fold-averaged per-seed
  differences says so (that test carries a seed's part of the effect shared across periods)
  AND the pooled interval at its Holm level excludes 0 on the same side (that one carries the
  periods' spread). A gem whose fold effects go both ways with significant heterogeneity
  reads `inconclusive: inconsistent across periods`, whatever its pooled mean; an `equivalent`
  needs the pooled interval inside +-ROPE too (a regime flip averages to ~0 over seeds).

With one fold (every run before issue 20, or `data.folds` with K = 1) the verdict is the seed
rule's with the market-noise gate of one history, made calibrated: the seed interval and the
market-noise interval are two variances of one difference (seeds on a fixed history; the
history's luck for fixed policies), so a `keep wired` / `harmful` / `equivalent` must hold for
the combined interval, each side sqrt(seed side^2 + market half-width^2) from the effect at the
same level; requiring each interval alone to exclude 0 is up to ~3x too liberal when the two
are of similar size. The gate applies with diverged members too (the market interval then
covers the surviving pairs; an infinite seed side stays infinite). Its reason says the
verdict is conditional on one validation period.

This layer only makes a verdict more cautious: it never turns an `inconclusive` into a
`keep wired`. `walk_forward_calibration.py` simulates the rule exactly as it is applied here.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats as sps

from tune_gems.analysis import defaults
from tune_gems.analysis.pairing import Cells, Paired, paired
from tune_gems.stats.inference import holm, holm_levels, rank_test
from tune_gems.analysis.verdict_market_noise import OK as MARKET_OK
from tune_gems.analysis.report import format_number

FOLD = "fold"
INCONSISTENT = "inconclusive: inconsistent across periods"
DECISIVE = ("keep wired", "harmful")
FOLD_SE_TAIL = 0.025
"""Per-side tail of the per-fold rank interval whose half-width, over the normal quantile, is
the fold effect's standard error (the weights of the random-effects combination)."""

PERIOD_COLUMNS = ["folds", "period", "fold_effects", "pooled_effect", "pooled_ci_low", "pooled_ci_high",
                  "pooled_ci_level", "pooled_p", "pooled_p_adjusted", "pooled_tost_p_adjusted", "tau2", "i2",
                  "q_p", "fold_sd_diff", "combined_ci_low", "combined_ci_high"]
"""Columns this layer adds to verdicts.csv (docs/analysis.md "Verdicts over periods")."""


def fold_count(cells: Cells) -> int:
    """How many walk-forward folds the compared members span (1 without a `fold` column)."""
    t = cells.table
    return int(t[FOLD].nunique()) if FOLD in t.columns and len(t) else 1


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
    tq = sps.t.ppf(1 - np.broadcast_to(np.asarray(tail, float), (s,)), df)
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
    return dict(mu=mu, se=se, low=mu - tq * se, high=mu + tq * se, p=p, p_tost=p_tost, tau2=tau2, i2=i2, q_p=q_p)


def inconsistent(theta: np.ndarray, q_p: np.ndarray, alpha: float) -> np.ndarray:
    """Rows whose period effects go both ways with significant heterogeneity (Q p <= alpha)."""
    theta = np.atleast_2d(theta)
    return (theta > 0).any(1) & (theta < 0).any(1) & (np.nan_to_num(q_p, nan=1.0) <= alpha)


def combined_bounds(effect: float, seed_low: float, seed_high: float, market_low: float, market_high: float) -> tuple[float, float]:
    """(low, high) of one difference's interval with both the seeds' and the history's variance:
    each side's distance from the effect is sqrt(seed side^2 + market half-width^2) (two
    intervals at one level, nearly normal; the seed side is the rank interval's own, so a side
    that divergence makes infinite stays infinite)."""
    h_m = (market_high - market_low) / 2
    return effect - np.hypot(effect - seed_low, h_m), effect + np.hypot(seed_high - effect, h_m)


def _fmt(x, f: str = "+.3g") -> str:
    return format_number(x, f, missing="nan")


def _fold_pairs(cells: Cells, mode: str, select, column: str, k: int, ignore: tuple[str, ...]) -> list[tuple[int, Paired]]:
    """(fold, its seed-paired differences) of one gem in every fold that pairs it."""
    from tune_gems.analysis.selectors import MEASURE, WIRE

    out = []
    for f in sorted(cells.table[FOLD].unique()):
        pr = paired(cells, mode, WIRE, MEASURE, column=column, k=k, ignore=ignore,
                    select=lambda t, f=f: select(t) & (t[FOLD] == f))
        if pr.n:
            out.append((int(f), pr))
    return out


def _aligned(folds: list[tuple[int, Paired]]) -> np.ndarray:
    """[1, K, n] differences of the units (member seeds) that every fold pairs (n may be 0)."""
    common = sorted(set.intersection(*(set(pr.units) for _, pr in folds)))
    rows = [[dict(zip(pr.units, pr.diffs))[u] for u in common] for _, pr in folds]
    return np.asarray(rows, float).reshape(1, len(folds), len(common))


def period_verdicts(verdicts: pd.DataFrame, cells: Cells, gems, *, alpha: float = defaults.ALPHA,
                    rope: float = defaults.ROPE, last_k: int = defaults.LAST_K,
                    placebo_weight: float = defaults.PLACEBO_WEIGHT) -> pd.DataFrame:
    """The verdict table with the period columns (PERIOD_COLUMNS) and each verdict checked
    across periods (K >= 2 folds) or against one period's market noise (K = 1): module docstring."""
    from tune_gems.analysis.selectors import placebo_selectors as _selectors

    v = verdicts.copy()
    for c in PERIOD_COLUMNS:
        v[c] = np.nan if c not in ("period", "fold_effects") else ""
    v["period"] = v["period"].astype(object)
    v["fold_effects"] = v["fold_effects"].astype(object)
    k_folds = fold_count(cells)
    v["folds"] = k_folds
    if k_folds == 1:
        return _one_period(v)
    by_gem = {g.name: g for g in gems}
    pooled: dict[int, dict] = {}
    for i, row in v.iterrows():
        g = by_gem.get(row["gem"])
        if g is None or not row["n_seeds"] or not np.isfinite(row["n_seeds"]):
            continue
        real, _ = _selectors(g, placebo_weight)
        folds = _fold_pairs(cells, f"gems.{g.name}.mode", real, row["outcome"], last_k, (f"gems.{g.name}.weight",))
        if len(folds) < 2:
            v.at[i, "period"] = f"{len(folds)} of {k_folds} folds pair this gem: no pooled effect"
            continue
        est = [fold_estimates(pr.diffs[None, :]) for _, pr in folds]
        theta = np.array([e[0][0] for e in est])[None, :]
        var = np.array([e[1][0] for e in est])[None, :]
        aligned = _aligned(folds)
        extra = shared_seed_variance(aligned) if aligned.shape[2] else np.zeros(1)
        pooled[i] = dict(folds=folds, theta=theta, var=var, extra=extra,
                         r=hksj(theta, var, rope=rope, tail=alpha / 2, extra_var=extra))
    idx = list(pooled)
    p = np.array([pooled[i]["r"]["p"][0] for i in idx])
    p_adj = holm(p) if idx else p
    pt_adj = holm(np.array([pooled[i]["r"]["p_tost"][0] for i in idx])) if idx else p
    levels = holm_levels(p, alpha) if idx else p
    for j, i in enumerate(idx):
        info = pooled[i]
        r = hksj(info["theta"], info["var"], rope=rope, tail=float(levels[j]) / 2, extra_var=info["extra"])
        parts = []
        for (f, pr), th in zip(info["folds"], info["theta"][0]):
            ri = rank_test(pr.diffs[None, :], tail=alpha / 2)
            parts.append(f"fold {f}: {_fmt(th)} [{_fmt(ri['low'][0], '.3g')}, {_fmt(ri['high'][0], '.3g')}] ({pr.n} seeds)")
        v.loc[i, ["pooled_effect", "pooled_ci_low", "pooled_ci_high", "pooled_ci_level", "pooled_p",
                  "pooled_p_adjusted", "pooled_tost_p_adjusted", "tau2", "i2", "q_p"]] = [
            r["mu"][0], r["low"][0], r["high"][0], 1 - float(levels[j]), info["r"]["p"][0], p_adj[j], pt_adj[j],
            r["tau2"][0], r["i2"][0], r["q_p"][0]]
        v.at[i, "fold_effects"] = "; ".join(parts)
        v.at[i, "fold_sd_diff"] = _median_fold_spread(info["folds"])
        v.at[i, "period"] = f"pooled over {len(info['folds'])} validation periods (random effects, HKSJ)"
        verdict, reason = _across_periods(v.loc[i], inconsistent(info["theta"], info["r"]["q_p"], alpha)[0], alpha)
        v.at[i, "verdict"], v.at[i, "reason"] = verdict, reason
    for i in v.index.difference(idx):
        if v.at[i, "verdict"] in DECISIVE + ("equivalent",):
            v.at[i, "reason"] = f"{v.at[i, 'verdict']} by the seeds; {v.at[i, 'period']}: " + str(v.at[i, "reason"])
            v.at[i, "verdict"] = "inconclusive"
    return v


def _median_fold_spread(folds: list[tuple[int, Paired]]) -> float:
    """The median over folds of the sd of a fold's finite per-seed differences (the shape of one
    fold's comparison, for the period calibration)."""
    sds = [float(np.std(d[np.isfinite(d)], ddof=1)) for d in (pr.diffs for _, pr in folds) if np.isfinite(d).sum() > 1]
    return float(np.median(sds)) if sds else math.nan


def _pooled_text(r) -> str:
    return (f"pooled over periods {_fmt(r['pooled_effect'])}, {r['pooled_ci_level']:.1%} CI "
            f"[{_fmt(r['pooled_ci_low'], '.3g')}, {_fmt(r['pooled_ci_high'], '.3g')}] (HKSJ, Holm p "
            f"{_fmt(r['pooled_p_adjusted'], '.2g')}), tau^2 {_fmt(r['tau2'], '.3g')}, I^2 {_fmt(100 * r['i2'], '.0f')}%; "
            f"per fold: {r['fold_effects']}")


def _across_periods(r, flips: bool, alpha: float) -> tuple[str, str]:
    """The verdict of one gem with K >= 2 folds from its seed verdict and its pooled effect."""
    verdict, reason = str(r["verdict"]), str(r["reason"])
    pooled = _pooled_text(r)
    if flips:
        return INCONSISTENT, f"the effect changes sign between periods (Cochran's Q p {_fmt(r['q_p'], '.2g')}): {pooled}; seeds: {reason}"
    if verdict in DECISIVE:
        same_side = (r["pooled_ci_low"] > 0) if verdict == "keep wired" else (r["pooled_ci_high"] < 0)
        if r["pooled_p_adjusted"] <= alpha and same_side:
            return verdict, f"{reason}; holds across periods: {pooled}"
        return "inconclusive", f"not confirmed across periods (the seeds say {verdict}): {pooled}; {reason}"
    if verdict == "equivalent" and not (r["pooled_tost_p_adjusted"] <= alpha):
        return "inconclusive", (f"equivalence not confirmed across periods (pooled TOST Holm p "
                                f"{_fmt(r['pooled_tost_p_adjusted'], '.2g')}): {pooled}; {reason}")
    return verdict, f"{reason}; {pooled}"


def _one_period(v: pd.DataFrame) -> pd.DataFrame:
    """K = 1: the combined seed + market-noise half-width gates keep / harmful / equivalent;
    every reason says the verdict is conditional on one validation period."""
    for i, r in v.iterrows():
        v.at[i, "period"] = "conditional on one validation period"
        verdict, reason = str(r["verdict"]), str(r["reason"])
        if r.get("market_noise") == MARKET_OK and np.isfinite(r.get("effect", np.nan)):
            lo, hi = combined_bounds(r["effect"], r["ci_low"], r["ci_high"], r["market_ci_low"], r["market_ci_high"])
            v.at[i, "combined_ci_low"], v.at[i, "combined_ci_high"] = lo, hi
            both = (f"seed and market-noise intervals combined: [{_fmt(lo, '.3g')}, {_fmt(hi, '.3g')}] "
                    f"at {r['ci_level']:.1%}")
            if verdict in DECISIVE and not (lo > 0 or hi < 0):
                verdict, reason = "inconclusive", f"not confirmed by the {both}, which includes 0; {reason}"
            elif verdict == "equivalent" and not (-r["rope"] < lo and hi < r["rope"]):
                verdict, reason = "inconclusive", (f"equivalence not confirmed against market noise: the {both} "
                                                   f"is not inside +-{r['rope']:g}; {reason}")
        v.at[i, "verdict"] = verdict
        v.at[i, "reason"] = f"{reason}; conditional on one validation period (data.folds: 1)"
    return v
