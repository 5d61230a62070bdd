"""Walk-forward folds (issue 20), the data and environment side: the fold layout and its
one-line errors, regimes in time on synthetic paths, and per fold: features normalised on the
fold's own training window, no look-ahead, episode starts inside that window and evaluation on
the fold's own validation window."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from env_fixtures import evaluate_segment, walk_episodes
from tune_gems.config.schema import DataConfig, EnvConfig, FoldsConfig
from tune_gems.config.load import load_config
from tune_gems.data.segments import fold_bounds, fold_table, split_bounds
from tune_gems.data.series import synthetic_prices
from tune_gems.market.actions import ActionMap
from tune_gems.market.env import VecTradingEnv
from tune_gems.market.features import Market
from tune_gems.contracts.errors import ConfigError, DataError
from tune_gems.market.evaluation import segment_asset_returns

W = 6
MIN_LEN = W + 2
SPLITS = [0.6, 0.2, 0.2]


def _folds(**kw) -> FoldsConfig:
    return FoldsConfig(**kw)


@pytest.fixture(scope="module")
def prices() -> pd.Series:
    return synthetic_prices(1000, seed=3)


# -- the layout ---------------------------------------------------------------------------------


def test_one_fold_is_the_plain_split(prices):
    assert fold_bounds(prices, SPLITS, _folds(), MIN_LEN) == [split_bounds(prices, SPLITS, MIN_LEN)]
    assert fold_bounds(prices, SPLITS, _folds(layout="rolling"), MIN_LEN) == [split_bounds(prices, SPLITS, MIN_LEN)]


def test_expanding_folds_end_at_the_test_segment_with_equal_validation_windows(prices):
    b = fold_bounds(prices, SPLITS, _folds(k=3, val_length=100, gap=5), MIN_LEN)
    test = split_bounds(prices, SPLITS, MIN_LEN).test
    assert [f.val for f in b] == [(500, 600), (600, 700), (700, 800)] and test == (800, 1000)
    assert [f.train for f in b] == [(0, 495), (0, 595), (0, 695)]  # the gap: 5 rows left out
    assert all(f.test == test for f in b)


def test_rolling_folds_train_on_windows_of_one_length(prices):
    b = fold_bounds(prices, SPLITS, _folds(k=3, layout="rolling", val_length=100), MIN_LEN)
    assert [f.train for f in b] == [(0, 500), (100, 600), (200, 700)]
    b = fold_bounds(prices, SPLITS, _folds(k=2, layout="rolling", train_length=300, gap=2), MIN_LEN)
    assert [f.val for f in b] == [(400, 600), (600, 800)]  # default val_length: the split's 200
    assert [f.train for f in b] == [(98, 398), (298, 598)]


@pytest.mark.parametrize(
    "folds, message",
    [
        (dict(k=4), r"^data\.folds: 4 validation window\(s\) of 200 rows and a gap of 0 before the test segment \(which starts at row 800\) leave fold 0 0 training rows; need at least min_len=8$"),
        (dict(k=3, val_length=200, gap=195), r"^data\.folds: 3 .* leave fold 0 5 training rows; need at least min_len=8$"),
        (dict(val_length=5), r"^data\.folds\.val_length: 5 rows per validation window, need at least min_len=8$"),
        (dict(k=2, layout="rolling", train_length=500), r"^data\.folds\.train_length: 500 rows do not fit before fold 0's validation window \(row 400, gap 0\): at most 400$"),
        (dict(k=2, layout="rolling", train_length=4), r"^data\.folds\.train_length: 4 rows, need at least min_len=8$"),
    ],
)
def test_folds_that_do_not_fit_are_one_line_errors(prices, folds, message):
    with pytest.raises(ConfigError, match=message):
        fold_bounds(prices, SPLITS, _folds(**folds), MIN_LEN)


@pytest.mark.parametrize(
    "override, message",
    [
        ("data.folds.k=0", r"data\.folds\.k: Input should be greater than or equal to 1"),
        ("data.folds.k=65", r"data\.folds\.k: Input should be less than or equal to 64"),
        ("data.folds.layout=sliding", r"data\.folds\.layout: Input should be 'expanding' or 'rolling'"),
        ("data.folds.train_length=100", r"data\.folds: data\.folds\.train_length is for layout rolling only"),
        ("data.folds.gap=-1", r"data\.folds\.gap: Input should be greater than or equal to 0"),
        ("data.folds.val=3", r"data\.folds\.val: unknown key"),
        ("data.synthetic.edge_periods=[[0.1,0.8]]", r"data\.synthetic\.edge_periods: period starts must begin at 0"),
        ("data.synthetic.edge_periods=[[0,0.8],[0.5,2]]", r"data\.synthetic: data\.synthetic\.edge_periods: every edge must lie in \[0, 1\]"),
        ("data.synthetic.edge_periods=[0.5]", r"data\.synthetic\.edge_periods: give a list of \[start_fraction, edge\] pairs"),
    ],
)
def test_bad_fold_and_regime_keys_are_one_line_config_errors(override, message):
    with pytest.raises(ConfigError, match=message) as err:
        load_config(None, [override])
    assert "\n" not in str(err.value)


def test_the_fold_table_names_each_window_by_rows_and_dates(prices):
    b = fold_bounds(prices, SPLITS, _folds(k=2, val_length=100), MIN_LEN)
    t = fold_table(prices.index, b, "expanding")
    assert t["fold"].tolist() == [0, 1] and t["val_start"].tolist() == [600, 700] and t["val_end"].tolist() == [700, 800]
    assert t.loc[1, "val_first"] == str(prices.index[700].date()) and t.loc[1, "val_last"] == str(prices.index[799].date())
    bare = fold_table(pd.RangeIndex(1000), b, "expanding", fold_ids=[3, 4])
    assert bare["fold"].tolist() == [3, 4] and bare["val_first"].isna().all()


# -- regimes in time on synthetic paths -----------------------------------------------------------


def test_constant_regimes_in_time_are_the_plain_series_bit_for_bit():
    plain = synthetic_prices(3000, seed=11, edge=0.35)
    same = synthetic_prices(3000, seed=11, edge=0.1, edge_periods=[[0, 0.35]])
    assert np.array_equal(plain.to_numpy(), same.to_numpy())


def _lag1(p: np.ndarray) -> float:
    r = p[1:] / p[:-1] - 1.0
    return float(np.corrcoef(r[:-1], r[1:])[0, 1])


def test_a_planted_edge_that_vanishes_half_way_shows_in_the_two_halves():
    n = 40_000
    plain = synthetic_prices(n, seed=5, edge=0.8).to_numpy()
    flip = synthetic_prices(n, seed=5, edge_periods=[[0, 0.8], [0.5, 0.0]]).to_numpy()
    half = n // 2
    assert np.array_equal(plain[:half], flip[:half])  # the same draws before the change
    assert _lag1(flip[:half]) > 0.12 and abs(_lag1(flip[half:])) < 0.03


def test_synthetic_config_paths_carry_the_regimes():
    from tune_gems.data.series import load_paths

    cfg = DataConfig(synthetic={"n": 600, "seed": 2, "edge_periods": [[0, 0.8], [0.5, 0.0]]})
    paths = load_paths(cfg, 2)
    for s, path in enumerate(paths):
        expect = synthetic_prices(600, 2 + s, edge_periods=[[0, 0.8], [0.5, 0.0]])
        assert np.array_equal(path.to_numpy(), expect.to_numpy())


# -- the market per fold ----------------------------------------------------------------------------


FOLDS = _folds(k=3, val_length=100, gap=3)


def _fold_market(prices: pd.Series | list[pd.Series], folds: FoldsConfig = FOLDS) -> Market:
    first = prices if isinstance(prices, pd.Series) else prices[0]
    return Market(prices, fold_bounds(first, SPLITS, folds, MIN_LEN), W)


def test_each_fold_row_is_a_one_split_market_of_that_fold(prices):
    paths = [prices, synthetic_prices(1000, seed=4)]
    m = _fold_market(paths)
    bounds = fold_bounds(prices, SPLITS, FOLDS, MIN_LEN)
    assert m.n_folds == 3 and m.n_paths == 2 and m.n_rows == 6
    for f, b in enumerate(bounds):
        alone = Market(paths, b, W)
        assert alone.ranges == m.fold_ranges[f]
        for k in range(2):
            assert torch.equal(m.features[m.row(f, k)], alone.features[k])
            assert torch.equal(m.returns_next[m.row(f, k)], alone.returns_next[k])
            assert m.norm_means[m.row(f, k)] == alone.norm_means[k]
    # the folds are normalised differently (their training windows differ)
    assert m.norm_means[m.row(0, 0)] != m.norm_means[m.row(2, 0)]


@pytest.mark.parametrize("layout", ["expanding", "rolling"])
def test_no_fold_looks_ahead_of_its_training_window_or_of_t(prices, layout):
    """The perturbation audit of tests/test_env.py, for every fold: changing every price after
    fold f's training window leaves its normalisation and its features up to that point
    unchanged; changing the prices after t in its validation window leaves the observation at t
    unchanged."""
    folds = _folds(k=3, val_length=100, gap=3, layout=layout)
    m = _fold_market(prices, folds)
    for f, b in enumerate(m.bounds):
        train_end = b.train[1]
        changed = prices.copy()
        changed.iloc[train_end:] *= np.linspace(0.5, 3.0, len(prices) - train_end)
        m2 = _fold_market(changed, folds)
        row = m.row(f, 0)
        assert m2.norm_means[row] == m.norm_means[row] and m2.norm_stds[row] == m.norm_stds[row], f
        assert torch.equal(m2.features[row, :train_end], m.features[row, :train_end])
        # every later fold did see the change in its own training window
        assert all(m2.norm_means[m.row(g, 0)] != m.norm_means[m.row(g, 0)] for g in range(f + 1, m.n_folds))
        r = m.fold_ranges[f]["val"]
        t = (r.lo + r.hi) // 2
        later = prices.copy()
        later.iloc[t + 1 :] *= 1.7
        m3 = _fold_market(later, folds)
        tt, pos = torch.tensor([t]), torch.tensor([0.5])
        row_t = torch.tensor([row])
        assert torch.equal(m.observe(tt, pos, row_t), m3.observe(tt, pos, row_t))
        assert not torch.equal(m.observe(tt + 1, pos, row_t), m3.observe(tt + 1, pos, row_t))


def test_episodes_start_and_stay_inside_each_members_fold_training_window(prices):
    cfg = EnvConfig(window=W, episode_length=16)
    m = _fold_market(prices, _folds(k=3, val_length=100, layout="rolling"))
    fold_of_member = [0, 1, 2, 2, 1, 0]
    P, E = 6, 8
    seen, _ = walk_episodes(VecTradingEnv(m, cfg, P, E, fold_of_member=fold_of_member), seed=1, steps=120)
    for p, f in enumerate(fold_of_member):
        r = m.fold_ranges[f]["train"]
        assert min(seen[p]) >= r.lo and max(seen[p]) < r.hi, (p, f)
    # the rolling windows differ, so the members of different folds visit different times
    assert max(seen[2]) >= m.fold_ranges[0]["train"].hi and min(seen[0]) < m.fold_ranges[2]["train"].lo


def test_a_member_of_fold_f_sees_its_folds_features_and_is_evaluated_on_its_window(prices):
    paths = [prices, synthetic_prices(1000, seed=4)]
    m = _fold_market(paths)
    cfg = EnvConfig(window=W)
    acts = ActionMap(cfg, "cpu")
    path_of_member, fold_of_member = [1, 0, 1, 0], [0, 2, 2, 1]
    env = VecTradingEnv(m, cfg, 4, 2, path_of_member=path_of_member, fold_of_member=fold_of_member)
    t, pos = torch.full((4, 2), 700), torch.zeros(4, 2)
    obs = env.observe_at(t, pos)
    for p, (k, f) in enumerate(zip(path_of_member, fold_of_member)):
        alone = Market(paths[k], m.bounds[f], W)
        assert torch.equal(obs[p], alone.observe(t[p], pos[p]))

    def momentum(o):  # a policy that reads its observation: long after an up step, else short
        return torch.where(o[..., W - 1 : W] > 0, 2, 0).expand(*o.shape[:2], 2)

    rets, _ = evaluate_segment(m, acts, cfg.cost, momentum, 4, "val", path_of_member, fold_of_member)
    asset = segment_asset_returns(m, "val", path_of_member, fold_of_member)
    for p, (k, f) in enumerate(zip(path_of_member, fold_of_member)):
        alone = Market(paths[k], m.bounds[f], W)
        expect, _ = evaluate_segment(alone, acts, cfg.cost, momentum, 1, "val")
        assert torch.equal(rets[p], expect[0]), p
        assert torch.equal(asset[p], segment_asset_returns(alone, "val"))
    test, _ = evaluate_segment(m, acts, cfg.cost, momentum, 4, "test", path_of_member, fold_of_member)
    assert test.shape[1] == m.fold_ranges[0]["test"].length  # the common test segment


def test_folds_must_share_the_test_segment_and_fit_an_episode(prices):
    a, b = split_bounds(prices, SPLITS, MIN_LEN), split_bounds(prices, [0.5, 0.2, 0.3], MIN_LEN)
    with pytest.raises(DataError, match="same test segment"):
        Market(prices, [a, b], W)
    m = _fold_market(prices, _folds(k=3, val_length=100, layout="rolling", train_length=40))
    with pytest.raises(DataError, match=r"^data: fold 0's train segment has 39 decision steps, fewer than env\.episode_length=64$"):
        m.check_lengths(64)
