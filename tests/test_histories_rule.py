"""The nested rule for several price histories (issue 37, item 3): `rules.histories` and its power
statement `power.history_mde`. Its calibration (null, planted effect, a history that flips) is
tests/test_decision_calibration.py."""

from __future__ import annotations

import numpy as np
import pytest

from tune_gems.analysis.rules.histories import decide_histories, history_components, history_data, pool_histories
from tune_gems.analysis.rules.period_family import fold_components, fold_data, pool_fold_data
from tune_gems.analysis.rules.pooling import pool_family
from tune_gems.analysis.rules.power import HistoryComponents, PooledComponents, history_mde, pooled_mde, t_multiplier
from tune_gems.analysis.rules.words import INCONSISTENT, INSUFFICIENT, KEEP


def _family(rng, s=1, m=3, h=4, k=4, n=8, effects=None, seed_sd=0.0, history_sd=0.0):
    """[s, m, h, k, n] per-seed differences: unit seed noise, a seed part common to everything,
    each history's luck, the first contrast's effect per history."""
    eff = np.zeros((m, h))
    if effects is not None:
        eff[0] = effects
    d = (eff[None, :, :, None, None] + history_sd * rng.standard_normal((s, m, h, 1, 1))
         + seed_sd * rng.standard_normal((s, m, 1, 1, n)) + rng.standard_normal((s, m, h, k, n)))
    return d


def test_stage_one_is_the_one_history_rule_on_each_history():
    rng = np.random.default_rng(0)
    d = _family(rng, s=5)
    hd = history_data(d)
    hp = pool_histories(hd, rope=0.1, fold_corr=0.2)
    for j in range(4):
        ref = pool_fold_data(fold_data(d[:, :, j]), rope=0.1, fold_corr=0.2)
        np.testing.assert_array_equal(hp.by_history[j]["mu"], ref["mu"])
        np.testing.assert_array_equal(hp.pooled["history_effect"][..., j], ref["mu"])
    assert (hp.pooled["periods"] == 4).all()


def test_stage_two_pools_the_histories_with_their_own_spread_and_df():
    rng = np.random.default_rng(1)
    hd = history_data(_family(rng, s=200, history_sd=0.5))
    hp = pool_histories(hd, rope=0.1)
    r = hp.pooled
    shared = r["shared"]
    assert shared.any() and (~shared).any()
    assert (r["df"][~shared] <= 3 + 1e-9).all()  # a contrast on its own: H - 1
    assert (r["df"][shared] > 3).any()  # shared across the family: up to m (H - 1)
    assert np.median(r["tau2"]) > 0.1  # the histories' luck is measured


def test_the_seeds_share_common_to_every_history_is_added_whole():
    """Seed index s starts from the same weights in every history and fold: its common part does
    not average out over histories, so stage 2 adds it whole (as pool_family does for folds)."""
    rng = np.random.default_rng(2)
    d = _family(rng, s=300, seed_sd=1.0)
    hd = history_data(d)
    assert np.median(hd.seed_var) == pytest.approx(1.0 / 8, rel=0.35)
    hp = pool_histories(hd, rope=0.1)
    assert np.median(hp.pooled["common"]) == pytest.approx(np.median(hd.seed_var), rel=0.2)
    # without splitting it off, the histories' pooled variance would shrink it by H
    naive = pool_family(hp.pooled["history_effect"], np.stack([r["se"] ** 2 for r in hp.by_history], -1))
    assert np.median(hp.pooled["se"]) > 1.2 * np.median(naive["se"])


def test_a_consistent_effect_keeps_and_a_flip_across_histories_does_not():
    rng = np.random.default_rng(3)
    _, keep = decide_histories(history_data(_family(rng, n=16, effects=np.full(4, 1.5))), alpha=0.05, rope=0.1)
    assert keep.verdict[0, 0] == KEEP
    _, flip = decide_histories(history_data(_family(rng, n=16, effects=np.array([3.0, 3.0, -3.0, -3.0]))),
                               alpha=0.05, rope=0.1)
    assert flip.verdict[0, 0] == INCONSISTENT


def test_too_few_histories_is_insufficient_data():
    rng = np.random.default_rng(4)
    _, rule = decide_histories(history_data(_family(rng, h=2, effects=np.full(2, 3.0))), alpha=0.05, rope=0.1)
    assert (rule.verdict == INSUFFICIENT).all()


def test_the_history_mde_is_the_one_history_mde_nested():
    c = HistoryComponents(history=0.02, period=0.01, within=0.3, seed=0.03, overlap=1 / 3)
    h, k, n = 4, 4, 6
    per_history = PooledComponents(0.01, 0.3, 0.03, 1 / 3).se(k, n) ** 2 - 0.03 / n
    se = np.sqrt((0.02 + per_history) / h + 0.03 / n)
    assert c.se(h, k, n) == pytest.approx(se)
    assert history_mde(c, h, k, n, df=9, level=0.05 / 3, power=0.8) == pytest.approx(
        t_multiplier(9, 0.05 / 3, 0.8) * se)
    # one history of K folds without the histories' spread is the one-history statement
    one = HistoryComponents(0.0, 0.01, 0.3, 0.03, 0.0)
    assert one.se(1, k, n) == pytest.approx(PooledComponents(0.01, 0.3, 0.03).se(k, n))
    assert np.isnan(history_mde(c, 1, k, n, df=2, level=0.05, power=0.8))
    assert pooled_mde(PooledComponents(0.01, 0.3, 0.03), k, n, df=3, level=0.05, power=0.8) > 0


def test_the_components_come_from_both_stages():
    rng = np.random.default_rng(5)
    hd = history_data(_family(rng, s=50, history_sd=0.5))
    hp = pool_histories(hd, rope=0.1, fold_corr=0.25)
    comp = history_components(hd, hp, 0.25)
    assert comp.overlap == pytest.approx(1 / 3)
    np.testing.assert_array_equal(comp.history, hp.pooled["tau2"])
    per = [fold_components(fd, r["tau2"]) for fd, r in zip(hd.folds, hp.by_history)]
    np.testing.assert_allclose(comp.within, np.mean([c.within for c in per], 0))
    np.testing.assert_allclose(comp.period, np.mean([c.period for c in per], 0))
    np.testing.assert_allclose(comp.seed, hd.seed_share * comp.within)
