"""The test segment as a pre-registered second stage (issue 37, item 4): `rules.decision`.
Its two-stage calibration is tests/test_decision_calibration.py."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from tune_gems.analysis.rules.decision import confirm_on_held_out, confirmation_level
from tune_gems.analysis.rules.periods import fold_estimates, seed_level_effect
from tune_gems.analysis.rules.settings import (
    EQUIVALENT, HARMFUL, HETEROGENEOUS, INCONCLUSIVE, KEEP, NOT_CONFIRMED, VERDICTS, verdict_codes,
)


def test_the_new_word_is_a_verdict_with_its_code():
    assert NOT_CONFIRMED in VERDICTS
    assert verdict_codes([NOT_CONFIRMED, KEEP]).tolist() == [6, 1]


def test_the_level_is_the_familys_bonferroni_level():
    assert confirmation_level(0.05, 3) == pytest.approx(0.05 / 3)
    np.testing.assert_allclose(confirmation_level(0.05, np.array([1, 2, 0])), [0.05, 0.025, 0.05])


def test_a_discovery_stands_only_where_the_test_segment_agrees_on_its_side():
    verdict = np.array([KEEP, KEEP, KEEP, HARMFUL, HARMFUL])
    effect = np.array([0.5, 0.05, -0.5, -0.5, 0.5])
    r = confirm_on_held_out(verdict, effect, np.full(5, 0.01), np.zeros(5), 0.05 / 3)
    assert r.verdict.tolist() == [KEEP, NOT_CONFIRMED, NOT_CONFIRMED, HARMFUL, NOT_CONFIRMED]
    assert r.confirmed.tolist() == [True, False, False, True, False]
    # both ends kept for the reason line; the bound on the discovery's side is the one-sided test's
    z = sps.norm.ppf(1 - 0.05 / 3)
    np.testing.assert_allclose(r.low, effect - z * 0.1)
    np.testing.assert_allclose(r.high, effect + z * 0.1)
    assert ((r.low > 0) == r.confirmed)[:3].all() and ((r.high < 0) == r.confirmed)[3:].all()


def test_the_test_periods_spread_is_in_the_standard_error():
    """A test effect of 3 seed SE confirms on the seeds alone; the periods' spread (tau = 2 seed
    SE) makes it 3 / sqrt(5) = 1.34 SE, which does not reach alpha / 3."""
    seeds_only = confirm_on_held_out([KEEP], [0.3], [0.01], [0.0], 0.05 / 3)
    with_tau = confirm_on_held_out([KEEP], [0.3], [0.01], [0.04], 0.05 / 3)
    assert seeds_only.verdict[0] == KEEP and with_tau.verdict[0] == NOT_CONFIRMED
    assert with_tau.se[0] == pytest.approx(np.sqrt(0.05))


def test_no_test_pairs_or_no_spread_to_judge_by_is_not_a_confirmation():
    r = confirm_on_held_out([KEEP, KEEP, KEEP], [np.nan, 0.5, 0.5], [0.01, 0.01, np.inf], [0.0, np.nan, 0.0], 0.05)
    assert r.verdict.tolist() == [NOT_CONFIRMED] * 3


def test_the_test_segment_changes_no_other_word():
    words = np.array([EQUIVALENT, INCONCLUSIVE, HETEROGENEOUS, ""], dtype=object)
    r = confirm_on_held_out(words, np.full(4, 5.0), np.full(4, 0.01), np.zeros(4), 0.05)
    assert r.verdict.tolist() == words.tolist() and not r.applied.any() and np.isnan(r.p).all()


def test_the_degrees_of_freedom_combine_the_two_parts():
    r = confirm_on_held_out([KEEP], [0.3], [0.01], [0.01], 0.05, test_df=10.0, period_df=5.0)
    assert r.df[0] == pytest.approx(0.02**2 / (0.01**2 / 10 + 0.01**2 / 5))
    assert r.p[0] == pytest.approx(sps.t.sf(0.3 / np.sqrt(0.02), r.df[0]))


def test_under_the_null_a_confirmation_is_false_at_its_level():
    """A test effect of no true effect, its seed variance and the period's spread as the rule is
    told them: a keep is confirmed in `level` of the draws (the statistic is exact)."""
    rng = np.random.default_rng(0)
    n = 200_000
    effect = rng.normal(0.0, np.sqrt(0.01 + 0.03), n)
    r = confirm_on_held_out(np.full(n, KEEP, dtype=object), effect, np.full(n, 0.01), np.full(n, 0.03), 0.05)
    assert r.confirmed.mean() == pytest.approx(0.05, abs=0.003)


def test_the_test_effect_is_the_seeds_fold_averaged_differences():
    rng = np.random.default_rng(1)
    d = rng.normal(0.2, 1.0, (30, 4, 12))
    d[:, 1, 3] = np.nan  # seed 3 has no pair in fold 1: averaged over its other folds
    got = seed_level_effect(d)
    per_seed = np.nanmean(d, 1)
    ref = fold_estimates(per_seed)
    np.testing.assert_allclose(got["theta"], ref["theta"])
    np.testing.assert_allclose(got["var"], ref["var"])
    assert (got["n"] == 12).all() and got["df"][0] == pytest.approx(0.8 * 11)


def test_over_histories_the_test_reads_their_spread_on_the_test_itself():
    """Several histories: the mean of the histories' test effects, se^2 their sample variance / H plus
    the seeds' part common to every history, H - 1 df from the spread (never a DerSimonian-Laird 0)."""
    from tune_gems.analysis.rules.decision import history_test

    rng = np.random.default_rng(2)
    d = rng.normal(0.0, 1.0, (2000, 2, 6, 12)) + rng.normal(0.0, 0.5, (2000, 2, 6, 1))
    r = history_test(d)
    th = fold_estimates(d.reshape(-1, 12))["theta"].reshape(2000, 2, 6)
    np.testing.assert_allclose(r["theta"], th.mean(-1))
    assert (r["var"] >= th.var(-1, ddof=1) / 6 - 1e-12).all()
    assert np.mean(r["var"]) == pytest.approx(np.var(r["theta"]), rel=0.1)
    assert np.isnan(history_test(d[:, :, :1])["var"]).all()  # one history: no spread to read


