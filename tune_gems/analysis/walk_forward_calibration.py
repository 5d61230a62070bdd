"""Calibration of the verdict rule as it is used over periods (issue 20, deliver 3).

The simulation gives each gem's comparison what a verdict faces:

- **seed noise**: per-seed differences sd x Z (normal or t3), a share `rho` of it belonging to
  the seed and shared by every fold (same initial weights in every period), and divergence at
  the measured rate (+-inf / a tie, as in the analysis);
- **a shared market history per period**: every seed of fold k sees one validation window, so
  the window's luck u_k is common to all seeds of the fold: the fold-level effect, mean zero,
  spread `tau` (in units of one fold's seed standard error, sd / sqrt(n)). With one fold it is
  the one history's luck, which the market-noise interval measures (its half-width is
  z x tau x SE at the verdict's level) and gates: `keep wired`, `harmful` and `equivalent`;
- **planted effects**: a consistent shift of the first gem (power), and a **regime flip**: the
  first gem's fold effects run linearly from +delta (first fold) to -delta (last), mean zero:
  it must not read keep wired / harmful.

On these it runs the rule the verdicts ship, through the same functions of the rule module
(`tune_gems.analysis.rules`: the seed rule `seed.decide_family`, the gates `gates.market_gate` and
`gates.one_period_gate`, the pooling `pooling.fold_estimates` / `pooling.hksj` /
`pooling.shared_seed_variance` and the period rule `periods.decide_periods`), vectorised over
datasets: what the simulation adds is only the data and the market-noise interval it models.
Codes per dataset and gem (`rules.words.verdict_codes`): +1 keep wired, -1 harmful, 2
equivalent, 3 inconsistent across periods, 0 otherwise.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats as sps

from tune_gems.analysis import defaults
from tune_gems.analysis.calibration import Shape, _draws, mc_tolerance
from tune_gems.analysis.rules.gates import market_gate, one_period_gate
from tune_gems.analysis.rules.periods import decide_periods
from tune_gems.analysis.rules.pooling import fold_estimates, hksj, shared_seed_variance
from tune_gems.analysis.rules.seed import decide_family
from tune_gems.analysis.rules.thresholds import Thresholds
from tune_gems.analysis.rules.words import EQUIVALENT_CODE, HARMFUL_CODE, INCONSISTENT_CODE, KEEP_CODE, verdict_codes
from tune_gems.stats.inference import holm_levels, rank_test


def _divergence(rng, d: np.ndarray, p_div: float) -> np.ndarray:
    if p_div <= 0:
        return d
    hi = rng.random(d.shape) < p_div
    lo = rng.random(d.shape) < p_div
    return np.where(hi & lo, 0.0, np.where(hi, -np.inf, np.where(lo, np.inf, d)))


def simulate_folds(rng, shape: Shape, n_sim: int, folds: int, *, effect: float = 0.0, tau: float = 0.0,
                   rho: float = 0.0, flip: float = 0.0, dist: str = "normal") -> np.ndarray:
    """[n_sim, folds, n] per-seed differences of one gem. `tau` and `flip` are in units of one
    fold's seed standard error (sd / sqrt(n)); `rho`: the share of the seed variance shared by a
    seed across folds."""
    n, sd = shape.n, shape.sd
    se = sd / math.sqrt(n)
    seed_part = math.sqrt(rho) * sd * _draws(rng, (n_sim, 1, n), dist)
    own = math.sqrt(1.0 - rho) * sd * _draws(rng, (n_sim, folds, n), dist)
    period = tau * se * rng.standard_normal((n_sim, folds, 1))
    pattern = np.linspace(1.0, -1.0, folds) if folds > 1 else np.zeros(1)
    d = effect + flip * se * pattern[None, :, None] + period + seed_part + own
    return _divergence(rng, d, shape.p_div)


def _seed_rule(d: list[np.ndarray], rope: float, alpha: float):
    """The seed rule of the verdicts (`rules.seed.decide_family`) on per-seed differences [S, n]
    per gem: (verdict words, estimate, p), each [S, m]."""
    rs = [rank_test(x, rope=rope, tail=alpha / 2) for x in d]
    p, est, pt = (np.stack([r[k] for r in rs], 1) for k in ("p", "estimate", "p_tost"))
    return decide_family(p, est, pt, alpha=alpha).verdict, est, p


def rule_one_period(d: np.ndarray, tau: float, sd: float, *, rope: float, alpha: float) -> np.ndarray:
    """Codes [S, m] of the K = 1 rule on d [S, m, n]: the seed rule, then the market gate (the
    market-noise interval around the mean difference, half-width z x tau x SE at the seed
    interval's Holm level; skipped where a member diverged, as the verdicts skip it) and the
    one-period gate (the seed and market-noise intervals combined), the functions
    `verdicts.py` and `walk_forward._one_period` call. tau <= 0: no market-noise interval (as
    with per-seed paths), the seed rule alone."""
    s, m, n = d.shape
    gems = [d[:, g] for g in range(m)]
    verdict, est, p = _seed_rule(gems, rope, alpha)
    if tau <= 0:
        return verdict_codes(verdict)
    levels = holm_levels(p, alpha)
    h_m = sps.norm.ppf(1 - levels / 2) * tau * sd / math.sqrt(n)
    with np.errstate(over="ignore", invalid="ignore"):
        seed = [rank_test(gems[g], tail=levels[:, g] / 2) for g in range(m)]
        centre = np.stack([np.nanmean(np.where(np.isfinite(x), x, np.nan), 1) for x in gems], 1)
    low, high = np.stack([r["low"] for r in seed], 1), np.stack([r["high"] for r in seed], 1)
    diverged = np.stack([~np.isfinite(x).all(1) for x in gems], 1)
    verdict = market_gate(verdict, est, centre - h_m, centre + h_m, applies=~diverged)
    verdict = one_period_gate(verdict, est, low, high, -h_m, h_m, rope=rope, applies=np.ones((s, m), bool)).verdict
    return verdict_codes(verdict)


def rule_periods(d: np.ndarray, *, rope: float, alpha: float) -> np.ndarray:
    """Codes [S, m] of the K >= 2 rule on d [S, m, K, n]: the seed rule on the fold-averaged
    per-seed differences, each gem's fold effects pooled (`rules.pooling.hksj` with the shared
    seed variance), and the period rule (`rules.periods.decide_periods`, Holm over the gems):
    the functions `walk_forward.period_verdicts` calls."""
    s, m, k, n = d.shape
    with np.errstate(invalid="ignore"):
        unit = np.nan_to_num(d.mean(2), nan=0.0)  # +inf with -inf: a tie (designs._unit_mean)
    seed, _, _ = _seed_rule([unit[:, g] for g in range(m)], rope, alpha)
    thetas, pooled = [], []
    for g in range(m):
        theta, var = fold_estimates(d[:, g].reshape(s * k, n))
        thetas.append(theta.reshape(s, k))
        pooled.append(hksj(theta.reshape(s, k), var.reshape(s, k), rope=rope, tail=alpha / 2,
                           extra_var=shared_seed_variance(d[:, g])))
    col = {key: np.stack([r[key] for r in pooled], 1) for key in ("p", "p_tost", "mu", "se", "q_p")}
    rule = decide_periods(seed, col["p"], col["p_tost"], col["mu"], col["se"], k - 1, np.stack(thetas, 1),
                          col["q_p"], alpha=alpha)
    return verdict_codes(rule.verdict)


def period_codes(shapes: list[Shape], n_sim: int, folds: int, *, effect: float = 0.0, tau: float = 0.0,
                 rho: float = 0.0, flip: float = 0.0, dist: str = "normal", rope: float = defaults.ROPE,
                 alpha: float = defaults.ALPHA, seed: int = defaults.SEED) -> np.ndarray:
    """Codes [n_sim, gems] of the rule as used; `effect` and `flip` go to the first gem only.
    Gems are simulated at the first gem's seed count (one population: every arm has the seeds)."""
    rng = np.random.default_rng(seed)
    n = shapes[0].n
    with np.errstate(over="ignore", invalid="ignore"):
        return _period_codes(rng, shapes, n, n_sim, folds, effect, tau, rho, flip, dist, rope, alpha)


