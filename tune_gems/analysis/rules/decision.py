"""The rule, composed once: one function decides a family of contrasts.

Why one function. The gem verdicts, the walk-forward verdicts, the factor table, `confirm`'s final
verdicts and every calibration must reach a word the same way, or one `analyze` prints `keep wired`
in one table and `inconclusive` in another for the same contrast, and a calibration passes while
the shipped rule drifts. So every caller gathers evidence (`Evidence`) and calls `decide`;
`tests/test_rules.py` checks that no module outside the rules calls a stage of the rule, and that
every caller calls `decide`.

The stages, in the order they run (each a function of its own module, each only ever making a
word more cautious except where the deciding test changes):

1. **the seed rule** on each contrast's informative pairs (`ties.informative_rank_test`: ties carry
   no weight), Holm over the family (`seed.decide_family`: keep / harmful / delete / equivalent /
   inconclusive, `insufficient data` on too few informative pairs, what a design lacks); the seed
   interval at each contrast's Holm level;
2. **one period on one price history** (K = 1, a market-noise interval `market` gives): the market
   gate, then the one-period gate on the seed and market-noise intervals combined (`gates`);
3. **several periods or price histories** (the family's fold data `periods`, or `histories`): the
   pooled test decides (`period_family.decide_fold_data`, over histories the nested rule
   `histories.decide_histories`), where its interval can be estimated (`MIN_POOLED_DF`; else
   `insufficient data`, no interval);
4. `equivalent` / `delete` stand on a finite interval inside +-rope (the TOST's at its Holm
   level), and not on mostly tied pairs (`insufficient data`);
5. **the held-out test segment** (`test`): a discovery keep / harmful is final only where it
   agrees (`held_out_rule`): the record's `verdict`, the word every table prints;
6. **a search's selection on one history** (`selection`: the configurations the search chose
   among, per contrast: `tune-gems confirm`'s final verdict): the interval with the history's part
   at the selection-adjusted level must still exclude 0 (`selection`): `final_verdict`.

Vectorised over a leading axis of datasets: the verdicts call it on one family (S = 1), the
calibrations on thousands of simulated ones.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Sequence

import numpy as np
from scipy import stats as sps

from tune_gems.analysis import defaults
from tune_gems.analysis.rules.gates import market_gate, one_period_gate
from tune_gems.analysis.rules.held_out_rule import HeldOutDecision, TestSegment, confirmation_level, held_out_stage
from tune_gems.analysis.rules.histories import HistoryData, HistoryPooled, decide_histories
from tune_gems.analysis.rules.period_family import FoldData, decide_fold_data
from tune_gems.analysis.rules.periods import PeriodDecision
from tune_gems.analysis.rules.pooling import pooled_bounds
from tune_gems.analysis.rules.seed import decide_family
from tune_gems.analysis.rules.selection import final_on_one_history, pooled_adjusted_bounds, selection_adjusted_bounds
from tune_gems.analysis.rules.thresholds import Thresholds
from tune_gems.analysis.rules.ties import informative_rank_test
from tune_gems.analysis.rules.words import DELETE, EQUIVALENT, INCONCLUSIVE, INCONSISTENT, INSUFFICIENT
from tune_gems.stats.inference import holm_levels

MarketLookup = Callable[[np.ndarray], tuple]
"""Per-side tails [S, E] (each contrast's seed-interval tail: its Holm level over the sides) ->
(low, high, available) [S, E]: each contrast's market-noise interval at that tail (K = 1 on one
price history), optionally followed by the lookup's table of that evidence (per contrast: the
verdicts' market-noise columns), which the record keeps as `market_table`."""


