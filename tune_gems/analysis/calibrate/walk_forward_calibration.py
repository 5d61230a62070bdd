"""Calibration of the verdict rule over periods (docs/analysis.md "Calibration over periods"): simulated families
through `rules.decision.decide` and the power statement `power.pooled_mde` at the datasets' median parts, vectorised
over datasets; the simulation adds only the data and, at one fold, the market-noise interval it models."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as sps

from tune_gems.analysis import defaults
from tune_gems.analysis.calibrate.calibration import Shape, _draws, mc_tolerance, median_parts, promise
from tune_gems.analysis.rules.decision import Evidence, decide
from tune_gems.analysis.rules.periods import fold_components, fold_data
from tune_gems.analysis.rules.settings import (
    HARMFUL_CODE, HETEROGENEOUS_CODE, INCONSISTENT_CODE, INSUFFICIENT_CODE, KEEP_CODE, Thresholds, verdict_codes,
)
from tune_gems.analysis.rules.power import pooled_mde
from tune_gems.analysis.text import text_table


@dataclass(frozen=True)
class Scenario:
    """What one simulated family faces (module docstring): effects and spreads in units of one
    fold's seed standard error (tau, tau_first, flip) or of the per-seed sd (effect)."""

    effect: float = 0.0
    tau: float = 0.0
    tau_first: float | None = None
    rho: float = 0.0
    flip: float = 0.0
    dist: str = "normal"
    gem_corr: float = 0.0
    fold_corr: float = 0.0
    ties: float = 0.0


def _divergence(rng, d: np.ndarray, p_div: float) -> np.ndarray:
    if p_div <= 0:
        return d
    hi = rng.random(d.shape) < p_div
    lo = rng.random(d.shape) < p_div
    return np.where(hi & lo, 0.0, np.where(hi, -np.inf, np.where(lo, np.inf, d)))


def _correlated(rng, size: tuple[int, ...], dist: str, corr: float, axis: int) -> np.ndarray:
    """Draws with correlation `corr` along `axis` (a common part of that share)."""
    common_shape = list(size)
    common_shape[axis] = 1
    return math.sqrt(corr) * _draws(rng, tuple(common_shape), dist) + math.sqrt(1 - corr) * _draws(rng, size, dist)


def simulate_family(rng, shapes: list[Shape], n_sim: int, folds: int, sc: Scenario) -> np.ndarray:
    """[n_sim, m, folds, n] per-seed differences of m gems; `sc.effect` and `sc.flip` go to the first."""
    m, n = len(shapes), shapes[0].n
    sd = np.array([s.sd for s in shapes])[None, :, None, None]
    se = sd / math.sqrt(n)
    taus = np.full(m, sc.tau)
    if sc.tau_first is not None:
        taus[0] = sc.tau_first
    seed_part = math.sqrt(sc.rho) * _correlated(rng, (n_sim, m, 1, n), sc.dist, sc.gem_corr, 1)
    own = math.sqrt(1.0 - sc.rho) * _correlated(rng, (n_sim, m, folds, n), sc.dist, sc.gem_corr, 1)
    u = _correlated(rng, (n_sim, m, folds, 1), "normal", sc.gem_corr, 1)
    if sc.fold_corr > 0 and folds > 1:
        u = math.sqrt(sc.fold_corr) * _correlated(rng, (n_sim, m, 1, 1), "normal", sc.gem_corr, 1) + \
            math.sqrt(1 - sc.fold_corr) * u
    period = taus[None, :, None, None] * se * u
    pattern = np.linspace(1.0, -1.0, folds) if folds > 1 else np.zeros(1)
    first = np.zeros(m)
    first[0] = 1.0
    shift = first[None, :, None, None] * (sc.effect + sc.flip * se * pattern[None, None, :, None])
    d = shift + period + sd * (seed_part + own)
    out = np.stack([_divergence(rng, d[:, g], shapes[g].p_div) for g in range(m)], 1)
    ties = np.maximum(sc.ties, np.array([s.p_tie for s in shapes]))[None, :, None, None]
    if (ties > 0).any():
        out = np.where(rng.random(out.shape) < ties, 0.0, out)
    return out


