"""The test segment as a pre-registered second stage, valid on its own.

Why. A check printed beside a verdict changes no word, and a criterion on the test segment's seed
interval alone leaves out what separates one period from another. So the test segment is the
confirmation, decided before it is looked at (docs/analysis.md "The held-out confirmation"):

- only a discovery `keep wired` or `harmful` is confirmed; the test segment chooses nothing else;
- its effect (the same pairs) is compared with 0 one-sided in the discovery's direction at
  **alpha / m** (`confirmation_level`): on its own a Bonferroni test of the m contrasts on data the
  discovery did not see, so the two-stage family-wise rate stays below alpha even where the
  discovery's does not, **provided the stage is calibrated alone**: its standard error carries
  everything that moves the test effect under the null (`held_out_stage`), on Welch-Satterthwaite
  degrees of freedom:
  - **several histories** (`history_test`): the mean of the histories' test effects, se^2 = their
    sample variance / H (their spread on the test itself, H - 1 df, never truncated at 0) + the
    seeds' part common to every history + on one calendar the calendar part (the test segment is
    one period of every history: the spread of the shared validation periods' means, `rules.calendar`'s
    `means_var`, never truncated; the ANOVA's truncated estimate read 1.5x the level at 6-8
    histories); fewer than `defaults.MIN_SHARED_PERIODS` shared periods confirm nothing;
  - **one history over folds**: the seeds' variance + the pooled rule's tau^2 on DerSimonian-Laird's
    own df (Q's x (tau^2 / (tau^2 + v))^2), at least `defaults.HELD_OUT_PERIOD_FLOOR` x a fold's seed
    variance v (where DL reads 0, K periods cannot tell a small spread from none: without both the
    stage alone read up to 2.4x its level);
  - **one period on one history**: the market-noise variance (per-seed synthetic paths hold it in
    the seeds' variance); without one, no confirmation is possible;
- a discovery whose test effect does not agree, or has none, reads `not confirmed on held-out
  data` (`words.NOT_CONFIRMED`), both intervals kept for the reason line.

`seed_level_effect`: each seed's test differences averaged over the folds (the seed is the unit),
then the Hodges-Lehmann effect and its squared standard error from the signed-rank interval
(`pooling.fold_estimates`' estimator). Arrays in, words out: `decision.decide` calls
`held_out_stage`; `decision_calibration` calls it too, and `held_out_alone` on every contrast.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from tune_gems.analysis import defaults
from tune_gems.analysis.rules.calendar import CalendarPart
from tune_gems.analysis.rules.period_family import sample_variance
from tune_gems.analysis.rules.pooling import FOLD_VAR_DF, fold_estimates, satterthwaite, seed_anova
from tune_gems.analysis.rules.words import HARMFUL, KEEP, NOT_CONFIRMED

@dataclass(frozen=True)
class TestSegment:
    """The held-out test segment's effect of each contrast, [S, E]: `effect`, its seeds' squared
    standard error `var` and that variance's degrees of freedom `df` (`seed_level_effect`; NaN
    effect: no test pairs); `spread_in_seeds` [S, E] (or one bool) where the seeds' variance already
    holds the test period's luck (per-seed synthetic paths: each seed its own market), so at one
    period no market-noise part is added; over several price histories `by_history` [S, E, H, n]
    each seed's test differences averaged over its folds in each history (seeds aligned across the
    histories; NaN: no pair), from which `history_test` reads the spread between histories (None:
    one history)."""

    effect: np.ndarray
    var: np.ndarray
    df: np.ndarray
    spread_in_seeds: np.ndarray | bool = False
    by_history: np.ndarray | None = None


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
    for an interval), `df` that variance's degrees of freedom (`FOLD_VAR_DF` (n - 1)), `p` the
    two-sided signed-rank p, `n` the informative seeds. A seed with no pair in any fold is left out;
    +-inf (a diverged side) stays as the rank test reads it."""
    d = np.asarray(d_test, float)
    with np.errstate(invalid="ignore"):
        present = ~np.isnan(d)
        seed = np.where(present.any(1), np.nansum(np.where(present, d, 0.0), 1) / np.maximum(present.sum(1), 1), np.nan)
    est = fold_estimates(seed)
    n = np.asarray(est["n_informative"], float)
    return dict(theta=est["theta"], var=est["var"], df=FOLD_VAR_DF * np.maximum(n - 1, 0.0), p=est["p"], n=n)


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