@dataclass(frozen=True)
class Evidence:
    """What a family of E contrasts brings to the rule ([S, ...] arrays, datasets first).

    `diffs[e]` the per-unit differences of contrast e, [S, n_e] (fold-averaged over the folds a
    unit pairs in; n_e = 0: no design); `tested` [S, E] the contrasts in the family (default:
    those with pairs; a calibration's search leaves out the gems it chose nothing for); `wired`,
    `measured` [E] the cells each side has (what a contrast without a design lacks); `magnitude_p`
    [S, E] the TOST p of a gem's measured magnitude at its null and `redundant` [E] whether a model
    feature removes it (the halves of `delete`; None: no delete); `diverged` [S, E] where a member
    diverged (the market gate does not apply: divergence is not market noise; default: a
    non-finite unit difference); `market` the market-noise intervals (K = 1, one price history);
    `periods` the family's fold data (K >= 2 on one history), `histories` its data over several
    price histories (the nested rule), `fold_corr` the overlap of one history's folds that share
    training rows (`rules.overlap`: a number or a [K, K] matrix; 0: none; over several histories
    their spread measures it); `test` the held-out
    test segment's effects (the second stage: a discovery keep / harmful is final only where they
    agree; None: no second stage); `selection` [E] or [S, E] how many configurations a search
    chose each contrast's among, on one history (None: fresh data, no selection gate)."""

    diffs: Sequence[np.ndarray]
    tested: np.ndarray | None = None
    wired: Sequence | None = None
    measured: Sequence | None = None
    magnitude_p: np.ndarray | None = None
    redundant: Sequence | None = None
    diverged: np.ndarray | None = None
    market: MarketLookup | None = None
    periods: FoldData | None = None
    histories: HistoryData | None = None
    fold_corr: object = 0.0
    test: TestSegment | None = None
    selection: Sequence | None = None


@dataclass(frozen=True)
class Decision:
    """The rule's record of a family ([S, E] arrays), built by keyword. The words, in the order the
    stages make them: `seed_verdict` the seed rule's, `market_verdict` after the market gate,
    `discovery_verdict` after the one-period gate, the period rule or the nested rule over
    histories, `verdict` after the held-out stage (the word verdicts.csv and factors.csv print),
    `final_verdict` after a search's selection gate (a confirmation on one history; else
    `verdict`). The seed rule's numbers (`estimate`, `p`, `p_tost`, `p_adjusted`,
    `tost_p_adjusted`, `magnitude_p_adjusted`, `magnitude_at_null`, `n_informative`,
    `tied_share`, `level` the Holm level, `low`, `high` the seed interval at it); K = 1:
    `market_low`, `market_high`, `market_available`, `combined_low`, `combined_high`,
    `gate_applied` and the market lookup's own table (`market_table`, where it returns one);
    `equivalence_low`, `equivalence_high` the interval an `equivalent` / `delete` stands on (the
    TOST's at its Holm level `equivalence_level` per side: the pooled test's where it decides,
    else the seeds');
    K >= 2: `pooled` (`pool_family`'s arrays: over histories the second stage's) and `period`
    (the period rule's decision), over histories `histories` (both stages); with a test segment
    `held_out` (the second stage's record); with a selection: `final_low`, `final_high`,
    `final_available`."""

    verdict: np.ndarray
    final_verdict: np.ndarray
    seed_verdict: np.ndarray
    market_verdict: np.ndarray
    discovery_verdict: np.ndarray
    estimate: np.ndarray
    p: np.ndarray
    p_tost: np.ndarray
    p_adjusted: np.ndarray
    tost_p_adjusted: np.ndarray
    magnitude_p_adjusted: np.ndarray
    magnitude_at_null: np.ndarray
    n_informative: np.ndarray
    tied_share: np.ndarray
    level: np.ndarray
    low: np.ndarray
    high: np.ndarray
    market_low: np.ndarray
    market_high: np.ndarray
    market_available: np.ndarray
    combined_low: np.ndarray
    combined_high: np.ndarray
    gate_applied: np.ndarray
    equivalence_low: np.ndarray
    equivalence_high: np.ndarray
    equivalence_level: np.ndarray
    market_table: Sequence | None = None
    pooled: dict[str, np.ndarray] | None = None
    period: PeriodDecision | None = None
    histories: HistoryPooled | None = None
    held_out: HeldOutDecision | None = None
    final_low: np.ndarray | None = None
    final_high: np.ndarray | None = None
    final_available: np.ndarray | None = None