def rule_one_period(d: np.ndarray, tau: float, sd: float, th: Thresholds) -> np.ndarray:
    """Codes [S, m] of the K = 1 rule: the seed rule, the market gate (half-width z x tau x SE;
    skipped where a member diverged) and the one-period gate; tau <= 0: the seed rule alone."""
    s, m, n = d.shape
    gems = [d[:, g] for g in range(m)]
    if tau <= 0:
        return verdict_codes(decide(Evidence(gems), th).verdict)
    with np.errstate(invalid="ignore"):
        centre = np.stack([np.nanmean(np.where(np.isfinite(x), x, np.nan), 1) for x in gems], 1)

    def market(tail: np.ndarray):  # the history's luck, as the market-noise interval measures it
        h_m = sps.norm.ppf(1 - tail) * tau * sd / math.sqrt(n)
        return centre - h_m, centre + h_m, np.ones((s, m), bool)

    with np.errstate(over="ignore", invalid="ignore"):
        return verdict_codes(decide(Evidence(gems, market=market), th).verdict)


@dataclass(frozen=True)
class PeriodRun:
    """The K >= 2 rule on simulated families: codes [S, m] and the MDE the rule states for the first
    contrast at the datasets' median parts (`calibration.median_parts`)."""

    codes: np.ndarray
    mde: float


def run_periods(d: np.ndarray, th: Thresholds) -> PeriodRun:
    """The K >= 2 rule at `th` on d [S, m, K, n] as the gem verdicts run it, and its stated MDE (`power.pooled_mde`)."""
    s, m, k, n = d.shape
    with np.errstate(invalid="ignore"):
        unit = np.nan_to_num(d.mean(2), nan=0.0)  # +inf with -inf: a tie (pairing._unit_mean)
    fd = fold_data(d)
    dec = decide(Evidence([unit[:, g] for g in range(m)], periods=fd), th)
    comp = median_parts(fold_components(fd, dec.pooled["tau2"]))
    mde = pooled_mde(comp, k, float(np.nanmedian(fd.n_informative[:, 0].mean(-1))), contrasts=m if th.share_tau else 1,
                     level=th.alpha / m, power=th.power, one_sided=th.one_sided_keep)
    return PeriodRun(verdict_codes(dec.verdict), mde)


def period_run(shapes: list[Shape], n_sim: int, folds: int, scenario: Scenario, *, thresholds: Thresholds | None = None,
               seed: int | None = None) -> PeriodRun:
    """The rule as used on `n_sim` simulated families (`simulate_family`) at `thresholds`."""
    th = thresholds if thresholds is not None else Thresholds()
    rng = np.random.default_rng(th.seed if seed is None else seed)
    with np.errstate(over="ignore", invalid="ignore"):
        d = simulate_family(rng, shapes, n_sim, folds, scenario)
        if folds == 1:
            tau = scenario.tau if scenario.tau_first is None else scenario.tau_first
            codes = rule_one_period(d[:, :, 0], tau, shapes[0].sd, th)
            return PeriodRun(codes, math.nan)
        return run_periods(d, th)


def _rates(codes: np.ndarray) -> dict[str, float]:
    dec = np.abs(codes) == 1
    return dict(false_keep=float((codes == KEEP_CODE).any(1).mean()),
                false_harmful=float((codes == HARMFUL_CODE).any(1).mean()), fwer=float(dec.any(1).mean()),
                false_alarm=float(np.isin(codes, (INCONSISTENT_CODE, HETEROGENEOUS_CODE)).any(1).mean()))