def history_test(by_history) -> dict[str, np.ndarray]:
    """The test segment over H >= 2 histories ([S, E, H, n] per-seed test differences, each seed's
    averaged over a history's folds; NaN: no pair): `theta` the mean of the histories' test effects
    (Hodges-Lehmann of each history's seeds), `var` their sample variance / H plus the seeds' part
    common to every history (`pooling.seed_anova` over seeds x histories), `df` Welch-Satterthwaite's
    of the two (H - 1 and the ANOVA's). NaN with fewer than two histories with an effect."""
    d = np.asarray(by_history, float)
    s, e, h, n = d.shape
    th = fold_estimates(d.reshape(s * e * h, n))["theta"].reshape(s, e, h)
    ok = np.isfinite(th)
    k = ok.sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(ok, th, 0.0).sum(-1) / k
        spread = np.where(ok, (th - mean[..., None]) ** 2, 0.0).sum(-1) / (k - 1) / k
        anova = [seed_anova(d[:, j]) for j in range(e)]
        common = np.stack([np.where(a["seeds"] >= 2, np.nan_to_num(a["sigma_c2"]) / np.maximum(a["seeds"], 1), 0.0)
                           for a in anova], 1)
        common_df = np.stack([a["df"] for a in anova], 1)
        df = satterthwaite([spread, common], [k - 1.0, common_df])
    few = k < 2
    return dict(theta=np.where(few, np.nan, mean), var=np.where(few, np.nan, spread + common),
                df=np.where(few, np.nan, df))


def held_out_stage(verdict, test: TestSegment, level, *, calendar: CalendarPart | None = None, pooled=None,
                   fold_var=None, fold_n=None, fold_theta=None, market_var=None) -> HeldOutDecision:
    """The second stage as the composed rule applies it (module docstring) on the discovery's words
    `verdict` [S, E] at the one-sided `level`: over several histories (`calendar`, the nested rule's
    calendar part, and `test.by_history`) `history_test` with the calendar part where the histories
    share periods; on one history over folds (`pooled`, `pool_family`'s dict) the seeds' variance
    plus tau^2 at least `defaults.HELD_OUT_PERIOD_FLOOR` x `fold_var` (the folds' seed variances,
    [S, E, K], the part that varies between them; `fold_n` their informative pairs), or where the rule
    pooled with equal weights (no tau^2) the fold effects' own spread (`fold_theta`); at one period
    the market-noise variance `market_var`."""
    verdict = np.asarray(verdict, dtype=object)
    shape = verdict.shape
    effect, var, df = test.effect, test.var, test.df
    if calendar is not None and test.by_history is not None:  # several histories: their spread on the test
        r = history_test(test.by_history)
        effect, var, df = r["theta"], r["var"], r["df"]
        # one calendar: the test segment is one period of every history; its calendar part is read off
        # the spread of the shared periods' means (never truncated), on at least MIN_SHARED_PERIODS
        bounded = calendar.periods >= defaults.MIN_SHARED_PERIODS
        period_var = np.where(calendar.shared, np.where(bounded, calendar.means_var, np.nan), 0.0)
        period_df = np.where(calendar.shared, calendar.means_df, np.inf)
    elif pooled is not None:  # one history over folds: the periods' spread, floored
        period_var, period_df = pooled["tau2"], pooled["df"]
        with np.errstate(invalid="ignore", divide="ignore"):
            if fold_var is not None:
                v = np.asarray(fold_var, float)
                fin = np.isfinite(v)
                v_bar = np.where(fin, v, 0.0).sum(-1) / np.maximum(fin.sum(-1), 1)
                # DerSimonian-Laird's tau^2 is read off Q, whose spread is that of tau^2 + a fold's
                # variance: its df as a variance estimate are Q's x (tau^2 / (tau^2 + v))^2; the floor
                # is a share of the folds' seed variances, known as well as they are
                floor = defaults.HELD_OUT_PERIOD_FLOOR * v_bar
                period_df = np.where(period_var > floor, period_df * (period_var / (period_var + v_bar)) ** 2,
                                     np.inf if fold_n is None else
                                     FOLD_VAR_DF * np.where(fin, np.asarray(fold_n, float) - 1, 0).sum(-1))
                period_var = np.fmax(period_var, floor)
            if fold_theta is not None:  # pooled with equal weights (a fold's variance unknown): no tau^2
                th = np.asarray(fold_theta, float)  # the fold effects' sample variance, seed noise included
                period_var = np.where(np.isfinite(pooled["tau2"]), period_var, sample_variance(th, np.isfinite(th)))
    else:  # one period: the history's luck, the market-noise variance (none: nothing is confirmed)
        period_var = np.where(np.broadcast_to(np.asarray(test.spread_in_seeds, bool), shape), 0.0,
                              np.broadcast_to(np.asarray(market_var, float), shape))
        period_df = np.inf
    return confirm_on_held_out(verdict, effect, var, period_var, level, test_df=df, period_df=period_df)


def held_out_alone(test: TestSegment, level, **stage) -> np.ndarray:
    """[S, E] where `held_out_stage` (with the same evidence, `stage`) confirms each contrast as if
    every one were a discovery `keep wired`: the stage's own false rate under the null, which must
    stay at most `level` whatever the discovery did (the calibration's "held-out alone")."""
    shape = np.shape(test.effect)
    return held_out_stage(np.full(shape, KEEP, dtype=object), test, level, **stage).confirmed