def _nan(shape) -> np.ndarray:
    return np.full(shape, np.nan)


def _not_on_ties(verdict: np.ndarray, tied: np.ndarray) -> np.ndarray:
    """`equivalent` / `delete` read `insufficient data` where more than `defaults.MAX_TIED_SHARE`
    of the pairs tie (a degenerate design: mostly identical policies, said out loud)."""
    mostly_tied = np.nan_to_num(tied, nan=0.0) > defaults.MAX_TIED_SHARE
    return np.where(mostly_tied & np.isin(verdict, (EQUIVALENT, DELETE)), INSUFFICIENT, verdict)


MIN_POOLED_DF = 1.0
"""Fewest degrees of freedom a pooled variance decides with: below it the t quantile of its
interval runs away (0.5 df: t_0.975 = 71, an interval of +-35 around a spread of 0.5), so the
interval cannot be estimated and the contrast reads `insufficient data`."""


def _estimable(period: PeriodDecision, pooled: dict, tested: np.ndarray, alpha: float):
    """(the period rule's decision where its interval can be estimated: at least MIN_POOLED_DF
    degrees of freedom and a finite bound, elsewhere `insufficient data` without an interval (a
    sign change, shown by the folds' own intervals, stands); the pooled equivalence interval, the
    TOST's at its Holm level, and that level per side)."""
    decided = tested & ~period.too_few_periods & np.isfinite(pooled["mu"]) & (period.verdict != INCONSISTENT)
    bad = decided & (~(pooled["df"] >= MIN_POOLED_DF) | ~np.isfinite(period.low))
    level = holm_levels(np.where(tested & ~period.too_few_periods, pooled["p_tost"], np.nan), alpha)
    level = np.nan_to_num(level, nan=alpha)
    eq = pooled_bounds(pooled["mu"], pooled["se"], pooled["se_fixed"], pooled["df"], level, pooled["df_fixed"])
    return replace(period, verdict=np.where(bad, INSUFFICIENT, period.verdict), low=np.where(bad, np.nan, period.low),
                   high=np.where(bad, np.nan, period.high)), (*(np.where(bad, np.nan, b) for b in eq), level)


