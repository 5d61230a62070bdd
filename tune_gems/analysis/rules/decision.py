"""The rule, composed once: `decide` turns a family's evidence into its words, so the gem verdicts, the factor table,
`confirm`'s final verdicts and every calibration reach a word the same way (`tests/test_rules.py` checks that no module
outside the rules calls a stage). The stages in order, each only making a word more cautious except where the deciding
test changes (docs/analysis.md "Verdicts", "The rule module"): the seed rule (`decide_family`: signed-rank tests on
informative pairs, Holm over the family); on one period of one history `market_gate`, then `one_period_gate` on the seed
and market-noise intervals combined (each alone is up to ~3x too liberal); over periods or histories the pooled test
(`periods.decide_fold_data`, `histories.decide_histories`); `equivalent` / `delete` on a finite interval inside +-rope;
the held-out segment (`held_out_stage`: a discovery keep / harmful is final only where its test effect agrees, one-sided
at alpha / m); a search's selection on one history (`final_on_one_history`: fresh seeds alone keep each configuration's
luck, a false keep in 24-98% of null searches). Vectorised over a leading axis of datasets."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Sequence

import numpy as np
from scipy import stats as sps

from tune_gems.analysis import defaults
from tune_gems.analysis.rules.histories import CalendarPart, HistoryData, HistoryPooled, decide_histories
from tune_gems.analysis.rules.periods import (
    FOLD_VAR_DF, FoldData, PeriodDecision, Pooling, cannot_decide, decide_fold_data, fold_estimates, informative_rank_test,
    pooled_bounds, sample_variance, satterthwaite, seed_anova,
)
from tune_gems.analysis.rules.settings import (
    CONFOUNDED, DECISIVE, DELETE, EQUIVALENT, HARMFUL, INCONCLUSIVE, INCONSISTENT, INSUFFICIENT, KEEP, NO_DATA,
    NOT_CONFIRMED, NOT_TESTED, Thresholds,
)
from tune_gems.stats.inference import holm, holm_levels, smallest_p


MarketLookup = Callable[[np.ndarray], tuple]
"""Per-side tails [S, E] (each contrast's seed-interval tail: its Holm level over the sides) ->
(low, high, available) [S, E]: each contrast's market-noise interval at that tail (K = 1 on one
price history), optionally followed by the lookup's table of that evidence (per contrast: the
verdicts' market-noise columns), which the record keeps as `market_table`."""


@dataclass(frozen=True)
class Evidence:
    """What a family of E contrasts brings to the rule ([S, ...] arrays, datasets first; None: that
    stage does not run): `market` K = 1 on one history, `periods` K >= 2, `histories` the nested
    rule, `test` the held-out segment, `selection` the configurations a search chose among."""

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
    """The rule's record of a family ([S, E] arrays), its words in the order the stages make them: `seed_verdict`,
    `market_verdict`, `discovery_verdict`, `verdict` (verdicts.csv's), `final_verdict`."""

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
    """(the period rule's words, `insufficient data` where its interval has under MIN_POOLED_DF df
    or an infinite bound; the pooled TOST interval and its level per side)."""
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


def decide(ev: Evidence, th: Thresholds, *, isolate_flagged: bool = defaults.ISOLATE_FLAGGED,
           isolate_level: float = defaults.ISOLATE_LEVEL) -> Decision:
    """The rule on one family of contrasts (module docstring) at the settings `th`;
    `isolate_flagged`: a heterogeneous contrast leaves the shared tau^2."""
    s = max(d.shape[0] for d in ev.diffs)
    e = len(ev.diffs)
    sides = 1 if th.one_sided_keep else 2
    rule = decide_family(ev, th, s)
    est, p, pt, n_inf, tied = rule.estimate, rule.p, rule.p_tost, rule.n_informative, rule.tied_share
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
        common = dict(tested=tested, seed_verdict=seed_verdict, removable=removable,
                      how=Pooling.of(th, isolate_flagged=isolate_flagged, isolate_level=isolate_level))
        with np.errstate(over="ignore", invalid="ignore"):
            if ev.histories is not None:  # the nested rule: each history's effect, then over histories and calendar
                hp, period = decide_histories(ev.histories, th, **common)
                pooled = hp.pooled
            else:
                pooled, period = decide_fold_data(ev.periods, th, fold_corr=ev.fold_corr, **common)
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


