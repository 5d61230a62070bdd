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

On these it runs the rule of `walk_forward.py` on top of the seed rule of `verdicts.py`, with the
same functions (`inference.rank_test`, Holm, `walk_forward.fold_estimates`, `walk_forward.hksj`,
`walk_forward.inconsistent`, `walk_forward.combined_bounds`), vectorised over
datasets. Codes per dataset and gem: +1 keep wired, -1 harmful, 2 equivalent, 3 inconsistent
across periods, 0 otherwise.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats as sps

from tune_gems.analysis import defaults
from tune_gems.analysis.calibration import Shape, _draws, mc_tolerance
from tune_gems.stats.inference import holm_batch, rank_test
from tune_gems.analysis.walk_forward import combined_bounds, fold_estimates, hksj, inconsistent, shared_seed_variance

KEEP, HARMFUL, EQUIVALENT, INCONSISTENT = 1, -1, 2, 3


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


def _holm_level(p: np.ndarray, alpha: float) -> np.ndarray:
    """`inference.holm_levels` per row of p [S, m], vectorised."""
    s, m = p.shape
    order = np.argsort(p, axis=1, kind="stable")
    ps = np.take_along_axis(p, order, 1)
    step = alpha / (m - np.arange(m))[None, :]
    failed_before = np.concatenate([np.zeros((s, 1), bool), np.cumsum(ps > step, 1)[:, :-1] > 0], 1)
    lv = np.where(failed_before, alpha / m, step)
    out = np.empty_like(lv)
    np.put_along_axis(out, order, lv, 1)
    return out


def _seed_rule(d: list[np.ndarray], rope: float, alpha: float):
    """The seed rule of verdicts.py on per-seed differences [S, n] per gem: (decisive sign,
    equivalent, estimate, levels, any divergence), each [S, m]."""
    rs = [rank_test(x, rope=rope, tail=alpha / 2) for x in d]
    p = np.stack([r["p"] for r in rs], 1)
    est = np.stack([r["estimate"] for r in rs], 1)
    decisive = np.where(holm_batch(p) <= alpha, np.sign(est), 0)
    equiv = (holm_batch(np.stack([r["p_tost"] for r in rs], 1)) <= alpha) & (decisive == 0)
    div = np.stack([~np.isfinite(x).all(1) for x in d], 1)
    return decisive, equiv, est, _holm_level(p, alpha), div


def rule_one_period(d: np.ndarray, tau: float, sd: float, *, rope: float, alpha: float) -> np.ndarray:
    """Codes [S, m] of the K = 1 rule on d [S, m, n]: the seed rule, the market-noise gate (the
    interval around the mean difference, half-width z x tau x SE, must exclude 0 on the effect's
    side) and the combined half-width gate of walk_forward._one_period."""
    s, m, n = d.shape
    gems = [d[:, g] for g in range(m)]
    decisive, equiv, est, levels, div = _seed_rule(gems, rope, alpha)
    codes = np.where(equiv, EQUIVALENT, decisive).astype(int)
    if tau <= 0:
        return codes
    h_m = sps.norm.ppf(1 - levels / 2) * tau * sd / math.sqrt(n)
    for g in range(m):
        with np.errstate(over="ignore", invalid="ignore"):
            r = rank_test(gems[g], tail=levels[:, g] / 2)
            lo, hi = combined_bounds(est[:, g], r["low"], r["high"], -h_m[:, g], h_m[:, g])
            centre = np.nanmean(np.where(np.isfinite(gems[g]), gems[g], np.nan), 1)
        # the market-noise gate of verdicts.py (skipped there when a member diverged) ...
        market_confirms = (np.sign(centre - np.sign(est[:, g]) * h_m[:, g]) == np.sign(est[:, g])) | div[:, g]
        # ... and the combined interval of walk_forward._one_period (always)
        bad_keep = (np.abs(codes[:, g]) == 1) & (~market_confirms | ~((lo > 0) | (hi < 0)))
        bad_equiv = (codes[:, g] == EQUIVALENT) & ~((-rope < lo) & (hi < rope))
        codes[:, g] = np.where(bad_keep | bad_equiv, 0, codes[:, g])
    return codes


