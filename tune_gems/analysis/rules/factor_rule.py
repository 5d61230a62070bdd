"""The rule of the factor table: one family of effects (gems and non-gem factors) decided as the
gem verdicts decide (issue 30, item 4).

Why its own module. The factor table (`factors.factor_table`) and its calibration
(`factor_calibration.family_codes`) must run one decision, and that decision must be the gem
verdicts': the seed rule on the informative pairs with Holm over the family (`rules.ties`,
`rules.seed.decide_family`: too few informative pairs read `insufficient data`); at K = 1 on one
price history the market gate and the one-period gate (`rules.gates`); at K >= 2 the period rule
on the family's fold data (`rules.period_family.decide_fold_data`: the pooled test with tau shared
across the family decides, below `min_periods` periods `insufficient data`), the same call
`walk_forward.period_verdicts` and `walk_forward_calibration.run_periods` make. `decide_effects`
is vectorised over datasets (the table calls it on S = 1, the calibration on thousands).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from tune_gems.analysis import defaults
from tune_gems.analysis.rules.gates import market_gate, one_period_gate
from tune_gems.analysis.rules.period_family import FoldData, decide_fold_data
from tune_gems.analysis.rules.seed import decide_family
from tune_gems.analysis.rules.ties import informative_rank_test
from tune_gems.stats.inference import holm_levels

MarketLookup = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]]
"""levels [S, E] -> (low, high, available) [S, E]: each effect's market-noise interval at its
seed interval's level (K = 1 on one price history)."""


@dataclass(frozen=True)
class EffectDecision:
    """The rule on families of effects ([S, E], the effects on the last axis); `pooled` (K >= 2)
    the pooled family (`rules.pooling.pool_family`'s arrays) with the period rule's `low`, `high`,
    `level`, `p_adjusted`, `tost_p_adjusted` and `q_p_adjusted`."""

    verdict: np.ndarray
    seed_verdict: np.ndarray
    estimate: np.ndarray
    p: np.ndarray
    p_adjusted: np.ndarray
    tost_p_adjusted: np.ndarray
    level: np.ndarray
    low: np.ndarray
    high: np.ndarray
    combined_low: np.ndarray
    combined_high: np.ndarray
    market_low: np.ndarray
    market_high: np.ndarray
    pooled: dict[str, np.ndarray] | None = None


def _nan(shape) -> np.ndarray:
    return np.full(shape, np.nan)


def decide_effects(diffs: list[np.ndarray], *, alpha: float, rope: float, wired=None, measured=None,
                   market: MarketLookup | None = None, periods: FoldData | None = None,
                   share: bool = defaults.SHARE_TAU, one_sided: bool = False,
                   min_periods: int = defaults.MIN_PERIODS) -> EffectDecision:
    """The rule of the gems on one family of effects (gems and factors together): `diffs[e]` the
    per-unit (fold-averaged) differences of effect e, [S, n_e] (n_e = 0: no design; `wired` /
    `measured` [E] the hi / lo cells it has, for what it lacks). The seed rule with Holm over the
    family; then with `periods` (K >= 2: the family's fold data [S, E, K]) the period rule, else
    with `market` (K = 1, one price history) the market gate and the one-period gate (module
    docstring). `share`, `one_sided`, `min_periods`: the period rule's settings (Thresholds)."""
    s = max(d.shape[0] for d in diffs)
    e = len(diffs)
    est, p, pt, lo, hi = (_nan((s, e)) for _ in range(5))
    n_inf = np.zeros((s, e), int)
    p_key = "p_greater" if one_sided else "p"
    for j, d in enumerate(diffs):  # on the informative pairs: ties carry no weight (`rules.ties`)
        if d.shape[1]:
            with np.errstate(over="ignore", invalid="ignore"):
                r = informative_rank_test(d, rope=rope, tail=alpha / 2)
            est[:, j], p[:, j], pt[:, j], n_inf[:, j] = r["estimate"], r[p_key], r["p_tost"], r["n_informative"]
    paired = np.stack([(~np.isnan(d)).sum(1) if d.shape[1] else np.zeros(s, int) for d in diffs], 1)
    rule = decide_family(p, est, pt, alpha=alpha, wired=wired, measured=measured, informative=n_inf,
                         one_sided=one_sided, paired=paired)
    level = holm_levels(p, alpha)
    sides = 1 if one_sided else 2
    for j, d in enumerate(diffs):
        if d.shape[1]:
            with np.errstate(over="ignore", invalid="ignore"):
                r = informative_rank_test(d, tail=np.nan_to_num(level[:, j], nan=alpha) / sides)
            lo[:, j], hi[:, j] = r["low"], r["high"]
    seed_verdict = rule.verdict
    verdict = seed_verdict
    out = dict(combined_low=_nan((s, e)), combined_high=_nan((s, e)), market_low=_nan((s, e)), market_high=_nan((s, e)))
    pooled = None
    if periods is not None:
        tested = np.broadcast_to(np.array([d.shape[1] > 0 for d in diffs]), (s, e))
        with np.errstate(over="ignore", invalid="ignore"):
            pooled, prule = decide_fold_data(periods, alpha=alpha, rope=rope, tested=tested, seed_verdict=seed_verdict,
                                             share=share, one_sided=one_sided, min_periods=min_periods)
        verdict = prule.verdict
        pooled = dict(pooled, low=prule.low, high=prule.high, level=prule.level, p_adjusted=prule.p_adjusted,
                      tost_p_adjusted=prule.tost_p_adjusted, q_p_adjusted=prule.q_p_adjusted,
                      too_few_periods=prule.too_few_periods, theta=periods.theta)
    elif market is not None:
        m_lo, m_hi, available = market(level)
        available = np.asarray(available, bool) & np.isfinite(est)
        diverged = np.stack([~np.isfinite(d).all(1) if d.shape[1] else np.zeros(s, bool) for d in diffs], 1)
        verdict = market_gate(verdict, est, m_lo, m_hi, applies=available & ~diverged)
        gate = one_period_gate(verdict, est, lo, hi, m_lo, m_hi, rope=rope, applies=available)
        verdict = gate.verdict
        out.update(combined_low=gate.low, combined_high=gate.high, market_low=np.where(available, m_lo, np.nan),
                   market_high=np.where(available, m_hi, np.nan))
    return EffectDecision(verdict, seed_verdict, est, p, rule.p_adjusted, rule.tost_p_adjusted, level, lo, hi,
                          pooled=pooled, **out)
