"""A family's fold data and the period rule on it: the one K >= 2 decision every caller makes.

Why its own module. The rule's one composition (`decision.decide`, which the gem verdicts, the
factor table, `confirm` and every calibration call) decides a family of contrasts over periods
through it: the per-fold effects on their informative pairs
(`pooling.fold_estimates`), the seeds' part shared by every fold (`pooling.seed_anova`,
`pooling.shared_seed_variance`), the family pooled with tau shared where the contrasts agree
(`pooling.pool_family`) and the period rule (`periods.decide_periods`). A caller that strung
these together itself would drift from the verdicts, so every caller holds `FoldData` and calls
`decide_fold_data`; the tests of "one rule" (tests/test_rules.py) check
that every caller holds these objects.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tune_gems.analysis import defaults
from tune_gems.analysis.rules.periods import PeriodDecision, decide_periods
from tune_gems.analysis.rules.pooling import fold_estimates, pool_family, seed_anova, shared_seed_variance
from tune_gems.analysis.rules.variance_parts import PooledComponents, components
from tune_gems.analysis.rules.ties import is_tie


@dataclass(frozen=True)
class FoldData:
    """A family's fold data as the period rule reads it: per contrast and fold [S, m, K] the
    effect `theta` (NaN: the fold does not pair it or holds no informative pair), its squared
    standard error `var`, its own signed-rank `p` and `n_informative` pairs; per contrast [S, m]
    the seeds' common part `seed_var` (sigma_c^2 / n), its `seed_share` of a fold's variance and
    that share's degrees of freedom `seed_df`; `sample_var` [S, m, K] the sample variance of a
    fold's informative differences (the power statement's fallback where the fold's rank
    interval is too short for a standard error; None: not kept)."""

    theta: np.ndarray
    var: np.ndarray
    p: np.ndarray
    n_informative: np.ndarray
    seed_var: np.ndarray
    seed_share: np.ndarray
    seed_df: np.ndarray
    sample_var: np.ndarray | None = None


def fold_components(fd: FoldData, tau2) -> PooledComponents:
    """The pooled components of a family's fold data (`variance_parts.components`, a fold without a rank
    interval read by its sample variance): what the verdicts, the plan and the calibration state
    their power with."""
    return components(fd.var, fd.n_informative, fd.seed_share, tau2, fd.theta, sample_var=fd.sample_var)


def informative_variance(d: np.ndarray) -> np.ndarray:
    """The sample variance of the finite informative differences (ties and NaN left out) along
    the last axis of d (NaN with fewer than two)."""
    d = np.asarray(d, float)
    return sample_variance(d, np.isfinite(d) & ~is_tie(d))


def sample_variance(d: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """The sample variance of the entries of d that `keep` marks, along the last axis (NaN with
    fewer than two)."""
    d = np.asarray(d, float)
    cnt = keep.sum(-1)
    x = np.where(keep, d, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = x.sum(-1) / cnt
        ss = np.where(keep, (d - mean[..., None]) ** 2, 0.0).sum(-1)
        return np.where(cnt >= 2, ss / (cnt - 1), np.nan)


def fold_data(d: np.ndarray) -> FoldData:
    """The fold data of per-seed differences d [S, m, K, n] whose seeds are aligned across the
    K folds (a simulated family; NaN: no pair)."""
    d = np.asarray(d, float)
    s, m, k, n = d.shape
    fe = fold_estimates(d.reshape(s * m * k, n))
    theta, var, p, n_inf = (fe[key].reshape(s, m, k) for key in ("theta", "var", "p", "n_informative"))
    seed_var = np.stack([shared_seed_variance(d[:, g]) for g in range(m)], 1)
    anova = [seed_anova(d[:, g]) for g in range(m)]
    return FoldData(theta, var, p, n_inf, seed_var, np.stack([a["share"] for a in anova], 1),
                    np.stack([a["df"] for a in anova], 1), informative_variance(d))


def pool_fold_data(fd: FoldData, *, rope: float, share: bool = defaults.SHARE_TAU,
                   one_sided: bool = False, fold_corr=0.0,
                   isolate_flagged: bool = defaults.ISOLATE_FLAGGED,
                   isolate_level: float = defaults.ISOLATE_LEVEL) -> dict[str, np.ndarray]:
    """`pooling.pool_family` on a family's fold data (the informative pairs behind each fold
    variance and the seed share's df given, as every caller gives them); `fold_corr` the folds'
    overlap (`rules.overlap`; 0: none) and `isolate_flagged` as `pool_family` takes them."""
    return pool_family(fd.theta, fd.var, seed_share=fd.seed_share, seed_var=fd.seed_var, rope=rope, share=share,
                       one_sided=one_sided, fold_n=np.where(np.isnan(fd.theta), np.nan, fd.n_informative),
                       seed_df=fd.seed_df, fold_corr=fold_corr, isolate_flagged=isolate_flagged,
                       isolate_level=isolate_level)


def decide_fold_data(fd: FoldData, *, alpha: float, rope: float, tested=None, seed_verdict=None, removable=None,
                     share: bool = defaults.SHARE_TAU, one_sided: bool = False,
                     min_periods: int = defaults.MIN_PERIODS, fold_corr=0.0,
                     isolate_flagged: bool = defaults.ISOLATE_FLAGGED,
                     isolate_level: float = defaults.ISOLATE_LEVEL) -> tuple[dict[str, np.ndarray], PeriodDecision]:
    """(the pooled family, `pool_fold_data`; the period rule's decision, `periods.decide_periods`)
    on one family's fold data. `tested` [S, m] the contrasts with a comparison (default all);
    `seed_verdict` the words kept where not tested; `removable` the magnitude half of delete;
    `fold_corr`, `isolate_flagged`: `pool_fold_data`'s."""
    pooled = pool_fold_data(fd, rope=rope, share=share, one_sided=one_sided, fold_corr=fold_corr,
                            isolate_flagged=isolate_flagged, isolate_level=isolate_level)
    shape = fd.theta.shape[:2]
    tested = np.ones(shape, bool) if tested is None else np.broadcast_to(np.asarray(tested, bool), shape)
    rule = decide_periods(tested, pooled["p"], pooled["p_tost"], pooled["mu"], pooled["se"], pooled["se_fixed"],
                          pooled["df"], pooled["q_p"], pooled["periods"], fd.theta, fd.p, alpha=alpha,
                          seed_verdict=seed_verdict, removable=removable, min_periods=min_periods,
                          one_sided=one_sided, df_fixed=pooled["df_fixed"])
    return pooled, rule