def _period_codes(rng, shapes, n, n_sim, folds, effect, tau, rho, flip, dist, rope, alpha) -> np.ndarray:
    d = np.stack([simulate_folds(rng, Shape(s.gem, n, s.sd, s.p_div), n_sim, folds, effect=effect if i == 0 else 0.0,
                                 tau=tau, rho=rho, flip=flip if i == 0 else 0.0, dist=dist)
                  for i, s in enumerate(shapes)], 1)
    if folds == 1:
        return rule_one_period(d[:, :, 0], tau, shapes[0].sd, rope=rope, alpha=alpha)
    return rule_periods(d, rope=rope, alpha=alpha)


def period_calibration_table(shapes: list[Shape], *, thresholds: Thresholds | None = None,
                             folds=defaults.CALIBRATION_FOLDS, taus=defaults.CALIBRATION_TAUS,
                             rhos=defaults.CALIBRATION_RHOS, effects=defaults.CALIBRATION_PERIOD_EFFECTS,
                             flip: float = defaults.CALIBRATION_FLIP, dist: str = "normal", **settings) -> pd.DataFrame:
    """At `thresholds`' alpha, rope, n_sim and seed (`settings` replace fields by name), one row
    per (folds, tau, rho): family-wise false keep / harmful under the null, false
    equivalent with the first gem's effect at the ROPE, power at planted consistent effects
    (multiples of the first gem's sd), and under a regime flip of +-`flip` SE the first gem's
    keep / harmful rate (must stay <= alpha) and its inconsistent rate. rho only matters with
    several folds (one row per tau at K = 1)."""
    th = Thresholds.build(thresholds, **settings)
    n_sim, rope, alpha, seed = th.n_sim, th.rope, th.alpha, th.seed
    rows = []
    sd = shapes[0].sd
    for k in folds:
        for tau in taus:
            for rho in (rhos if k > 1 else rhos[:1]):
                common = dict(tau=tau, rho=rho, rope=rope, alpha=alpha, dist=dist)
                null = period_codes(shapes, n_sim, k, seed=seed, **common)
                dec = np.abs(null) == 1
                row = dict(folds=k, tau_se=tau, rho=rho, n_seeds=shapes[0].n, sd=sd, gems=len(shapes), n_sim=n_sim, dist=dist,
                           false_keep=float((null == KEEP_CODE).any(1).mean()),
                           false_harmful=float((null == HARMFUL_CODE).any(1).mean()),
                           fwer=float(dec.any(1).mean()), mc_tolerance=mc_tolerance(alpha, n_sim))
                eq = period_codes(shapes, n_sim, k, effect=rope, seed=seed + 1, **common)
                row["false_equivalent@rope"] = float((eq[:, 0] == EQUIVALENT_CODE).mean())
                for mult in effects:
                    c = period_codes(shapes, n_sim, k, effect=mult * sd, seed=seed + 2, **common)
                    row[f"power@{mult:g} sd"] = float((c[:, 0] == KEEP_CODE).mean())
                if k > 1:
                    f = period_codes(shapes, n_sim, k, flip=flip, seed=seed + 3, **common)
                    row["flip_decisive"] = float((np.abs(f[:, 0]) == 1).mean())
                    row["flip_inconsistent"] = float((f[:, 0] == INCONSISTENT_CODE).mean())
                rows.append(row)
    return pd.DataFrame(rows)