REMOVES, REDUCES, DOES_NOT_REMOVE, NO_DESIGN = "removes", "reduces", "does not remove", "no design"
"""The redundancy table's findings: `removes` is the half of `delete` a model feature gives."""


@dataclass(frozen=True)
class FamilyDecision:
    """The seed rule on families of contrasts ([S, E]): its tests, their Holm adjustment and the words."""

    verdict: np.ndarray
    estimate: np.ndarray
    p: np.ndarray
    p_tost: np.ndarray
    p_adjusted: np.ndarray
    tost_p_adjusted: np.ndarray
    magnitude_p_adjusted: np.ndarray
    magnitude_at_null: np.ndarray
    n_informative: np.ndarray
    tied_share: np.ndarray
    too_few_informative: np.ndarray


def decide_family(ev: Evidence, th: Thresholds, s: int) -> FamilyDecision:
    """The seed rule (module docstring): each contrast's signed-rank tests, Holm over the family; a contrast without a
    test reads what its design lacks (`design_verdict`), one whose pairs all tie `insufficient data`."""
    e, alpha = len(ev.diffs), th.alpha
    est, p, pt, tied = (_nan((s, e)) for _ in range(4))
    n_inf = np.zeros((s, e), int)
    p_key = "p_greater" if th.one_sided_keep else "p"
    for j, d in enumerate(ev.diffs):  # ties carry no weight (`rules.periods`)
        if d.shape[1]:
            with np.errstate(over="ignore", invalid="ignore"):
                r = informative_rank_test(d, rope=th.rope, tail=alpha / 2)
            est[:, j], p[:, j], pt[:, j], n_inf[:, j], tied[:, j] = (r.estimate, getattr(r, p_key), r.p_tost,
                                                                     r.n_informative, r.tied_share)
    paired = np.stack([(~np.isnan(d)).sum(1) if d.shape[1] else np.zeros(s, int) for d in ev.diffs], 1)
    if ev.tested is not None:
        keep = np.broadcast_to(np.asarray(ev.tested, bool), (s, e))
        p = np.where(keep, p, np.nan)
        paired = np.where(keep, paired, 0)
    p_adj, pt_adj = holm(p), holm(pt)
    pe_adj = holm(np.broadcast_to(np.nan if ev.magnitude_p is None else np.asarray(ev.magnitude_p, float), p.shape))
    red = np.broadcast_to(False if ev.redundant is None else np.asarray(ev.redundant, bool), p.shape)
    tested = np.isfinite(p_adj)
    significant = tested & (p_adj <= alpha)
    equivalent = tested & np.isfinite(pt_adj) & (pt_adj <= alpha)
    at_null = np.isfinite(pe_adj) & (pe_adj <= alpha)
    few = tested & cannot_decide(n_inf, 2 * alpha)
    verdict = np.select(
        [~tested, few, significant & (est > 0), significant & (est < 0) & (not th.one_sided_keep),
         equivalent & (at_null | red), equivalent],
        [NOT_TESTED, INSUFFICIENT, KEEP, HARMFUL, DELETE, EQUIVALENT], INCONCLUSIVE)
    if ev.wired is not None and ev.measured is not None:
        verdict = np.where(tested, verdict, design_verdict(ev.wired, ev.measured))
    few = few | (~tested & (paired > 0))  # pairs, every one a tie: too few informative pairs (none)
    verdict = np.where(~tested & few, INSUFFICIENT, verdict)
    return FamilyDecision(verdict, est, p, pt, p_adj, pt_adj, pe_adj, at_null, n_inf, tied, few)