def period_calibration_table(shapes: list[Shape], *, thresholds: Thresholds | None = None,
                             folds=defaults.CALIBRATION_FOLDS, taus=defaults.CALIBRATION_TAUS,
                             rhos=defaults.CALIBRATION_RHOS, effects=defaults.CALIBRATION_PERIOD_EFFECTS,
                             flip: float = defaults.CALIBRATION_FLIP, dist: str = "normal",
                             scenario: Scenario | None = None) -> pd.DataFrame:
    """One row per (folds, tau, rho): the null false keep / harmful and inconsistent / heterogeneous
    rates, false equivalent at the ROPE, power at planted effects and at the stated MDE, and under a
    regime flip the keep / harmful rate (<= alpha); `scenario` the other knobs."""
    th = thresholds or Thresholds()
    base = scenario if scenario is not None else Scenario()
    n_sim, seed = th.n_sim, th.seed
    rows = []
    sd = shapes[0].sd
    for k in folds:
        for tau in taus:
            for rho in (rhos if k > 1 else rhos[:1]):
                def run(offset: int, **over) -> PeriodRun:
                    sc = Scenario(**{**base.__dict__, "tau": tau, "rho": rho, "dist": dist, "effect": 0.0, "flip": 0.0,
                                     **over})
                    return period_run(shapes, n_sim, k, sc, thresholds=th, seed=seed + offset)

                null = run(0)
                row = dict(folds=k, tau_se=tau, rho=rho, n_seeds=shapes[0].n, sd=sd, gems=len(shapes), n_sim=n_sim,
                           dist=dist, **_rates(null.codes), mc_tolerance=mc_tolerance(th.alpha, n_sim))
                eq = run(1, effect=th.rope)
                row["false_equivalent@rope"] = float((eq.codes[:, 0] == 2).mean())
                for mult in effects:
                    row[f"power@{mult:g} sd"] = float((run(2, effect=mult * sd).codes[:, 0] == KEEP_CODE).mean())
                mde = null.mde
                row["mde_sd"] = mde / sd
                row["power@mde"] = (float((run(4, effect=mde).codes[:, 0] == KEEP_CODE).mean())
                                    if np.isfinite(mde) else math.nan)
                row["insufficient"] = float((null.codes[:, 0] == INSUFFICIENT_CODE).mean())
                if k > 1:
                    f = run(3, flip=flip).codes
                    row["flip_decisive"] = float((np.abs(f[:, 0]) == 1).mean())
                    row["flip_inconsistent"] = float((f[:, 0] == INCONSISTENT_CODE).mean())
                    row["flip_alarm"] = float(np.isin(f[:, 0], (INCONSISTENT_CODE, HETEROGENEOUS_CODE)).mean())
                rows.append(row)
    return pd.DataFrame(rows)


