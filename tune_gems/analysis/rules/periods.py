"""The period rule: a gem's verdict across validation periods (walk-forward folds, K >= 2).

The pooled test decides (`pooling.pool_family`: random effects over the periods, HKSJ, the
seeds' share common to every fold, tau^2 shared across the family's contrasts when they agree,
Holm over the gems). Per gem of a family with a wiring comparison (`tested`):

- `insufficient data` (too few periods) when fewer than `min_periods` folds carry informative
  pairs: at K = 2 the t with 1 df has no power and at K = 3 almost none (the calibration's
  table), so no pooled verdict is given (the per-fold effects are still shown);
- `inconclusive: inconsistent across periods` only when a sign change is **shown**: the
  heterogeneity test holds (Cochran's Q, Holm over the gems) and the per-fold signed-rank
  intervals lie on both sides of 0 at their Holm levels over all the family's (gem, fold)
  tests; this overrides any pooled mean (a regime flip averages to ~0);
- `keep wired` / `harmful`: the pooled effect's Holm-adjusted p <= alpha (two-sided; with
  `one_sided`, a one-sided keep test and no `harmful`);
- `equivalent` (or `delete` where the magnitude half of delete holds, `removable`): the pooled
  TOST, Holm-adjusted, <= alpha;
- `inconclusive: heterogeneous across periods`: none of these, but the periods differ
  significantly (Cochran's Q, Holm): more seeds will not settle it;
- `inconclusive` otherwise. A gem without a pooled effect (its fold effects undefined: pairs
  mostly diverged one way) reads `inconclusive`.

The seeds' own verdict (the seed rule on the fold-averaged per-seed differences) is not a
second gate: it is conditional on the K periods (their luck is common to every seed), so the
pooled test, which carries the periods' spread, is the one that can be wrong only at its level;
requiring both stacked two tests and put the rule far below its level (false keep 0.000 at K =
4-6). A gem without a wiring comparison keeps its seed-rule word (what it lacks).

Because the heterogeneity test gates both `inconsistent` and `heterogeneous`, their family-wise
false-alarm rate in pure noise is the Holm-adjusted Q test's: at most alpha.

Arrays in, words out: the rule's composition (`decision.decide`, through `period_family` and
`histories`) calls it on one experiment's gems and on thousands of simulated families.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tune_gems.analysis import defaults
from tune_gems.analysis.rules.pooling import pooled_bounds
from tune_gems.analysis.rules.words import (
    DELETE, EQUIVALENT, HARMFUL, HETEROGENEOUS, INCONCLUSIVE, INCONSISTENT, INSUFFICIENT, KEEP,
)
from tune_gems.stats.inference import holm, holm_levels


@dataclass(frozen=True)
class PeriodDecision:
    """The period rule on families of gems ([S, m] arrays, the gems on the last axis; the fold
    arrays [S, m, K])."""

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
    """(shown [S, m], fold Holm-adjusted p [S, m, K], fold Holm levels [S, m, K]): per gem, a
    fold whose signed-rank test is significant with a positive effect and one with a negative
    effect, Holm over all (gem, fold) tests of a family (NaN p: a fold without informative
    pairs, left out)."""
    fold_effect = np.asarray(fold_effect, float)
    fold_p = np.asarray(fold_p, float)
    s, m, k = fold_p.shape
    flat = fold_p.reshape(s, m * k)
    adj = holm(flat).reshape(s, m, k)
    lvl = holm_levels(flat, alpha).reshape(s, m, k)
    sig = np.nan_to_num(adj, nan=1.0) <= alpha
    shown = (sig & (fold_effect > 0)).any(-1) & (sig & (fold_effect < 0)).any(-1)
    return shown, adj, lvl


def decide_periods(tested, p, p_tost, mu, se, se_fixed, df, q_p, periods, fold_effect, fold_p, *, alpha: float,
                   seed_verdict=None, removable=None, min_periods: int = defaults.MIN_PERIODS,
                   one_sided: bool = False, df_fixed=np.inf, enough=None) -> PeriodDecision:
    """The period rule (module docstring). [S, m] per gem: `tested` whether it has a wiring
    comparison; `p` (one-sided when `one_sided`), `p_tost`, `mu`, `se`, `se_fixed`, `df`, `df_fixed`, `q_p`, `periods`
    (folds carrying informative pairs) its pooled test (`pooling.pool_family`; NaN p: no pooled
    effect); `seed_verdict` the words kept where not `tested`; `removable` the magnitude half of
    `delete`. [S, m, K]: `fold_effect`, `fold_p` each fold's own effect and signed-rank p (NaN:
    the fold does not pair the gem). `enough` [S, m]: where the design can decide, in place of
    `periods >= min_periods` (the nested rule over histories counts histories and calendar periods)."""
    tested = np.asarray(tested, bool)
    p, p_tost, mu, se, se_fixed, df, q_p = (np.asarray(x, float) for x in (p, p_tost, mu, se, se_fixed, df, q_p))
    periods = np.asarray(periods)
    enough = tested & (periods >= min_periods if enough is None else np.asarray(enough, bool))
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