def _seed_interval(ev: Evidence, tail: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each contrast's signed-rank interval on its informative pairs at `tail` [S, E] per side."""
    s, e = tail.shape
    lo, hi = _nan((s, e)), _nan((s, e))
    for j, d in enumerate(ev.diffs):
        if d.shape[1]:
            with np.errstate(over="ignore", invalid="ignore"):
                r = informative_rank_test(d, tail=tail[:, j])
            lo[:, j], hi[:, j] = r.low, r.high
    return lo, hi


def _seed_stage(ev: Evidence, th: Thresholds, s: int, e: int):
    """The seed rule's tests on each contrast's informative pairs: (estimate, p, p_tost,
    n_informative, tied_share, paired) [S, E]."""
    est, p, pt, tied = (_nan((s, e)) for _ in range(4))
    n_inf = np.zeros((s, e), int)
    p_key = "p_greater" if th.one_sided_keep else "p"
    for j, d in enumerate(ev.diffs):  # ties carry no weight (`rules.ties`)
        if d.shape[1]:
            with np.errstate(over="ignore", invalid="ignore"):
                r = informative_rank_test(d, rope=th.rope, tail=th.alpha / 2)
            est[:, j], p[:, j], pt[:, j], n_inf[:, j], tied[:, j] = (r.estimate, getattr(r, p_key), r.p_tost,
                                                                     r.n_informative, r.tied_share)
    paired = np.stack([(~np.isnan(d)).sum(1) if d.shape[1] else np.zeros(s, int) for d in ev.diffs], 1)
    if ev.tested is not None:
        keep = np.broadcast_to(np.asarray(ev.tested, bool), (s, e))
        p = np.where(keep, p, np.nan)
        paired = np.where(keep, paired, 0)
    return est, p, pt, n_inf, tied, paired


def decide(ev: Evidence, th: Thresholds, *, isolate_flagged: bool = defaults.ISOLATE_FLAGGED,
           isolate_level: float = defaults.ISOLATE_LEVEL) -> Decision:
    """The rule on one family of contrasts (module docstring) at the analysis's settings `th`
    (alpha, rope, the one-sided keep test, min_periods, share_tau); `isolate_flagged`,
    `isolate_level`: a contrast flagged as heterogeneous leaves the family's shared tau^2
    (`pooling.pool_family`)."""
    s = max(d.shape[0] for d in ev.diffs)
    e = len(ev.diffs)
    sides = 1 if th.one_sided_keep else 2
    est, p, pt, n_inf, tied, paired = _seed_stage(ev, th, s, e)
    rule = decide_family(p, est, pt, alpha=th.alpha, p_magnitude=ev.magnitude_p, redundant=ev.redundant,
                         wired=ev.wired, measured=ev.measured, informative=n_inf, one_sided=th.one_sided_keep,
                         paired=paired)
    level = holm_levels(p, th.alpha)
    lo, hi = _seed_interval(ev, np.nan_to_num(level, nan=th.alpha) / sides)  # at the contrast's Holm level
    # equivalence: the TOST's two one-sided tests at its Holm level, an interval inside +-rope
    eq_level = np.nan_to_num(holm_levels(pt, th.alpha), nan=th.alpha)
    eq_lo, eq_hi = _seed_interval(ev, eq_level)
    if th.one_sided_keep:  # the one-sided keep interval [low, +inf)
        hi = np.where(np.stack([np.full(s, d.shape[1] > 0) for d in ev.diffs], 1), np.inf, np.nan)
    seed_verdict = _not_on_ties(rule.verdict, tied)
    market_verdict = discovery = seed_verdict
    m_lo, m_hi, c_lo, c_hi = (_nan((s, e)) for _ in range(4))
    available, applied = np.zeros((s, e), bool), np.zeros((s, e), bool)
    pooled = period = hp = market_table = None
    tail = np.nan_to_num(level, nan=th.alpha) / sides
    if ev.market is not None:
        m_lo, m_hi, available, *table = ev.market(tail)
        m_lo, m_hi, available, market_table = np.asarray(m_lo), np.asarray(m_hi), np.asarray(available), next(iter(table), None)
        available = available.astype(bool) & np.isfinite(est)
        m_lo, m_hi = np.where(available, m_lo, np.nan), np.where(available, m_hi, np.nan)
    if ev.periods is not None or ev.histories is not None:  # K >= 2 or several histories: the pooled test decides
        tested = np.broadcast_to(np.array([d.shape[1] > 0 for d in ev.diffs]), (s, e))
        if ev.tested is not None:
            tested = tested & np.asarray(ev.tested, bool)
        removable = None
        if ev.magnitude_p is not None or ev.redundant is not None:
            red = np.broadcast_to(False if ev.redundant is None else np.asarray(ev.redundant, bool), (s, e))
            removable = rule.magnitude_at_null | red
        common = dict(alpha=th.alpha, rope=th.rope, tested=tested, seed_verdict=seed_verdict, removable=removable,
                      share=th.share_tau, one_sided=th.one_sided_keep, min_periods=th.min_periods,
                      isolate_flagged=isolate_flagged, isolate_level=isolate_level)
        with np.errstate(over="ignore", invalid="ignore"):
            if ev.histories is not None:  # the nested rule: each history's effect, then over histories and calendar
                hp, period = decide_histories(ev.histories, **common)
                pooled = hp.pooled
            else:
                pooled, period = decide_fold_data(ev.periods, fold_corr=ev.fold_corr, **common)
            period, pooled_eq = _estimable(period, pooled, tested, th.alpha)
        decided = tested & ~period.too_few_periods
        eq_lo, eq_hi, eq_level = (np.where(decided, a, b) for a, b in zip(pooled_eq, (eq_lo, eq_hi, eq_level)))
        discovery = period.verdict
    elif ev.market is not None:  # K = 1 on one price history: the market gate, then the one-period gate
        diverged = (np.stack([~np.isfinite(d).all(1) if d.shape[1] else np.zeros(s, bool) for d in ev.diffs], 1)
                    if ev.diverged is None else np.broadcast_to(np.asarray(ev.diverged, bool), (s, e)))
        market_verdict = market_gate(seed_verdict, est, m_lo, m_hi, applies=available & ~diverged)
        gate = one_period_gate(market_verdict, est, lo, hi, m_lo, m_hi, rope=th.rope, applies=available)
        discovery, c_lo, c_hi, applied = gate.verdict, gate.low, gate.high, gate.applied
    with np.errstate(invalid="ignore"):  # `equivalent` / `delete` stand on a finite interval inside +-rope
        inside = (eq_lo > -th.rope) & (eq_hi < th.rope)
    discovery = np.where(np.isin(discovery, (EQUIVALENT, DELETE)) & ~applied & ~inside, INCONCLUSIVE, discovery)
    discovery = _not_on_ties(discovery, tied)
    verdict = discovery
    held = None
    if ev.test is not None:  # the held-out test segment, a pre-registered second stage
        m = np.isfinite(p).sum(-1, keepdims=True)
        with np.errstate(invalid="ignore"):
            market_var = ((m_hi - m_lo) / (2 * sps.norm.ppf(1 - tail))) ** 2
        fd = ev.periods
        held = held_out_stage(verdict, ev.test, confirmation_level(th.alpha, m),
                              calendar=hp.calendar if hp is not None else None, pooled=pooled,
                              fold_var=None if fd is None else fd.var * (1 - fd.seed_share[..., None]),
                              fold_n=None if fd is None else fd.n_informative,
                              fold_theta=None if fd is None else fd.theta, market_var=market_var)
        verdict = held.verdict
    final, f_lo, f_hi, f_ok = verdict, None, None, None
    if ev.selection is not None:  # a search's choice on one history: the selection-adjusted gate
        t = np.broadcast_to(np.asarray(ev.selection, float), (s, e))
        with np.errstate(invalid="ignore"):
            if period is not None:
                f_lo, f_hi = pooled_adjusted_bounds(pooled["mu"], period.low, period.high, period.level, pooled["df"], t)
                f_ok = np.isfinite(f_lo) & np.isfinite(f_hi)
            else:
                f_lo, f_hi = selection_adjusted_bounds(est, lo, hi, m_lo, m_hi, 2 * tail, t)
                f_ok = available
        final = final_on_one_history(verdict, f_lo, f_hi, f_ok)
    return Decision(verdict=verdict, final_verdict=final, seed_verdict=seed_verdict, market_verdict=market_verdict,
                    discovery_verdict=discovery, estimate=est, p=p, p_tost=pt, p_adjusted=rule.p_adjusted,
                    tost_p_adjusted=rule.tost_p_adjusted, magnitude_p_adjusted=rule.magnitude_p_adjusted,
                    magnitude_at_null=rule.magnitude_at_null, n_informative=n_inf, tied_share=tied, level=level,
                    low=lo, high=hi, market_low=m_lo, market_high=m_hi, market_available=available,
                    combined_low=c_lo, combined_high=c_hi, gate_applied=applied, equivalence_low=eq_lo,
                    equivalence_high=eq_hi, equivalence_level=eq_level, market_table=market_table,
                    pooled=pooled, period=period, histories=hp, held_out=held, final_low=f_lo, final_high=f_hi,
                    final_available=f_ok)
