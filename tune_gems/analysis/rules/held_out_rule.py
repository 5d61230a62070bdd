"""The test segment as a pre-registered second stage.

Why. A check printed beside a verdict changes no word, and a criterion on the test segment's
seed interval alone leaves out what separates one period from another (it passes a true 0.15
effect only 62-78% of the time). So the test segment is the confirmation, decided before it is
looked at (docs/analysis.md "The held-out confirmation"):

- only a discovery `keep wired` or `harmful` is confirmed; the test segment chooses nothing else;
- its effect (the same pairs) is compared with 0 one-sided in the discovery's direction at
  **alpha / m** (`confirmation_level`): on its own a Bonferroni test of the m contrasts on data
  the discovery did not see, so the two-stage family-wise rate stays below alpha even where the
  discovery's own does not, as long as the test segment's luck is not the discovery's;
- its standard error carries **the test period's spread** (it is one more period): the seeds'
  variance plus the pooled rule's tau^2, or on one history with one fold the market-noise
  variance (without one, no confirmation is possible); Welch-Satterthwaite degrees of freedom;
- a discovery whose test effect does not agree, or has none, reads `not confirmed on held-out
  data` (`words.NOT_CONFIRMED`), both intervals kept for the reason line.

`seed_level_effect`: each seed's test differences averaged over the folds (the seed is the
unit), then the Hodges-Lehmann effect and its squared standard error from the signed-rank
interval (`pooling.fold_estimates`' estimator). Arrays in, words out: `decision_calibration`
calls these on thousands of simulated families.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from tune_gems.analysis.rules.pooling import FOLD_VAR_DF, fold_estimates, satterthwaite
from tune_gems.analysis.rules.words import HARMFUL, KEEP, NOT_CONFIRMED


@dataclass(frozen=True)
class HeldOutDecision:
    """The second stage on arrays of discovery words (any common shape): `verdict` the final
    words; per contrast the confirmation's `level`, `se`, `df`, one-sided `p` in the discovery's
    direction and the test interval [`low`, `high`] at that level (two-sided at 2 x level, so its
    bound on the discovery's side is the one-sided test's), where it was `applied` (a discovery
    keep / harmful) and where it `confirmed`."""

    verdict: np.ndarray
    level: np.ndarray
    se: np.ndarray
    df: np.ndarray
    p: np.ndarray
    low: np.ndarray
    high: np.ndarray
    applied: np.ndarray
    confirmed: np.ndarray


def confirmation_level(alpha: float, m) -> np.ndarray:
    """The confirmation's one-sided level: alpha / m, the family's Bonferroni level (module
    docstring); `m` the contrasts the family's discovery tested."""
    return np.asarray(alpha, float) / np.maximum(np.asarray(m, float), 1.0)


def seed_level_effect(d_test) -> dict[str, np.ndarray]:
    """The test-segment effect per row of per-seed test differences d_test [S, K, n] (NaN: no pair;
    K = 1 for one fold): `theta` the Hodges-Lehmann effect of the seeds' fold-averaged
    differences, `var` its squared standard error (`pooling.fold_estimates`; inf: too few seeds
    for an interval), `df` that variance's degrees of freedom (`FOLD_VAR_DF` (n - 1)), `n` the
    informative seeds. A seed with no pair in any fold is left out; +-inf (a diverged side) stays
    as the rank test reads it."""
    d = np.asarray(d_test, float)
    with np.errstate(invalid="ignore"):
        present = ~np.isnan(d)
        seed = np.where(present.any(1), np.nansum(np.where(present, d, 0.0), 1) / np.maximum(present.sum(1), 1), np.nan)
    est = fold_estimates(seed)
    n = np.asarray(est["n_informative"], float)
    return dict(theta=est["theta"], var=est["var"], df=FOLD_VAR_DF * np.maximum(n - 1, 0.0), n=n)


def confirm_on_held_out(verdict, test_effect, test_var, period_var, level, *, test_df=np.inf,
                        period_df=np.inf) -> HeldOutDecision:
    """The second stage (module docstring) per contrast: `verdict` the discovery's words,
    `test_effect` and `test_var` the test segment's effect and its seeds' squared standard error
    (`seed_level_effect`; NaN: no test pairs), `period_var` the periods' spread tau^2 (one fold:
    the market-noise variance; NaN: none, no confirmation possible), `level` the one-sided
    level (`confirmation_level`), `test_df` and `period_df` the parts' degrees of freedom."""
    verdict = np.asarray(verdict, dtype=object)
    effect, tv, pv = (np.asarray(x, float) for x in (test_effect, test_var, period_var))
    level = np.broadcast_to(np.asarray(level, float), verdict.shape)
    sign = np.where(verdict == KEEP, 1.0, np.where(verdict == HARMFUL, -1.0, 0.0))
    applied = sign != 0
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        pv0 = np.where(np.isfinite(pv), np.maximum(pv, 0.0), np.nan)
        se = np.sqrt(tv + pv0)
        df = np.broadcast_to(satterthwaite([tv, pv0], [np.asarray(test_df, float), np.asarray(period_df, float)]),
                             verdict.shape)
        dist = sps.t(np.where(np.isfinite(df), df, 1e12))
        p = dist.sf(sign * effect / se)  # a diverged side (+-inf) reads 0 or 1; no pairs (NaN) no p
        half = dist.ppf(1 - level) * se
        low, high = effect - half, effect + half  # a diverged side (+-inf) with an infinite half: no bound
    known = applied & np.isfinite(p)
    confirmed = known & (p <= level)
    final = np.where(applied & ~confirmed, NOT_CONFIRMED, verdict)
    return HeldOutDecision(final, level, se, df, np.where(applied, p, np.nan), np.where(applied, low, np.nan),
                           np.where(applied, high, np.nan), applied, confirmed)
