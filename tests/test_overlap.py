"""The overlap of folds that share training rows, in the pooled variance (issue 37, item 2):
Nadeau-Bengio's factor from a layout's row counts (`rules.periods`) and where `pool_family` puts
it. The calibration of the corrected rule is tests/test_decision_calibration.py."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from tune_gems.analysis.rules.periods import (
    FoldData, PooledComponents, Pooling, correlation_of, fold_overlap, hksj, loading_matrix, nb_factor, overlap_factor,
    parse_runs, pool_family, shared_rows,
)
from tune_gems.contracts.errors import DataError
from tune_gems.data.segments import TrainingReach, fold_bounds, fold_table

PRICES = pd.Series(np.arange(6000, dtype=float))
REACH = TrainingReach(window=32, n_step=3, episode_length=256)


def _table(scheme: str, k: int, layout: str = "expanding", embargo: int = 0) -> pd.DataFrame:
    spec = SimpleNamespace(scheme=scheme, k=k, embargo=embargo, val_length=None, gap=0, layout=layout, train_length=None)
    return fold_table(PRICES.index, fold_bounds(PRICES, [0.7, 0.15, 0.15], spec, 64, REACH), layout)


def test_equal_folds_that_all_share_rows_get_nadeau_bengios_factor():
    assert nb_factor(1 / 8, 8) == pytest.approx(1 + 8 * (1 / 7))
    assert nb_factor(0.25, 4) == pytest.approx(1 + 4 / 3)
    assert nb_factor(0.0, 6) == 1.0


@pytest.mark.parametrize("k,factor", [(8, 2.14), (6, 2.20)])
def test_the_purged_layouts_give_the_factors_the_issue_measured(k, factor):
    """1 + K n2 / n1 of the real layouts: 2.14 at 8 groups, 2.20 at 6 (docs said 2.0)."""
    t = _table("purged", k, embargo=5)
    ov = fold_overlap(t)
    assert ov.folds == tuple(range(k))
    assert round(ov.factor, 2) == factor
    assert ov.factor == pytest.approx(1 + k * (t["group_rows"] / t["train_rows"]).mean(), rel=1e-4)
    assert (ov.corr > 0).all()  # every purged fold trains on every other's groups


def test_rolling_windows_that_share_no_row_give_no_correction():
    t = pd.DataFrame(dict(fold=[0, 1, 2], train_runs=["0:100", "200:300", "400:500"], train_rows=[100] * 3,
                          group_rows=[100] * 3))
    ov = fold_overlap(t)
    assert ov.factor == 1.0 and (ov.corr == 0).all()


def test_partly_overlapping_windows_correlate_only_the_pairs_that_share_rows():
    t = _table("walk_forward", 4, layout="rolling")
    ov = fold_overlap(t)
    shares = np.array([[shared_rows(parse_runs(a), parse_runs(b)) > 0 for b in t["train_runs"]] for a in t["train_runs"]])
    assert shares[0, 1] and not shares[0, 2]
    off = ~np.eye(4, dtype=bool)
    assert ((ov.corr[off] > 0) == shares[off]).all()
    assert 1.0 < ov.factor < nb_factor(ov.corr[0, 0], 4)  # fewer shared pairs than a full overlap


def test_expanding_windows_weigh_each_fold_by_its_own_rows():
    t = _table("walk_forward", 4)
    ov = fold_overlap(t)
    lam = (t["group_rows"] / t["train_rows"]).to_numpy()
    np.testing.assert_allclose(np.diag(ov.corr), lam / (1 + lam))
    np.testing.assert_allclose(ov.corr[0, 3], correlation_of(np.sqrt(lam[0] * lam[3])))
    assert ov.factor == pytest.approx(1 + np.sqrt(lam).sum() ** 2 / 4)


def test_a_fold_table_without_the_columns_or_with_several_histories_is_one_line():
    t = _table("purged", 6, embargo=5)
    with pytest.raises(DataError, match="missing column 'train_runs'"):
        fold_overlap(t.drop(columns="train_runs"))
    two = pd.concat([t.assign(history="spx"), t.assign(history="wti")])
    with pytest.raises(DataError, match="several histories"):
        fold_overlap(two)
    with pytest.raises(DataError, match="no folds of history 'ndx'"):
        fold_overlap(two, history="ndx")
    assert fold_overlap(two, history="wti").factor == fold_overlap(t).factor
    with pytest.raises(DataError, match="train_runs"):
        fold_overlap(t.assign(train_runs="0-10"))


def test_the_factor_of_unequal_weights_is_the_variance_of_the_weighted_mean():
    """F = 1 + (sqrt w)' Lambda (sqrt w) / sum w is the variance of the weighted mean of fold
    effects with own variances 1 / w and common covariance sqrt(lambda_k lambda_l) / sqrt(w_k
    w_l), over its variance without the common part."""
    rng = np.random.default_rng(1)
    w = np.array([1.0, 2.0, 4.0, 0.5])
    lam = np.array([0.1, 0.2, 0.15, 0.3])
    shares = np.ones((4, 4), bool)
    big = loading_matrix(1 / lam, np.ones(4), shares)
    s = 1 / np.sqrt(w)
    cov = np.diag(s**2) + np.outer(s, s) * big
    a = w / w.sum()
    assert overlap_factor(w, correlation_of(big)) == pytest.approx(a @ cov @ a / (a**2 @ s**2))
    draws = rng.multivariate_normal(np.zeros(4), cov, 200_000) @ a
    assert draws.var() == pytest.approx(a @ cov @ a, rel=0.02)


def test_pool_family_without_an_overlap_is_the_rule_before_to_the_bit():
    rng = np.random.default_rng(2)
    theta = rng.normal(0.1, 0.3, (50, 3, 6))
    var = rng.uniform(0.01, 0.05, theta.shape)
    share = rng.uniform(0, 0.3, (50, 3))
    a = pool_family(FoldData(theta, var, seed_share=share))
    b = pool_family(FoldData(theta, var, seed_share=share), fold_corr=0.0)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
    assert (a["overlap"] == 1.0).all()


def test_pool_family_multiplies_the_fold_level_variance_not_the_seeds_common_share():
    rng = np.random.default_rng(3)
    theta = rng.normal(0.1, 0.3, (40, 3, 8))
    var = np.full(theta.shape, 0.02)
    share = np.full((40, 3), 0.25)
    plain = pool_family(FoldData(theta, var, seed_share=share), Pooling(share=False))
    nb = pool_family(FoldData(theta, var, seed_share=share), Pooling(share=False), fold_corr=1 / 8)
    f = nb_factor(1 / 8, 8)  # equal variances, every contrast with its own (equal) weights
    np.testing.assert_allclose(nb["overlap"], f)
    np.testing.assert_allclose(nb["common"], plain["common"])
    np.testing.assert_allclose(nb["se"] ** 2 - nb["common"], f * (plain["se"] ** 2 - plain["common"]))
    np.testing.assert_allclose(nb["se_fixed"] ** 2 - nb["common"], f * (plain["se_fixed"] ** 2 - plain["common"]))
    np.testing.assert_array_equal(nb["mu"], plain["mu"])
    assert (nb["p_two_sided"] >= plain["p_two_sided"]).all()
    full = pool_family(FoldData(theta, var, seed_share=share), Pooling(share=False),
                       fold_corr=np.full((8, 8), 1 / 8))
    np.testing.assert_allclose(full["se"], nb["se"])


def test_hksj_with_equal_variances_and_the_nb_factor_is_nadeau_bengios_corrected_t_test():
    """Equal fold variances, one contrast: the corrected resampled t of Nadeau & Bengio,
    mean / sqrt((1/K + n2/n1) s^2) on K - 1 df."""
    from scipy import stats as sps

    rng = np.random.default_rng(4)
    k, rho = 6, 1 / 6
    theta = rng.normal(0.2, 1.0, (100, k))
    r = pool_family(FoldData(theta[:, None], np.full((100, 1, k), 1e-9)), Pooling(share=False), fold_corr=rho)
    t = theta.mean(1) / np.sqrt((1 / k + rho / (1 - rho)) * theta.var(1, ddof=1))
    np.testing.assert_allclose(r["p_two_sided"][:, 0], 2 * sps.t.sf(np.abs(t), k - 1), rtol=1e-6)
    assert hksj(theta, np.full_like(theta, 1e-9))["p"].mean() < r["p_two_sided"].mean()


def test_the_power_statement_carries_the_overlap_and_is_unchanged_without_it():
    from tune_gems.analysis.rules.power import pooled_mde

    kw = dict(level=0.05, power=0.8)
    c = PooledComponents(period=0.01, within=0.2, seed=0.02)
    assert pooled_mde(c, 8, 12, **kw) == pooled_mde(PooledComponents(0.01, 0.2, 0.02, 0.0), 8, 12, **kw)
    assert pooled_mde(PooledComponents(0.01, 0.2, 0.02, 1 / 7), 8, 12, **kw) > 1.2 * pooled_mde(c, 8, 12, **kw)
    assert np.isnan(pooled_mde(PooledComponents(np.inf, 0.2), 4, 8, **kw))


# -- wired: the experiment's own fold table in the verdicts and the factor table (issue 37 item 2) --


def _with_layout(folder, table: pd.DataFrame, trials=("t0",)):
    """The folds.parquet a sweep writes (a row per trial and fold) with the layout of `table`."""
    pd.concat([table.assign(experiment=folder.name, trial_id=t) for t in trials]).to_parquet(
        folder / "folds.parquet", index=False)
    return folder


@pytest.mark.parametrize("scheme,layout", [("purged", "expanding"), ("walk_forward", "expanding")])
def test_folds_that_share_training_rows_widen_the_pooled_interval_by_their_overlap(tmp_path, scheme, layout):
    """The pooled variance carries the overlap read off the experiment's own fold table
    (`walk_forward.experiment_overlap` -> `rules.periods.fold_overlap` -> `decide`'s fold_corr):
    verdicts.csv and factors.csv state the factor, the reason line says it, the interval widens
    by it and the MDE grows; without a layout in the table nothing changes."""
    import fake_results as fr
    from tune_gems.analysis.analyze import analyze
    from tune_gems.analysis.verdicts.factors import GEM

    effects = [0.5, 0.1, 0.7, 0.3]
    bare = fr.fold_scenario(tmp_path / "bare", effects, n=12)
    laid = _with_layout(fr.fold_scenario(tmp_path / "laid", effects, n=12), _table(scheme, 4, layout),
                        trials=("t0", "t1"))
    before, after = analyze(bare, n_boot=50), analyze(laid, n_boot=50)
    expected = fold_overlap(_table(scheme, 4, layout)).factor
    v0, v1 = before.verdicts.set_index("gem").loc["g12"], after.verdicts.set_index("gem").loc["g12"]
    assert np.isnan(v0["fold_overlap"]) and v1["fold_overlap"] > 1.0  # no fold table: not corrected, and said
    assert "fold overlap not corrected (" in v0["reason"] and "has no fold table" in v0["reason"]
    assert v1["fold_overlap"] == pytest.approx(expected, rel=0.2)  # NB's factor at the rule's own weights
    assert "for folds that share training rows" in v1["reason"] and "share training rows" not in v0["reason"]
    assert v1["pooled_effect"] == pytest.approx(v0["pooled_effect"])
    w0, w1 = v0["pooled_ci_high"] - v0["pooled_ci_low"], v1["pooled_ci_high"] - v1["pooled_ci_low"]
    # the fold-level part grows by the factor, the seeds' common share does not: at most sqrt(F) wider
    assert w0 * 1.05 < w1 <= w0 * np.sqrt(v1["fold_overlap"]) * (1 + 1e-9)
    assert v1["mde"] > v0["mde"]
    f = after.factors[after.factors["kind"] == GEM].set_index("factor").loc["gems.g12.mode"]
    assert f["fold_overlap"] == pytest.approx(v1["fold_overlap"]) and f["mde"] == pytest.approx(v1["mde"])


def test_folds_that_share_no_training_row_change_nothing(tmp_path):
    import fake_results as fr
    from tune_gems.analysis.analyze import analyze

    effects = [0.5, 0.1, 0.7, 0.3]
    bare = analyze(fr.fold_scenario(tmp_path / "bare", effects, n=12), n_boot=50).verdicts.set_index("gem").loc["g12"]
    apart = pd.DataFrame(dict(fold=range(4), train_runs=["0:100", "200:300", "400:500", "600:700"],
                              train_rows=[100] * 4, group_rows=[100] * 4))  # rolling windows that share no row
    laid = analyze(_with_layout(fr.fold_scenario(tmp_path / "laid", effects, n=12), apart),
                   n_boot=50).verdicts.set_index("gem").loc["g12"]
    assert laid["fold_overlap"] == 1.0
    for col in ("pooled_ci_low", "pooled_ci_high", "mde", "verdict"):
        assert laid[col] == bare[col], col