def test_on_one_history_the_period_spread_has_a_floor_where_dl_reads_zero():
    from tune_gems.analysis import defaults
    from tune_gems.analysis.rules.decision import TestSegment, held_out_stage

    test = TestSegment(np.array([[0.5]]), np.array([[0.01]]), np.array([[20.0]]))
    pooled = {"tau2": np.array([[0.0]]), "df": np.array([[9.0]])}
    fold_var = np.full((1, 1, 4), 0.08)
    r = held_out_stage(np.array([[KEEP]], dtype=object), test, 0.05 / 3, pooled=pooled, fold_var=fold_var)
    assert r.se[0, 0] == pytest.approx(np.sqrt(0.01 + defaults.HELD_OUT_PERIOD_FLOOR * 0.08))
    pooled["tau2"] = np.array([[0.2]])  # a spread above the floor is carried as it is
    assert held_out_stage(np.array([[KEEP]], dtype=object), test, 0.05 / 3, pooled=pooled,
                          fold_var=fold_var).se[0, 0] == pytest.approx(np.sqrt(0.21))


def test_on_one_calendar_the_test_carries_the_calendar_part_and_needs_enough_shared_periods():
    from tune_gems.analysis.rules.histories import calendar_part, one_calendar, own_calendars
    from tune_gems.analysis.rules.decision import TestSegment, held_out_stage

    rng = np.random.default_rng(3)
    by_history = rng.normal(0.3, 1.0, (1, 1, 8, 12))
    test = TestSegment(np.array([[0.3]]), np.array([[0.01]]), np.array([[9.0]]), by_history=by_history)
    keep = np.array([[KEEP]], dtype=object)
    cells = rng.normal(0.0, 1.0, (1, 1, 8, 6))
    shared, apart = calendar_part(cells, one_calendar(8, 6)), calendar_part(cells, own_calendars(8, 6))
    on_one = held_out_stage(keep, test, 0.05 / 3, calendar=shared)
    on_own = held_out_stage(keep, test, 0.05 / 3, calendar=apart)
    assert on_one.se[0, 0] ** 2 == pytest.approx(on_own.se[0, 0] ** 2 + shared.means_var[0, 0])
    few = calendar_part(cells[..., :4], one_calendar(8, 4))
    assert held_out_stage(keep, test, 0.05 / 3, calendar=few).verdict[0, 0] == NOT_CONFIRMED