def design_verdict(wired, measured) -> np.ndarray:
    """The verdict of a gem without a wiring test, from how many members were wired and measured:
    both but never differing in the gem alone: confounded; one side only: insufficient data."""
    wired, measured = np.asarray(wired) > 0, np.asarray(measured) > 0
    return np.select([wired & measured, wired, measured], [CONFOUNDED, INSUFFICIENT, INSUFFICIENT], NO_DATA)


def cannot_reach(n_seeds: int, level: float) -> bool:
    """Whether n seeds cannot reach p <= `level` at all (even with every sign equal): no effect
    of any size can be decided with them."""
    return smallest_p(int(n_seeds)) > level


def redundancy_finding(p_adjusted, change, on_tost_p_adjusted, *, alpha: float) -> np.ndarray:
    """Per (gem, feature): `removes` when the feature lowers the gem's excess significantly to its
    null (TOST), `reduces` when not to the null, `does not remove` otherwise."""
    p_adjusted, change = np.asarray(p_adjusted, float), np.asarray(change, float)
    on = np.asarray(on_tost_p_adjusted, float)
    lowers = (p_adjusted <= alpha) & (change < 0)
    at_null = np.isfinite(on) & (on <= alpha)
    return np.select([lowers & at_null, lowers], [REMOVES, REDUCES], DOES_NOT_REMOVE)


def contradicts(effect, low, high) -> np.ndarray:
    """The market-noise interval [low, high] does not confirm a seed verdict with this signed
    effect: it includes 0, or lies on the other side of 0."""
    effect, low, high = (np.asarray(x, float) for x in (effect, low, high))
    return ~(((effect > 0) & (low > 0)) | ((effect < 0) & (high < 0)))


def market_gate(verdict, effect, market_low, market_high, applies) -> np.ndarray:
    """A decisive verdict whose market-noise interval contradicts it becomes `inconclusive` (not
    where a member diverged: divergence is not market noise)."""
    verdict = np.asarray(verdict)
    gated = np.isin(verdict, DECISIVE) & np.asarray(applies, bool) & contradicts(effect, market_low, market_high)
    return np.where(gated, INCONCLUSIVE, verdict)


