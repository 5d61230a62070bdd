"""Verdicts over periods: per-fold effects and one pooled effect that carries period-to-period
variation (walk-forward folds, issue 20), and the one-period rule when there is one fold.

Why. The seed rule (`verdicts.py`) says how an arm difference varies over seeds. On one price
history every seed sees the same validation period, so the seed interval cannot see whether the
effect holds in another period. With walk-forward folds (`data.folds`: members carry an integer
`fold`, each fold evaluated on its own validation window, seed index s shared across folds and
arms) the periods are replicated, and the verdict becomes:

- **per-fold effects**: the gem's seed-paired differences inside fold k (`selectors.wiring_pairs`
  on the fold's cells), their Hodges-Lehmann effect and signed-rank interval;
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
`keep wired`. It gathers the evidence and writes the reasons; the decisions are the rule
module's (`rules.pooling` for the pooled effect, `rules.periods.decide_periods` for K >= 2,
`rules.gates.one_period_gate` for K = 1), the functions `walk_forward_calibration.py` runs on
its simulated families.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tune_gems.analysis.pairing import Cells, Paired
from tune_gems.analysis.report import format_number
from tune_gems.analysis.rules.gates import one_period_gate
from tune_gems.analysis.rules.periods import decide_periods
from tune_gems.analysis.rules.pooling import fold_estimates, hksj, shared_seed_variance
from tune_gems.analysis.rules.thresholds import Thresholds
from tune_gems.analysis.rules.words import DECISIVE, EQUIVALENT
from tune_gems.analysis.selectors import placebo_selectors, wiring_pairs
from tune_gems.analysis.verdict_market_noise import OK as MARKET_OK
from tune_gems.stats.inference import rank_test

FOLD = "fold"

PERIOD_COLUMNS = ["folds", "period", "fold_effects", "pooled_effect", "pooled_ci_low", "pooled_ci_high",
                  "pooled_ci_level", "pooled_p", "pooled_p_adjusted", "pooled_tost_p_adjusted", "tau2", "i2",
                  "q_p", "fold_sd_diff", "combined_ci_low", "combined_ci_high"]
"""Columns this layer adds to verdicts.csv (docs/analysis.md "Verdicts over periods")."""


def fold_count(cells: Cells) -> int:
    """How many walk-forward folds the compared members span (1 without a `fold` column)."""
    t = cells.table
    return int(t[FOLD].nunique()) if FOLD in t.columns and len(t) else 1


def _fmt(x, f: str = "+.3g") -> str:
    return format_number(x, f, missing="nan")


def _fold_pairs(cells: Cells, gem: str, select, column: str, k: int) -> list[tuple[int, Paired]]:
    """(fold, its seed-paired differences) of one gem in every fold that pairs it."""
    out = []
    for f in sorted(cells.table[FOLD].unique()):
        pr = wiring_pairs(cells, gem, column=column, k=k, select=lambda t, f=f: select(t) & (t[FOLD] == f))
        if pr.n:
            out.append((int(f), pr))
    return out


def _aligned(folds: list[tuple[int, Paired]]) -> np.ndarray:
    """[1, K, n] differences of the units (member seeds) that every fold pairs (n may be 0)."""
    common = sorted(set.intersection(*(set(pr.units) for _, pr in folds)))
    rows = [[dict(zip(pr.units, pr.diffs))[u] for u in common] for _, pr in folds]
    return np.asarray(rows, float).reshape(1, len(folds), len(common))


def _pooled(folds: list[tuple[int, Paired]], th: Thresholds) -> dict:
    """One gem's fold effects and their pooling (`rules.pooling`) at the family level alpha."""
    est = [fold_estimates(pr.diffs[None, :]) for _, pr in folds]
    theta = np.array([e[0][0] for e in est])[None, :]
    var = np.array([e[1][0] for e in est])[None, :]
    aligned = _aligned(folds)
    extra = shared_seed_variance(aligned) if aligned.shape[2] else np.zeros(1)
    return dict(folds=folds, theta=theta, r=hksj(theta, var, rope=th.rope, tail=th.alpha / 2, extra_var=extra))


