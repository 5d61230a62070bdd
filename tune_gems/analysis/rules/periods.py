"""The period rule: a seed verdict checked across validation periods (walk-forward folds, K >= 2).

Per gem of a family, from its seed verdict (the seed rule on the fold-averaged per-seed
differences, which carries a seed's part of the effect shared across periods) and its pooled
effect (`pooling.hksj`, which carries the periods' spread), Holm over the gems that have one:

- `inconclusive: inconsistent across periods` when the fold effects go both ways with
  significant heterogeneity (`inconsistent`), whatever the pooled mean;
- `keep wired` / `harmful` only when the seeds say so AND the pooled interval at its Holm level
  excludes 0 on the same side (Holm-adjusted pooled p <= alpha); else `inconclusive`;
- `equivalent` only when the pooled TOST (Holm-adjusted) holds too (a regime flip averages to
  ~0 over seeds); else `inconclusive`;
- any other seed verdict stands. A gem without a pooled effect (NaN p: fewer than two folds pair
  it, or a fold's effect is undefined) is left out of the Holm family; its decisive or
  equivalent seed verdict reads `inconclusive` (it was not checked across periods).

It only makes a verdict more cautious. Arrays in, words out: `walk_forward.period_verdicts`
calls it on one experiment's gems, `walk_forward_calibration.rule_periods` on thousands of
simulated families.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tune_gems.analysis.rules.pooling import t_bounds
from tune_gems.analysis.rules.words import DECISIVE, EQUIVALENT, INCONCLUSIVE, INCONSISTENT, KEEP
from tune_gems.stats.inference import holm, holm_levels


@dataclass(frozen=True)
class PeriodDecision:
    """The period rule on families of gems ([S, m] arrays, the gems on the last axis)."""

    verdict: np.ndarray
    p_adjusted: np.ndarray
    tost_p_adjusted: np.ndarray
    level: np.ndarray
    low: np.ndarray
    high: np.ndarray
    flips: np.ndarray


def inconsistent(theta: np.ndarray, q_p: np.ndarray, alpha: float) -> np.ndarray:
    """Per gem: period effects (the last axis of theta; NaN: a fold that does not pair it) that go
    both ways with significant heterogeneity (Cochran's Q p <= alpha)."""
    theta = np.atleast_2d(theta)
    return (theta > 0).any(-1) & (theta < 0).any(-1) & (np.nan_to_num(q_p, nan=1.0) <= alpha)


def decide_periods(seed_verdict, p, p_tost, mu, se, df, theta, q_p, *, alpha: float) -> PeriodDecision:
    """The period rule (module docstring): `seed_verdict` [S, m] the seed rule's words; `p`,
    `p_tost`, `mu`, `se`, `q_p` [S, m] the pooled test of each gem (`pooling.hksj`; NaN p: no
    pooled effect); `df` its t's degrees of freedom (K - 1, per gem or one for all); `theta`
    [S, m, K] the fold effects (NaN where a fold does not pair the gem)."""
    seed_verdict = np.asarray(seed_verdict)
    p, p_tost, mu, se = (np.asarray(x, float) for x in (p, p_tost, mu, se))
    p_adj, pt_adj, level = holm(p), holm(p_tost), holm_levels(p, alpha)
    with np.errstate(invalid="ignore"):
        low, high = t_bounds(mu, se, df, level / 2)
        same_side = np.where(seed_verdict == KEEP, low > 0, high < 0)
        confirmed = (p_adj <= alpha) & same_side
        equivalent = pt_adj <= alpha
    flips = inconsistent(theta, q_p, alpha)
    verdict = np.where(np.isin(seed_verdict, DECISIVE) & ~confirmed, INCONCLUSIVE, seed_verdict)
    verdict = np.where((seed_verdict == EQUIVALENT) & ~equivalent, INCONCLUSIVE, verdict)
    verdict = np.where(flips, INCONSISTENT, verdict)
    return PeriodDecision(verdict, p_adj, pt_adj, level, low, high, flips)