def combined_bounds(effect, seed_low, seed_high, market_low, market_high) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) with both the seeds' and the history's variance: each side sqrt(seed side^2 +
    market half-width^2)."""
    h_m = (market_high - market_low) / 2
    return effect - np.hypot(effect - seed_low, h_m), effect + np.hypot(seed_high - effect, h_m)


@dataclass(frozen=True)
class OnePeriodDecision:
    """The one-period gate on arrays of verdicts: the words after it, the combined interval, and
    where the gate applied (NaN bounds elsewhere)."""

    verdict: np.ndarray
    low: np.ndarray
    high: np.ndarray
    applied: np.ndarray


def one_period_gate(verdict, effect, seed_low, seed_high, market_low, market_high, *, rope,
                    applies) -> OnePeriodDecision:
    """A decisive verdict whose combined interval includes 0, or an equivalence not inside +-rope on
    it, becomes `inconclusive`."""
    verdict = np.asarray(verdict)
    effect = np.asarray(effect, float)
    on = np.asarray(applies, bool) & np.isfinite(effect)
    with np.errstate(invalid="ignore"):
        lo, hi = combined_bounds(effect, np.asarray(seed_low, float), np.asarray(seed_high, float),
                                 np.asarray(market_low, float), np.asarray(market_high, float))
        excludes_zero = (lo > 0) | (hi < 0)
        inside_rope = (-rope < lo) & (hi < rope)
    gated = on & ((np.isin(verdict, DECISIVE) & ~excludes_zero) | (np.isin(verdict, (EQUIVALENT, DELETE)) & ~inside_rope))
    return OnePeriodDecision(np.where(gated, INCONCLUSIVE, verdict), np.where(on, lo, np.nan), np.where(on, hi, np.nan), on)


@dataclass(frozen=True)
class TestSegment:
    """The held-out test segment's effect per contrast [S, E], its seeds' `var` and `df`;
    `by_history` [S, E, H, n] (None: one history)."""

    effect: np.ndarray
    var: np.ndarray
    df: np.ndarray
    spread_in_seeds: np.ndarray | bool = False
    by_history: np.ndarray | None = None


@dataclass(frozen=True)
class HeldOutDecision:
    """The second stage per contrast: the final `verdict`, its one-sided test and interval, where it
    `applied` and `confirmed`."""

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
    """The confirmation's one-sided level: alpha / m, the family's Bonferroni level."""
    return np.asarray(alpha, float) / np.maximum(np.asarray(m, float), 1.0)


def confirm_on_held_out(verdict, test_effect, test_var, period_var, level, *, test_df=np.inf,
                        period_df=np.inf) -> HeldOutDecision:
    """A discovery keep / harmful stays only where the test effect agrees one-sided at `level`, its
    SE the test seeds' plus `period_var` (NaN: nothing confirmed)."""
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
    """The test segment over H >= 2 histories: the mean of their effects, its variance their spread
    / H plus the seeds' common part."""
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
    """The second stage as `decide` applies it; the period part of its SE: the calendar part over histories that share
    periods, tau^2 floored at `defaults.HELD_OUT_PERIOD_FLOOR` over folds, the market noise at one period."""
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
    """Where `held_out_stage` would confirm each contrast were every one a discovery keep: the
    stage's own false rate under the null, which must stay at most `level`."""
    shape = np.shape(test.effect)
    return held_out_stage(np.full(shape, KEEP, dtype=object), test, level, **stage).confirmed


def final_on_one_history(verdict, low, high, available) -> np.ndarray:
    """A confirmation's final words on one history: keep / harmful need the selection-adjusted
    interval to exclude 0 on their side; else `inconclusive`."""
    verdict = np.asarray(verdict, dtype=object)
    low, high = np.asarray(low, float), np.asarray(high, float)
    available = np.asarray(available, bool)
    with np.errstate(invalid="ignore"):
        holds = np.where(verdict == KEEP, low > 0, np.where(verdict == HARMFUL, high < 0, True))
    decisive = np.isin(verdict, DECISIVE)
    fails = (decisive & ~(available & holds)) | ((verdict == EQUIVALENT) & ~available)
    return np.where(fails, INCONCLUSIVE, verdict)


def selection_adjusted_bounds(effect, seed_low, seed_high, market_low, market_high, market_level, candidates):
    """A K = 1 confirmation's interval on one history: the market-noise half-width read at
    market_level / candidates (normal), combined with the seed interval (`combined_bounds`)."""
    market_level = np.asarray(market_level, float)
    t = np.maximum(np.asarray(candidates, float), 1.0)
    with np.errstate(invalid="ignore"):
        scale = sps.norm.ppf(1 - market_level / (2 * t)) / sps.norm.ppf(1 - market_level / 2)
        h = (np.asarray(market_high, float) - np.asarray(market_low, float)) / 2 * scale
    return combined_bounds(np.asarray(effect, float), np.asarray(seed_low, float), np.asarray(seed_high, float), -h, h)


def pooled_adjusted_bounds(mu, low, high, level, df, candidates):
    """The pooled interval at level / candidates: its SE read off the half-width at `level` with
    `df`, widened as `periods.pooled_bounds` widens it."""
    level = np.asarray(level, float)
    t = np.maximum(np.asarray(candidates, float), 1.0)
    with np.errstate(invalid="ignore"):
        se = (np.asarray(high, float) - np.asarray(low, float)) / (2 * sps.t.ppf(1 - level / 2, df))
    return pooled_bounds(np.asarray(mu, float), se, np.zeros_like(se), df, level / (2 * t))