def period_verdicts(verdicts: pd.DataFrame, cells: Cells, gems, *, thresholds: Thresholds | None = None) -> pd.DataFrame:
    """The verdict table with the period columns (PERIOD_COLUMNS) and each verdict checked
    across periods (K >= 2 folds: `rules.periods.decide_periods`) or against one period's market
    noise (K = 1: `rules.gates.one_period_gate`): module docstring."""
    th = thresholds if thresholds is not None else Thresholds()
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
        real, _ = placebo_selectors(g, th.placebo_weight)
        folds = _fold_pairs(cells, g.name, real, row["outcome"], th.last_k)
        if len(folds) < 2:
            v.at[i, "period"] = f"{len(folds)} of {k_folds} folds pair this gem: no pooled effect"
            continue
        pooled[i] = _pooled(folds, th)
    rule = _period_rule(v, pooled, th.alpha)
    for j, i in enumerate(v.index):
        seed_verdict, verdict = str(v.at[i, "verdict"]), str(rule.verdict[0, j])
        if i not in pooled:
            if verdict != seed_verdict:  # decisive or equivalent by the seeds, never checked across periods
                v.at[i, "reason"] = f"{seed_verdict} by the seeds; {v.at[i, 'period']}: " + str(v.at[i, "reason"])
                v.at[i, "verdict"] = verdict
            continue
        info = pooled[i]
        r = info["r"]
        parts = []
        for (f, pr), th_f in zip(info["folds"], info["theta"][0]):
            ri = rank_test(pr.diffs[None, :], tail=th.alpha / 2)
            parts.append(f"fold {f}: {_fmt(th_f)} [{_fmt(ri['low'][0], '.3g')}, {_fmt(ri['high'][0], '.3g')}] ({pr.n} seeds)")
        v.loc[i, ["pooled_effect", "pooled_ci_low", "pooled_ci_high", "pooled_ci_level", "pooled_p",
                  "pooled_p_adjusted", "pooled_tost_p_adjusted", "tau2", "i2", "q_p"]] = [
            r["mu"][0], rule.low[0, j], rule.high[0, j], 1 - float(rule.level[0, j]), r["p"][0], rule.p_adjusted[0, j],
            rule.tost_p_adjusted[0, j], r["tau2"][0], r["i2"][0], r["q_p"][0]]
        v.at[i, "fold_effects"] = "; ".join(parts)
        v.at[i, "fold_sd_diff"] = _median_fold_spread(info["folds"])
        v.at[i, "period"] = f"pooled over {len(info['folds'])} validation periods (random effects, HKSJ)"
        v.at[i, "verdict"], v.at[i, "reason"] = verdict, _period_reason(v.loc[i], seed_verdict, verdict,
                                                                         bool(rule.flips[0, j]))
    return v


def _period_rule(v: pd.DataFrame, pooled: dict[int, dict], alpha: float):
    """`rules.periods.decide_periods` on the table's gems as one family (a gem without a pooled
    effect: NaN, left out of it; fold effects NaN-padded to the most folds)."""
    def col(key: str) -> np.ndarray:
        return np.array([[pooled[i]["r"][key][0] if i in pooled else np.nan for i in v.index]])

    k_max = max((info["theta"].shape[1] for info in pooled.values()), default=1)
    theta = np.full((1, len(v), k_max), np.nan)
    df = np.full((1, len(v)), np.nan)
    for j, i in enumerate(v.index):
        if i in pooled:
            k = pooled[i]["theta"].shape[1]
            theta[0, j, :k], df[0, j] = pooled[i]["theta"][0], k - 1
    seed = v["verdict"].to_numpy(dtype=object)[None, :]
    return decide_periods(seed, col("p"), col("p_tost"), col("mu"), col("se"), df, theta, col("q_p"), alpha=alpha)


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


def _period_reason(r, seed_verdict: str, verdict: str, flips: bool) -> str:
    """The reason of one gem's verdict across K >= 2 periods, from its seed verdict and the period rule's."""
    reason = str(r["reason"])
    pooled = _pooled_text(r)
    if flips:
        return f"the effect changes sign between periods (Cochran's Q p {_fmt(r['q_p'], '.2g')}): {pooled}; seeds: {reason}"
    if seed_verdict in DECISIVE:
        if verdict == seed_verdict:
            return f"{reason}; holds across periods: {pooled}"
        return f"not confirmed across periods (the seeds say {seed_verdict}): {pooled}; {reason}"
    if seed_verdict == EQUIVALENT and verdict != seed_verdict:
        return (f"equivalence not confirmed across periods (pooled TOST Holm p "
                f"{_fmt(r['pooled_tost_p_adjusted'], '.2g')}): {pooled}; {reason}")
    return f"{reason}; {pooled}"


def _one_period(v: pd.DataFrame) -> pd.DataFrame:
    """K = 1: the combined seed + market-noise half-width gates keep / harmful / equivalent
    (`rules.gates.one_period_gate`); every reason says the verdict is conditional on one
    validation period."""
    def col(name: str) -> np.ndarray:
        return v[name].to_numpy(float) if name in v.columns else np.full(len(v), np.nan)

    applies = (v["market_noise"] == MARKET_OK).to_numpy(bool) if "market_noise" in v.columns else np.zeros(len(v), bool)
    gate = one_period_gate(v["verdict"].to_numpy(dtype=object), col("effect"), col("ci_low"), col("ci_high"),
                           col("market_ci_low"), col("market_ci_high"), rope=col("rope"), applies=applies)
    for j, i in enumerate(v.index):
        v.at[i, "period"] = "conditional on one validation period"
        seed_verdict, verdict, reason = str(v.at[i, "verdict"]), str(gate.verdict[j]), str(v.at[i, "reason"])
        if gate.applied[j]:
            lo, hi = gate.low[j], gate.high[j]
            v.at[i, "combined_ci_low"], v.at[i, "combined_ci_high"] = lo, hi
            both = (f"seed and market-noise intervals combined: [{_fmt(lo, '.3g')}, {_fmt(hi, '.3g')}] "
                    f"at {v.at[i, 'ci_level']:.1%}")
            if verdict != seed_verdict and seed_verdict in DECISIVE:
                reason = f"not confirmed by the {both}, which includes 0; {reason}"
            elif verdict != seed_verdict:
                reason = (f"equivalence not confirmed against market noise: the {both} "
                          f"is not inside +-{v.at[i, 'rope']:g}; {reason}")
        v.at[i, "verdict"] = verdict
        v.at[i, "reason"] = f"{reason}; conditional on one validation period (data.folds: 1)"
    return v