def format_period_calibration(table: pd.DataFrame, alpha: float = defaults.ALPHA, flip: float = defaults.CALIBRATION_FLIP) -> str:
    """The period calibration as text (printed by `tune-gems analyze --calibrate`)."""
    pcols = [c for c in table.columns if c.startswith("power@")]
    lines = [f"Calibration of the rule over periods (walk-forward folds; seed rule AND pooled HKSJ; one fold: seed rule "
             f"with the market-noise gates); {int(table['n_sim'].iloc[0])} datasets per row, "
             f"{int(table['n_seeds'].iloc[0])} seeds, {int(table['gems'].iloc[0])} gems, {table['dist'].iloc[0]} seed noise, "
             f"sd of a fold's per-seed difference {table['sd'].iloc[0]:.3g}. tau: period-to-period spread "
             f"in seed standard errors; rho: seed share across folds; flip: +-{flip:g} SE from first to last fold"]
    head = ["folds", "tau", "rho", "false keep", "false harmful", "FWER", "false equiv@ROPE"] + \
           [c.replace("power@", "power ") for c in pcols] + ["flip keep/harm", "flip inconsistent"]
    rows = [head]
    for _, r in table.iterrows():
        flip_cells = [f"{r['flip_decisive']:.3f}", f"{r['flip_inconsistent']:.2f}"] if r["folds"] > 1 else ["-", "-"]
        rows.append([f"{int(r['folds'])}", f"{r['tau_se']:g}", f"{r['rho']:g}", f"{r['false_keep']:.3f}",
                     f"{r['false_harmful']:.3f}", f"{r['fwer']:.3f}", f"{r['false_equivalent@rope']:.3f}"]
                    + [f"{r[c]:.2f}" for c in pcols] + flip_cells)
    widths = [max(len(x[i]) for x in rows) for i in range(len(head))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(x, widths)).rstrip() for x in rows]
    tol = table["mc_tolerance"].iloc[0]
    worst = float(np.nanmax(table[["fwer", "false_equivalent@rope"] + (["flip_decisive"] if "flip_decisive" in table else [])].to_numpy(float)))
    lines.append(f"worst false rate (null FWER, false equivalent, flip keep/harmful): {worst:.3f} "
                 f"(promise <= {alpha:g}; Monte-Carlo allowance +{tol:.3f})"
                 + ("" if worst <= alpha + tol else "  ** ABOVE THE PROMISE **"))
    return "\n".join(lines)

