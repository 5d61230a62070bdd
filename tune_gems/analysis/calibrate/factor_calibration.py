"""Calibration of the factor table: G gems and F factors in one family, through `rules.decision.decide` (the rule
`factors.factor_table` runs), on simulated seed noise (a share `rho` common to every fold), one market history per
period (spread `tau` seed SEs; at K = 1 the market-noise interval measures it) and a planted effect on the first factor.
`python analysis/calibrate_factors.py` prints docs/analysis.md's table ("Factors")."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
from scipy import stats as sps

from tune_gems.analysis import defaults
from tune_gems.analysis.calibrate.calibration import _draws, mc_tolerance, promise
from tune_gems.analysis.calibrate.walk_forward_calibration import Scenario
from tune_gems.analysis.rules.decision import Evidence, decide
from tune_gems.analysis.rules.periods import fold_data
from tune_gems.analysis.rules.settings import HARMFUL_CODE, KEEP_CODE, Thresholds, verdict_codes
from tune_gems.analysis.text import text_table

FACTOR_CALIBRATION_FOLDS = (1, 4, 6)
FACTOR_CALIBRATION_TAUS = (0.0, 1.0, 3.0)


def simulate_family(rng, n_effects: int, n: int, n_sim: int, folds: int, sc: Scenario, planted: int = -1) -> np.ndarray:
    """[n_sim, E, K, n] per-seed differences (sd 1) of a family of E effects, effect `planted`
    shifted by `sc.effect`."""
    se = 1.0 / math.sqrt(n)
    shift = np.zeros(n_effects)
    if planted >= 0:
        shift[planted] = sc.effect
    seed_part = math.sqrt(sc.rho) * _draws(rng, (n_sim, n_effects, 1, n), sc.dist)
    own = math.sqrt(1.0 - sc.rho) * _draws(rng, (n_sim, n_effects, folds, n), sc.dist)
    period = sc.tau * se * rng.standard_normal((n_sim, n_effects, folds, 1))
    return shift[None, :, None, None] + period + seed_part + own


def family_codes(gems: int, factors: int, n: int, n_sim: int, folds: int, sc: Scenario = Scenario(),
                 th: Thresholds = Thresholds()) -> np.ndarray:
    """Codes [n_sim, gems + factors] of `rules.decision.decide` at `th` (its seed the simulation's) on
    simulated families; `sc.effect` planted on the first factor (index `gems`)."""
    rng = np.random.default_rng(th.seed)
    e = gems + factors
    d = simulate_family(rng, e, n, n_sim, folds, sc, planted=gems if factors else -1)
    if folds > 1:
        return verdict_codes(decide(Evidence([d[:, j].mean(1) for j in range(e)], periods=fold_data(d)), th).verdict)
    diffs = [d[:, j, 0] for j in range(e)]
    centre = np.stack([x.mean(1) for x in diffs], 1)

    def market(tail: np.ndarray):  # the one history's luck, as the market-noise interval measures it
        h = sps.norm.ppf(1 - tail) * sc.tau / math.sqrt(n)
        return centre - h, centre + h, np.ones(tail.shape, bool)

    return verdict_codes(decide(Evidence(diffs, market=market if sc.tau > 0 else None), th).verdict)


def factor_calibration_table(gems: int = 3, factors: int = 3, n: int = 16, th: Thresholds = Thresholds(), *,
                             folds=FACTOR_CALIBRATION_FOLDS, taus=FACTOR_CALIBRATION_TAUS, rho: float = 0.0,
                             effects=defaults.CALIBRATION_PERIOD_EFFECTS, dist: str = "normal") -> pd.DataFrame:
    """One row per (folds, tau): the family's null false keep / harmful rate and the first factor's
    power at planted effects."""
    rows, n_sim = [], th.n_sim
    for k in folds:
        for tau in taus:
            null = family_codes(gems, factors, n, n_sim, k, Scenario(tau=tau, rho=rho, dist=dist), th)
            row = dict(folds=k, tau_se=tau, rho=rho, gems=gems, factors=factors, n_seeds=n, n_sim=n_sim, dist=dist,
                       false_keep=float((null == KEEP_CODE).any(1).mean()),
                       false_harmful=float((null == HARMFUL_CODE).any(1).mean()),
                       fwer=float((np.abs(null) == 1).any(1).mean()), mc_tolerance=mc_tolerance(th.alpha, n_sim))
            for mult in effects:
                c = family_codes(gems, factors, n, n_sim, k, Scenario(effect=mult, tau=tau, rho=rho, dist=dist),
                                 replace(th, seed=th.seed + 1))
                row[f"power@{mult:g} sd"] = float((c[:, gems] == KEEP_CODE).mean())
            rows.append(row)
    return pd.DataFrame(rows)


def format_factor_calibration(table: pd.DataFrame, alpha: float = defaults.ALPHA) -> str:
    """The factor calibration as text (`python analysis/calibrate_factors.py`, `cli.calibrate_factors_main`)."""
    r0 = table.iloc[0]
    pcols = [c for c in table.columns if c.startswith("power@")]
    lines = [f"Calibration of the factor table (gems and factors one Holm family: {int(r0['gems'])} gems + "
             f"{int(r0['factors'])} factors; seed rule, one-period gates at K = 1, period rule at K >= 2); "
             f"{int(r0['n_sim'])} datasets per row, {int(r0['n_seeds'])} seeds, {r0['dist']} seed noise, rho "
             f"{r0['rho']:g}; tau in seed SE; power: the first factor reads keep wired at a planted effect (sd of one "
             "fold's per-seed difference)"]
    head = ["folds", "tau", "false keep", "false harmful", "FWER"] + [c.replace("power@", "power ") for c in pcols]
    rows = [[f"{int(r['folds'])}", f"{r['tau_se']:g}", f"{r['false_keep']:.3f}", f"{r['false_harmful']:.3f}",
                      f"{r['fwer']:.3f}"] + [f"{r[c]:.2f}" for c in pcols] for _, r in table.iterrows()]
    lines += text_table(head, rows, rule=False)
    lines.append(promise("worst family-wise false rate", float(table["fwer"].max()), alpha,
                         float(table["mc_tolerance"].iloc[0])))
    return "\n".join(lines)