def rule_periods(d: np.ndarray, *, rope: float, alpha: float) -> np.ndarray:
    """Codes [S, m] of the K >= 2 rule on d [S, m, K, n]: the seed rule on the fold-averaged
    per-seed differences AND the pooled HKSJ effect (Holm over gems) on the same side; an
    inconsistent sign with significant heterogeneity reads INCONSISTENT; equivalent needs the
    pooled TOST too (walk_forward.period_verdicts)."""
    s, m, k, n = d.shape
    with np.errstate(invalid="ignore"):
        unit = np.nan_to_num(d.mean(2), nan=0.0)  # +inf with -inf: a tie (designs._unit_mean)
    decisive, equiv, _, _, _ = _seed_rule([unit[:, g] for g in range(m)], rope, alpha)
    pooled = []
    for g in range(m):
        theta, var = fold_estimates(d[:, g].reshape(s * k, n))
        pooled.append((theta.reshape(s, k), hksj(theta.reshape(s, k), var.reshape(s, k), rope=rope, tail=alpha / 2,
                                                 extra_var=shared_seed_variance(d[:, g]))))
    p = np.nan_to_num(np.stack([r["p"] for _, r in pooled], 1), nan=1.0)
    sign = np.stack([np.sign(r["mu"]) for _, r in pooled], 1)
    pooled_dec = np.where(holm_batch(p) <= alpha, sign, 0)
    pooled_eq = holm_batch(np.nan_to_num(np.stack([r["p_tost"] for _, r in pooled], 1), nan=1.0)) <= alpha
    flips = np.stack([inconsistent(th, r["q_p"], alpha) for th, r in pooled], 1)
    codes = np.where((decisive != 0) & (decisive == pooled_dec), decisive, 0)
    codes = np.where(equiv & pooled_eq, EQUIVALENT, codes)
    return np.where(flips, INCONSISTENT, codes).astype(int)


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


def period_calibration_table(shapes: list[Shape], *, n_sim: int = defaults.N_SIM, folds=defaults.CALIBRATION_FOLDS,
                             taus=defaults.CALIBRATION_TAUS, rhos=defaults.CALIBRATION_RHOS,
                             effects=defaults.CALIBRATION_PERIOD_EFFECTS, flip: float = defaults.CALIBRATION_FLIP,
                             rope: float = defaults.ROPE, alpha: float = defaults.ALPHA,
                             seed: int = defaults.SEED, dist: str = "normal") -> pd.DataFrame:
    """One row per (folds, tau, rho): family-wise false keep / harmful under the null, false
    equivalent with the first gem's effect at the ROPE, power at planted consistent effects
    (multiples of the first gem's sd), and under a regime flip of +-`flip` SE the first gem's
    keep / harmful rate (must stay <= alpha) and its inconsistent rate. rho only matters with
    several folds (one row per tau at K = 1)."""
    rows = []
    sd = shapes[0].sd
    for k in folds:
        for tau in taus:
            for rho in (rhos if k > 1 else rhos[:1]):
                common = dict(tau=tau, rho=rho, rope=rope, alpha=alpha, dist=dist)
                null = period_codes(shapes, n_sim, k, seed=seed, **common)
                dec = np.abs(null) == 1
                row = dict(folds=k, tau_se=tau, rho=rho, n_seeds=shapes[0].n, sd=sd, gems=len(shapes), n_sim=n_sim, dist=dist,
                           false_keep=float((null == KEEP).any(1).mean()), false_harmful=float((null == HARMFUL).any(1).mean()),
                           fwer=float(dec.any(1).mean()), mc_tolerance=mc_tolerance(alpha, n_sim))
                eq = period_codes(shapes, n_sim, k, effect=rope, seed=seed + 1, **common)
                row["false_equivalent@rope"] = float((eq[:, 0] == EQUIVALENT).mean())
                for mult in effects:
                    c = period_codes(shapes, n_sim, k, effect=mult * sd, seed=seed + 2, **common)
                    row[f"power@{mult:g} sd"] = float((c[:, 0] == KEEP).mean())
                if k > 1:
                    f = period_codes(shapes, n_sim, k, flip=flip, seed=seed + 3, **common)
                    row["flip_decisive"] = float((np.abs(f[:, 0]) == 1).mean())
                    row["flip_inconsistent"] = float((f[:, 0] == INCONSISTENT).mean())
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

