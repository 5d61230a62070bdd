"""The nested rule for several price histories: `rules.histories` (each history's seed-level effect,
random effects over the histories, the calendar part they share: `rules.histories`) and its power
statement `power.history_mde`. Its calibration (null worlds with a calendar part, planted effects, a
history that flips) is tests/test_decision_calibration.py."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from tune_gems.analysis.rules.histories import (
    HistoryComponents, calendar_part, decide_histories, history_components, history_data, one_calendar, own_calendars,
    pool_histories,
)
from tune_gems.analysis.rules.decision import Evidence, decide
from tune_gems.analysis.rules.periods import FoldData, Pooling, pool_family, seed_level_effect
from tune_gems.analysis.rules.settings import Thresholds
from tune_gems.analysis.rules.settings import INCONSISTENT, INSUFFICIENT, KEEP, Thresholds
from tune_gems.analysis.calibrate.decision_calibration import t_multiplier
from tune_gems.analysis.rules.power import history_inputs, history_mde, two_stage


def _family(rng, s=1, m=3, h=4, k=4, n=8, effects=None, seed_sd=0.0, history_sd=0.0, calendar_sd=0.0):
    """[s, m, h, k, n] per-seed differences: unit seed noise, a seed part common to everything,
    each history's luck, a calendar part common to every history's fold k, the first contrast's
    effect per history."""
    eff = np.zeros((m, h))
    if effects is not None:
        eff[0] = effects
    return (eff[None, :, :, None, None] + history_sd * rng.standard_normal((s, m, h, 1, 1))
            + calendar_sd * rng.standard_normal((s, m, 1, k, 1))
            + seed_sd * rng.standard_normal((s, m, 1, 1, n)) + rng.standard_normal((s, m, h, k, n)))


def test_stage_one_is_each_historys_seed_level_effect_one_fold_included():
    rng = np.random.default_rng(0)
    for k in (1, 4):
        d = _family(rng, s=5, k=k, n=10)
        hd = history_data(d, own_calendars(4, k))
        for j in range(4):
            ref = seed_level_effect(d[:, :, j].reshape(15, k, 10))
            np.testing.assert_allclose(hd.effect[..., j].ravel(), ref["theta"])
            per_seed = d[:, :, j].mean(2)
            np.testing.assert_allclose(hd.var[..., j], math.pi / 3 * per_seed.var(-1, ddof=1) / 10)
        assert (hd.df == 9).all()
        assert np.isfinite(pool_histories(hd, Pooling(0.1)).pooled["mu"]).all()  # one fold per history is pooled


def test_stage_two_pools_the_histories_with_their_own_spread_and_df():
    rng = np.random.default_rng(1)
    hd = history_data(_family(rng, s=200, history_sd=0.5), own_calendars(4, 4))
    r = pool_histories(hd, Pooling(0.1)).pooled
    shared = r["shared"]
    assert shared.any() and (~shared).any()
    assert (r["df"][~shared] <= 3 + 1e-9).all()  # a contrast on its own: H - 1
    assert (r["df"][shared] > 3).any()  # shared across the family: up to m (H - 1)
    assert np.median(r["tau2"]) > 0.05  # the histories' luck is measured


def test_the_seeds_share_common_to_every_history_is_added_whole():
    """Seed index s starts from the same weights in every history and fold: its common part does
    not average out over histories, so stage 2 adds it whole (as pool_family does for folds)."""
    rng = np.random.default_rng(2)
    hd = history_data(_family(rng, s=300, seed_sd=1.0), own_calendars(4, 4))
    assert np.median(hd.seed_var) == pytest.approx(1.0 / 8, rel=0.35)
    r = pool_histories(hd, Pooling(0.1)).pooled
    assert np.median(r["common"]) == pytest.approx(np.median(hd.seed_var), rel=0.2)
    naive = pool_family(FoldData(r["history_effect"], hd.var))  # without splitting it off: shrunk by H
    assert np.median(r["se"]) > 1.2 * np.median(naive["se"])


def test_the_calendar_part_is_estimated_from_the_cells_and_carried_into_the_variance():
    """History x period, both random: the variance of a part common to every history's fold k is
    estimated by the histories x periods ANOVA, and the pooled mean carries it over K periods; on
    their own calendars nothing is shared, and one shared period cannot separate it."""
    rng = np.random.default_rng(3)
    s, m, h, k = 3000, 1, 8, 6
    cells = rng.standard_normal((s, m, 1, k)) + 0.7 * rng.standard_normal((s, m, h, 1)) + rng.standard_normal((s, m, h, k))
    cal = calendar_part(cells, one_calendar(h, k))
    assert np.mean(cal.var) == pytest.approx(1.0, rel=0.1) and cal.shared.all()
    assert (cal.weight == pytest.approx(1 / k)) and (cal.periods == k).all()
    assert np.median(cal.df) < k  # its degrees of freedom: at most the periods'
    assert np.mean(cal.means_var) == pytest.approx(1.0 + 1.0 / h, rel=0.1)  # never truncated: the test's part
    own = calendar_part(cells, own_calendars(h, k))
    assert not own.shared.any() and (own.mean_var == 0).all() and (own.periods == h * k).all()
    one = calendar_part(cells[..., :1], one_calendar(h, 1))
    assert one.shared.all() and np.isnan(one.var).all() and (one.periods == 1).all()
    # in the pooled variance: a calendar part widens the interval where histories share the calendar
    d = _family(rng, s=400, m=3, h=8, k=6, n=8, calendar_sd=1.0)
    shared = pool_histories(history_data(d, one_calendar(8, 6)), Pooling(0.1))
    apart = pool_histories(history_data(d, own_calendars(8, 6)), Pooling(0.1))
    assert np.median(shared.pooled["se"]) > 1.5 * np.median(apart.pooled["se"])
    np.testing.assert_allclose(shared.pooled["mu"], apart.pooled["mu"])


def test_a_consistent_effect_keeps_and_a_flip_across_histories_does_not():
    rng = np.random.default_rng(4)
    cal = own_calendars(4, 4)
    _, keep = decide_histories(history_data(_family(rng, n=16, effects=np.full(4, 1.5)), cal),
                               Thresholds(alpha=0.05, rope=0.1))
    assert keep.verdict[0, 0] == KEEP
    _, flip = decide_histories(history_data(_family(rng, n=16, effects=np.array([3.0, 3.0, -3.0, -3.0])), cal),
                               Thresholds(alpha=0.05, rope=0.1))
    assert flip.verdict[0, 0] == INCONSISTENT


def test_too_few_histories_or_calendar_periods_is_insufficient_data():
    rng = np.random.default_rng(5)
    hp, rule = decide_histories(history_data(_family(rng, h=2, effects=np.full(2, 3.0)), own_calendars(2, 4)),
                                Thresholds(alpha=0.05, rope=0.1))
    assert (rule.verdict == INSUFFICIENT).all() and hp.too_few_histories.all()
    strong = _family(rng, h=8, k=1, n=16, effects=np.full(8, 3.0))
    _, own = decide_histories(history_data(strong, own_calendars(8, 1)), Thresholds(alpha=0.05, rope=0.1))
    assert own.verdict[0, 0] == KEEP  # one period per history on their own calendars: 8 periods
    hp, one = decide_histories(history_data(strong, one_calendar(8, 1)), Thresholds(alpha=0.05, rope=0.1))
    assert (one.verdict == INSUFFICIENT).all() and hp.too_few_periods.all()  # one shared period: not separable
    four = _family(rng, h=8, k=4, n=16, effects=np.full(8, 3.0))
    hp, _ = decide_histories(history_data(four, one_calendar(8, 4)), Thresholds(alpha=0.05, rope=0.1, min_periods=2))
    assert hp.too_few_periods.all()  # a shared calendar needs MIN_SHARED_PERIODS whatever --min-periods says


def test_min_periods_reaches_the_histories_path():
    """`--min-periods` counts calendar periods over histories too (issue 46: it never reached them)."""
    rng = np.random.default_rng(6)
    d = _family(rng, h=8, k=1, n=16, effects=np.full(8, 3.0))
    ev = Evidence([d[:, g].mean((1, 2)) for g in range(3)], histories=history_data(d, own_calendars(8, 1)))
    assert decide(ev, Thresholds()).verdict[0, 0] == KEEP
    assert decide(ev, Thresholds(min_periods=10)).verdict[0, 0] == INSUFFICIENT


def test_the_history_mde_carries_the_calendar_and_the_two_stage_mde_the_test():
    c = HistoryComponents(history=0.02, period=0.01, within=0.3, seed=0.03, calendar=0.004, shared=True)
    h, k, n = 6, 4, 8
    se = math.sqrt(0.02 / h + (0.01 + 0.27 / n) / (k * h) + 0.004 / k + 0.03 / n)  # the pooled mean's
    # the rule estimates its parts and its df (the closed form took them as known): its MDE is above
    # the closed form's on the shared scale's 3 (H - 1) df, and moves with the calendar part
    mde = history_mde(c, h, k, n, contrasts=3, level=0.05 / 3, power=0.8)
    assert t_multiplier(3 * (h - 1), 0.05 / 3, 0.8) * se < mde < 2 * t_multiplier(3 * (h - 1), 0.05 / 3, 0.8) * se
    assert history_mde(replace(c, calendar=0.04), h, k, n, contrasts=3, level=0.05 / 3, power=0.8) > mde
    both = two_stage(history_inputs(n, h, k, c, 3), 0.05 / 3, 0.8, test_level=0.05 / 3)
    assert both > mde
    assert np.isnan(history_mde(c, 1, k, n, level=0.05, power=0.8))


def test_the_components_come_from_both_stages_and_the_calendar():
    rng = np.random.default_rng(7)
    hd = history_data(_family(rng, s=50, k=6, history_sd=0.5, calendar_sd=0.5), one_calendar(4, 6))
    hp = pool_histories(hd, Pooling(0.1))
    comp = history_components(hd, hp)
    np.testing.assert_array_equal(comp.calendar, hp.calendar.var)
    assert comp.shared.all() and (comp.history <= hp.pooled["tau2"] + 1e-12).all()
    np.testing.assert_allclose(comp.seed, hd.seed_share * comp.within)