def format_period_calibration(table: pd.DataFrame, alpha: float = defaults.ALPHA, flip: float = defaults.CALIBRATION_FLIP,
                              title: str = "") -> str:
    """The period calibration as text (printed by `tune-gems analyze --calibrate`)."""
    pcols = [c for c in table.columns if c.startswith("power@") and c != "power@mde"]
    lines = [title or (f"Calibration of the rule over periods (walk-forward folds: the pooled HKSJ test over the "
                       f"family; one fold: seed rule with the market-noise gates); {int(table['n_sim'].iloc[0])} "
                       f"datasets per row, {int(table['n_seeds'].iloc[0])} seeds, {int(table['gems'].iloc[0])} gems, "
                       f"{table['dist'].iloc[0]} seed noise, sd of a fold's per-seed difference "
                       f"{table['sd'].iloc[0]:.3g}. tau: period-to-period spread in seed standard errors; rho: seed "
                       f"share across folds; alarm: inconsistent or heterogeneous under the null (a false alarm where "
                       f"tau = 0; with tau > 0 the periods do differ); MDE: the pooled "
                       f"MDE the rule states (sd); flip: +-{flip:g} SE from first to last fold, read inconsistent "
                       f"(a sign change shown) or heterogeneous (inc/het)")]
    head = ["folds", "tau", "rho", "false keep", "false harmful", "FWER", "alarm", "false equiv@ROPE"] + \
           [c.replace("power@", "power ") for c in pcols] + ["MDE", "power@MDE", "flip keep/harm", "flip inconsistent",
                                                             "flip inc/het"]
    rows = []
    for _, r in table.iterrows():
        flip_cells = ([f"{r['flip_decisive']:.3f}", f"{r['flip_inconsistent']:.2f}", f"{r['flip_alarm']:.2f}"]
                      if r["folds"] > 1 else ["-", "-", "-"])
        few = r.get("insufficient", 0.0) > 0.5
        mde = ["-", "-"] if r["folds"] == 1 or few or not np.isfinite(r["mde_sd"]) else \
            [f"{r['mde_sd']:.2f}", f"{r['power@mde']:.2f}"]
        alarm = "-" if r["folds"] == 1 else f"{r['false_alarm']:.3f}"
        rows.append([f"{int(r['folds'])}", f"{r['tau_se']:g}", f"{r['rho']:g}", f"{r['false_keep']:.3f}",
                     f"{r['false_harmful']:.3f}", f"{r['fwer']:.3f}", alarm,
                     f"{r['false_equivalent@rope']:.3f}"]
                    + [f"{r[c]:.2f}" for c in pcols] + mde + flip_cells)
    lines += text_table(head, rows, rule=False)
    cols = ["fwer", "false_equivalent@rope"] + (["flip_decisive"] if "flip_decisive" in table else [])
    no_spread = table[(table["tau_se"] == 0) & (table["folds"] > 1)]  # only there is an alarm false: the periods agree
    worst = float(np.nanmax(np.concatenate([table[cols].to_numpy(float).ravel(), no_spread["false_alarm"].to_numpy(float)])))
    lines.append(promise("worst false rate (null FWER, alarm at tau 0, false equivalent, flip keep/harmful):", worst,
                         alpha, table["mc_tolerance"].iloc[0]))
    return "\n".join(lines)


SENSITIVITY = (
    ("tau differs: the first gem 3 SE, the others 0", 4, dict(tau=0.0, tau_first=3.0), {}),
    ("tau differs: the first gem 0, the others 3 SE", 4, dict(tau=3.0, tau_first=0.0), {}),
    ("tau differs: the first gem 3 SE, the others 1 SE", 6, dict(tau=1.0, tau_first=3.0), {}),
    ("contrasts correlated 0.5 (a shared arm)", 4, dict(tau=3.0, gem_corr=0.5), {}),
    ("contrasts correlated 1 (the same luck)", 4, dict(tau=3.0, gem_corr=1.0), {}),
    ("periods correlated 0.3 (a part common to every fold), tau 3 SE", 6, dict(tau=3.0, fold_corr=0.3), {}),
    ("periods correlated 0.3 (a part common to every fold), tau 1 SE", 6, dict(tau=1.0, fold_corr=0.3), {}),
    ("periods correlated 1/6 (purged CV, 6 groups: a group's share of a training set), tau 1 SE", 6,
     dict(tau=1.0, fold_corr=1 / 6), {}),
    ("periods correlated 1/6 (purged CV, 6 groups), tau 3 SE", 6, dict(tau=3.0, fold_corr=1 / 6), {}),
    ("half the pairs tie (never traded)", 6, dict(tau=1.0, ties=0.5), {}),
    ("three periods allowed (--min-periods 3)", 3, dict(tau=0.0), dict(min_periods=3)),
    ("three periods allowed, tau 1 SE", 3, dict(tau=1.0), dict(min_periods=3)),
    ("three periods allowed, tau 3 SE", 3, dict(tau=3.0), dict(min_periods=3)),
    ("one-sided keep test, tau 1 SE", 4, dict(tau=1.0), dict(one_sided_keep=True)),
    ("one-sided keep test, tau 1 SE", 6, dict(tau=1.0), dict(one_sided_keep=True)),
    ("tau per contrast (--per-contrast-tau), tau 1 SE", 4, dict(tau=1.0), dict(share_tau=False)),
    ("tau per contrast (--per-contrast-tau), tau 1 SE", 6, dict(tau=1.0), dict(share_tau=False)),
    ("tau shared (default), tau 1 SE", 4, dict(tau=1.0), {}),
    ("tau shared (default), tau 1 SE", 6, dict(tau=1.0), {}),
)
"""The scenarios beyond the main grid (docs/analysis.md "Calibration over periods"): what the rule
does where its assumptions bend (tau unequal, correlated contrasts or periods, ties) and what
its options buy (K = 3, one-sided keep, tau per contrast)."""


def period_sensitivity_table(shapes: list[Shape], *, thresholds: Thresholds | None = None,
                             effects=defaults.CALIBRATION_PERIOD_EFFECTS, dist: str = "normal",
                             scenarios=SENSITIVITY) -> pd.DataFrame:
    """One row per scenario ((label, folds, Scenario fields, Thresholds fields)): null rates, power
    and the MDE, through `period_run`."""
    th = thresholds or Thresholds()
    sd = shapes[0].sd
    rows = []
    for label, k, fields, overrides in scenarios:
        th_row = Thresholds.build(th, **overrides)
        null = period_run(shapes, th.n_sim, k, Scenario(dist=dist, **fields), thresholds=th_row, seed=th.seed)
        row = dict(scenario=label, folds=k, n_seeds=shapes[0].n, gems=len(shapes), n_sim=th.n_sim, dist=dist,
                   **_rates(null.codes), mc_tolerance=mc_tolerance(th.alpha, th.n_sim),
                   mde_sd=null.mde / sd)
        for mult in effects:
            run = period_run(shapes, th.n_sim, k, Scenario(dist=dist, effect=mult * sd, **fields), thresholds=th_row,
                             seed=th.seed + 2)
            row[f"power@{mult:g} sd"] = float((run.codes[:, 0] == KEEP_CODE).mean())
        rows.append(row)
    return pd.DataFrame(rows)


def format_period_sensitivity(table: pd.DataFrame, alpha: float = defaults.ALPHA) -> str:
    """The sensitivity table as text (`python analysis/calibrate_periods.py --sensitivity`)."""
    pcols = [c for c in table.columns if c.startswith("power@")]
    lines = [f"The rule over periods where its assumptions bend, and what its options buy; "
             f"{int(table['n_sim'].iloc[0])} datasets per row, {int(table['n_seeds'].iloc[0])} seeds, "
             f"{int(table['gems'].iloc[0])} gems, {table['dist'].iloc[0]} seed noise; tau in seed standard errors"]
    head = ["scenario", "folds", "FWER", "alarm", "MDE"] + [c.replace("power@", "power ") for c in pcols]
    lines[0] += "; alarm: inconsistent or heterogeneous under the null (false only where tau = 0)"
    rows = [[r["scenario"], f"{int(r['folds'])}", f"{r['fwer']:.3f}", f"{r['false_alarm']:.3f}",
                      "-" if not np.isfinite(r["mde_sd"]) else f"{r['mde_sd']:.2f}"] + [f"{r[c]:.2f}" for c in pcols]
                     for _, r in table.iterrows()]
    lines += text_table(head, rows, rule=False)
    kept = table[~table["scenario"].str.startswith("periods correlated")]
    lines.append(promise("worst FWER where the periods are exchangeable:", float(kept["fwer"].max()), alpha,
                         table["mc_tolerance"].iloc[0]) + "; correlated periods are outside the promise (docs/analysis.md, Limits)")
    return "\n".join(lines)
