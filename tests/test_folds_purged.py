"""Purged cross-validation on the population axis (issue 30 item 1), the data and environment
side: the group layout and its one-line errors, the purge and the embargo, normalisation on a
fold's own runs of training rows, episodes that start and stay inside one run, the look-ahead
audit for this layout (perturbing a fold's validation group changes nothing its members train
on), the fold table and the start-up lines; and walk-forward with more, shorter windows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from env_fixtures import walk_episodes
from tune_gems.config.load import load_config
from tune_gems.config.schema import EnvConfig, FoldsConfig
from tune_gems.contracts.errors import ConfigError, DataError
from tune_gems.data.segments import FOLD_TABLE_COLUMNS, SegmentBounds, TrainingReach, fold_bounds, fold_table, split_bounds  # fmt: skip
from tune_gems.data.series import load_prices, synthetic_prices
from tune_gems.data.summary import data_lines, layout_line, split_line
from tune_gems.market.env import VecTradingEnv, run_start_tables
from tune_gems.market.features import DecisionRange, Market
from tune_gems.rng import CounterRNG, member_seeds, to_integers

W, N_STEP, EPISODE = 6, 3, 16
MIN_LEN = W + 2
SPLITS = [0.6, 0.2, 0.2]  # 1000 rows: the test segment starts at row 800
REACH = TrainingReach(W, N_STEP, EPISODE)
SP500 = Path(__file__).resolve().parents[1] / "examples" / "sp500_closes.csv"


def _purged(**kw) -> FoldsConfig:
    return FoldsConfig(scheme="purged", **kw)


@pytest.fixture(scope="module")
def prices() -> pd.Series:
    return synthetic_prices(1000, seed=3)


def _market(prices: pd.Series | list[pd.Series], folds: FoldsConfig, reach: TrainingReach = REACH) -> Market:
    first = prices if isinstance(prices, pd.Series) else prices[0]
    return Market(prices, fold_bounds(first, SPLITS, folds, MIN_LEN, reach), W)


# -- the layout ---------------------------------------------------------------------------------


def test_the_history_before_the_test_segment_is_cut_into_k_groups_with_a_purge_and_an_embargo(prices):
    b = fold_bounds(prices, SPLITS, _purged(k=4, embargo=5), MIN_LEN, REACH)
    # (800 - W) // 4 = 198 rows per group; the 8 rows left over lead (at least W: the first
    # group's first observation reads W rows before it)
    assert [f.val for f in b] == [(8, 206), (206, 404), (404, 602), (602, 800)]
    assert all(f.test == (800, 1000) and f.purge == (N_STEP - 1, W) and f.embargo == 5 for f in b)
    # before a group: n_step - 1 rows; after it: the embargo, then W rows of observation history;
    # before the test segment: n_step - 1 rows again. Fold 0's 6 leading rows hold no episode.
    assert [f.runs for f in b] == [
        ((206 + 5 + W, 798),),
        ((0, 204), (404 + 5 + W, 798)),
        ((0, 402), (602 + 5 + W, 798)),
        ((0, 600),),
    ]
    assert [f.train for f in b] == [(217, 798), (0, 798), (0, 798), (0, 600)]  # the span of the runs


def test_an_explicit_group_length_puts_the_groups_last_and_the_earlier_rows_in_every_fold(prices):
    b = fold_bounds(prices, SPLITS, _purged(k=3, val_length=150), MIN_LEN, REACH)
    assert [f.val for f in b] == [(350, 500), (500, 650), (650, 800)]
    assert b[0].runs == ((0, 348), (500 + W, 798))  # rows 0..349 train every fold


@pytest.mark.parametrize("n_step, window, embargo", [(1, 6, 0), (3, 6, 0), (5, 12, 7)])
def test_no_training_decision_reads_a_price_of_its_validation_group_or_of_the_test_segment(prices, n_step, window, embargo):
    """Every decision t a member of fold f may take (its runs' decision ranges) reads prices
    t - window .. t + n_step (observation, rewards, untruncated n-step target and its
    bootstrap observation): none of them lies in the fold's validation group, in its embargo,
    or in the test segment."""
    reach = TrainingReach(window, n_step, EPISODE)
    bounds = fold_bounds(prices, SPLITS, _purged(k=5, embargo=embargo), window + 2, reach)
    m = Market(prices, bounds, window)
    for f, b in enumerate(bounds):
        held_out = set(range(b.val[0], b.val[1] + embargo)) | set(range(*b.test))
        for r in m.train_runs[f]:
            for t in range(r.lo, r.hi):
                assert not held_out & set(range(t - window, t + n_step + 1)), (f, t)
        # and the purge is no wider than it must be: one row closer touches the group
        before = [r for r in m.train_runs[f] if r.hi <= b.val[0]]
        after = [r for r in m.train_runs[f] if r.lo >= b.val[1]]
        if before:
            assert before[0].hi - 1 + n_step == b.val[0] - 1
        if after:
            assert after[0].lo - window == b.val[1] + embargo


@pytest.mark.parametrize(
    "n, folds, message",
    [
        (300, dict(k=40), r"^data\.folds\.k: 40 groups of the 234 rows before the test segment \(less env\.window=6\) have 5 rows each; need at least min_len=8$"),
        (1000, dict(k=4, val_length=5), r"^data\.folds\.val_length: 5 rows per validation group, need at least min_len=8$"),
        (1000, dict(k=4, val_length=200), r"^data\.folds\.val_length: 4 groups of 200 rows do not fit before the test segment \(which starts at row 800\) and after the 6 rows the first group's observations read \(env\.window\): at most 198$"),
        (1000, dict(k=2, embargo=380), r"^data\.folds: purged fold 0 \(validation rows 6\.\.402\) keeps no run of training rows that holds an episode of env\.episode_length=16 decisions after a purge of 2 row\(s\) before and 6 after and an embargo of 380; use fewer groups \(data\.folds\.k\) or a shorter data\.folds\.embargo$"),
    ],
)
def test_purged_layouts_that_do_not_fit_are_one_line_errors(n, folds, message):
    with pytest.raises(ConfigError, match=message):
        fold_bounds(synthetic_prices(n, seed=3), SPLITS, _purged(**folds), MIN_LEN, REACH)


def test_the_purged_scheme_needs_the_training_reach(prices):
    with pytest.raises(ValueError, match="needs the training reach"):
        fold_bounds(prices, SPLITS, _purged(k=3), MIN_LEN)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["data.folds.scheme=purged"], r"^config: data\.folds: data\.folds\.k: scheme purged needs at least 2 groups \(one validates while the others train\)$"),
        (["data.folds.scheme=purged", "data.folds.k=3", "data.folds.gap=2"], r"data\.folds\.gap is for scheme walk_forward only"),
        (["data.folds.scheme=purged", "data.folds.k=3", "data.folds.layout=rolling"], r"data\.folds\.layout is for scheme walk_forward only"),
        (["data.folds.k=3", "data.folds.embargo=5"], r"data\.folds\.embargo is for scheme purged only"),
        (["data.folds.scheme=kfold"], r"data\.folds\.scheme: Input should be 'walk_forward' or 'purged'"),
        (["data.folds.scheme=purged", "data.folds.k=3", "data.folds.embargo=-1"], r"data\.folds\.embargo: Input should be greater than or equal to 0"),
    ],
)
def test_bad_purged_keys_are_one_line_config_errors(overrides, message):
    with pytest.raises(ConfigError, match=message) as err:
        load_config(None, overrides)
    assert "\n" not in str(err.value)


def test_a_purged_config_stays_loadable_after_a_round_trip():
    """Trial configs and checkpoints carry the full config: a purged one must validate again
    (its walk-forward keys at their defaults)."""
    cfg = load_config(None, ["data.folds.scheme=purged", "data.folds.k=6", "data.folds.embargo=5"])
    again = load_config(None, [f"data.folds.{k}={'null' if v is None else v}" for k, v in cfg.data.folds.model_dump().items()])
    assert again.data.folds == cfg.data.folds


# -- the market ---------------------------------------------------------------------------------


def test_a_purged_fold_is_normalised_on_its_runs_alone(prices):
    m = _market(prices, _purged(k=4, embargo=5))
    lr = np.zeros(len(prices))
    lr[1:] = np.log(prices.to_numpy()[1:] / prices.to_numpy()[:-1])
    for f, b in enumerate(m.bounds):
        own = np.concatenate([lr[max(s, 1) : e] for s, e in b.runs])
        assert m.norm_means[m.row(f, 0)] == float(own.mean()) and m.norm_stds[m.row(f, 0)] == float(own.std())
    span = lr[1 : m.bounds[1].train[1]]  # the span of fold 1's runs holds its validation group
    assert m.norm_means[m.row(1, 0)] != float(span.mean())


def test_a_one_run_fold_builds_the_market_a_walk_forward_fold_of_the_same_rows_builds(prices):
    """The last purged fold trains on one run before its group, as a walk-forward fold with a
    gap of n_step - 1 does: the same features, ranges and start bounds."""
    purged = fold_bounds(prices, SPLITS, _purged(k=4), MIN_LEN, REACH)[3]
    plain = SegmentBounds(train=purged.runs[0], val=purged.val, test=purged.test)
    a, b = Market(prices, purged, W), Market(prices, plain, W)
    assert torch.equal(a.features, b.features) and a.ranges == b.ranges and a.train_runs == b.train_runs


def test_run_start_tables_count_the_allowed_starts_of_every_run():
    runs = [(DecisionRange(10, 50), DecisionRange(80, 90)), (DecisionRange(6, 40),), (DecisionRange(6, 10), DecisionRange(60, 100))]
    lo, offset, total = run_start_tables(runs, 16)
    # spans: 50-10-16+1 = 25 and 90-80-16+1 < 0 -> 0; 40-6-16+1 = 19; 10-6-16+1 < 0 -> 0 and 25
    assert lo.tolist() == [[10, 80], [6, 6], [6, 60]]
    assert offset.tolist() == [[0, 25], [0, 19], [0, 0]] and total.tolist() == [25, 19, 25]


def test_episodes_start_in_one_run_and_never_step_into_the_purge_the_embargo_or_the_group(prices):
    cfg = EnvConfig(window=W, episode_length=EPISODE)
    m = _market(prices, _purged(k=4, embargo=5))
    fold_of_member = [0, 1, 2, 3, 1, 2]
    P, E = 6, 16
    seen, starts = walk_episodes(VecTradingEnv(m, cfg, P, E, fold_of_member=fold_of_member), seed=2, steps=400)
    for p, f in enumerate(fold_of_member):
        runs = m.train_runs[f]
        inside = set().union(*(range(r.lo, r.hi) for r in runs))
        assert seen[p] <= inside, (p, f, sorted(seen[p] - inside)[:5])
        for s in starts[p]:  # the whole episode fits in the run it starts in
            assert any(r.lo <= s and s + EPISODE - 1 < r.hi for r in runs), (p, s)
        for r in runs:  # every run is used, in proportion to its allowed starts
            share = np.mean([r.lo <= s < r.hi for s in starts[p]])
            allowed = (r.length - EPISODE + 1) / sum(q.length - EPISODE + 1 for q in runs)
            assert abs(share - allowed) < 0.08, (p, r, share, allowed)


def test_the_start_offsets_of_a_two_run_fold_map_onto_both_runs_in_order():
    """`_starts` maps offset j < span_0 to run 0's lo + j and j >= span_0 to run 1's lo + (j - span_0):
    the allowed starts of the runs, end to end, each reached by the same share of uniforms."""
    prices = synthetic_prices(1000, seed=1)
    m = _market(prices, _purged(k=4))
    env = VecTradingEnv(m, EnvConfig(window=W, episode_length=EPISODE), 1, 4096, fold_of_member=[1])
    (r0, r1), total = m.train_runs[1], int(env._start_span[0])
    u = (torch.arange(4096, dtype=torch.float32).view(1, -1) + 0.5) / 4096
    j = to_integers(u, env._start_span)
    span0 = r0.length - EPISODE + 1
    expect = torch.where(j < span0, r0.lo + j, r1.lo + j - span0)
    assert total == span0 + r1.length - EPISODE + 1 and torch.equal(env._starts(u), expect)
    assert set(env._starts(u).flatten().tolist()) == set(range(r0.lo, r0.lo + span0)) | set(range(r1.lo, r1.hi - EPISODE + 1))


# -- the look-ahead audit for this layout ----------------------------------------------------------


def _perturb(prices: pd.Series, lo: int, hi: int) -> pd.Series:
    out = prices.copy()
    out.iloc[lo:hi] *= np.linspace(0.5, 3.0, hi - lo)
    return out


@pytest.mark.parametrize("embargo", [0, 4])
def test_perturbing_a_validation_group_changes_nothing_its_fold_trains_on(prices, embargo):
    """The perturbation audit of tests/test_folds_data.py for purged folds: changing every price
    of fold f's validation group (and of its embargo) leaves the fold's normalisation, every
    observation an episode of it can build (at t and t + 1, any position), every reward it can
    earn and every episode start unchanged; the fold's validation observations do change, and
    so does the normalisation of every other fold (whose training rows hold that group)."""
    cfg = EnvConfig(window=W, episode_length=EPISODE)
    folds = _purged(k=4, embargo=embargo)
    m = _market(prices, folds)
    P, E = 4, 8
    for f, b in enumerate(m.bounds):
        changed = _market(_perturb(prices, b.val[0], b.val[1] + embargo), folds)
        row = m.row(f, 0)
        assert changed.norm_means[row] == m.norm_means[row] and changed.norm_stds[row] == m.norm_stds[row], f
        t = torch.tensor([t for r in m.train_runs[f] for t in range(r.lo, r.hi)])
        rows = torch.full_like(t, row)
        for pos in (-1.0, 0.0, 0.5):
            p = torch.full(t.shape, pos)
            assert torch.equal(m.observe(t, p, rows), changed.observe(t, p, rows)) and torch.equal(
                m.observe(t + 1, p, rows), changed.observe(t + 1, p, rows)
            ), (f, pos)
        assert torch.equal(m.returns_at(t, rows), changed.returns_at(t, rows)), f
        envs = [VecTradingEnv(x, cfg, P, E, fold_of_member=[f] * P) for x in (m, changed)]
        rng = [CounterRNG(member_seeds(5, P), "cpu") for _ in envs]
        for env, g in zip(envs, rng):
            env.reset(g.uniform(1, (E,)))
        for _ in range(60):
            steps = []
            for env, g in zip(envs, rng):
                g.advance()
                obs = env.observe()
                tr = env.step(to_integers(g.uniform(2, (E, 2)), torch.tensor(3)).view(P, E, 2), g.uniform(1, (E,)))
                steps.append((obs, tr.reward, tr.next_obs, env.t.clone()))
            for x, y in zip(*steps):
                assert torch.equal(x, y), f
        v = m.fold_ranges[f]["val"]
        tv = torch.arange(v.lo + W, v.hi)
        assert not torch.equal(m.observe(tv, torch.zeros(tv.shape), torch.full_like(tv, row)),
                               changed.observe(tv, torch.zeros(tv.shape), torch.full_like(tv, row)))  # fmt: skip
        # (the std: a scaled group leaves the mean log return of rows around it nearly as it was)
        assert all(changed.norm_stds[m.row(g, 0)] != m.norm_stds[m.row(g, 0)] for g in range(m.n_folds) if g != f)


def test_the_audit_can_fail_a_purge_one_row_short(prices):
    """The audit above is not vacuous: with the after-purge one row short (window - 1), a
    training observation of the run after the group reads the group's last price."""
    short = TrainingReach(W - 1, N_STEP, EPISODE)  # the group's layout with a purge of W - 1 after it
    bounds = fold_bounds(prices, SPLITS, _purged(k=4), MIN_LEN, short)
    m = Market(prices, bounds, W)  # but the market's observations still read W returns back
    b = bounds[1]
    changed = Market(_perturb(prices, *b.val), bounds, W)
    after = m.train_runs[1][1]
    t, row = torch.tensor([after.lo]), torch.tensor([m.row(1, 0)])
    assert not torch.equal(m.observe(t, torch.zeros(1), row), changed.observe(t, torch.zeros(1), row))


# -- records and start-up lines ----------------------------------------------------------------------


def test_the_fold_table_records_the_purged_layout(prices):
    b = fold_bounds(prices, SPLITS, _purged(k=4, embargo=5), MIN_LEN, REACH)
    t = fold_table(prices.index, b, "expanding")
    assert tuple(t.columns) == FOLD_TABLE_COLUMNS and t["scheme"].eq("purged").all() and t["layout"].isna().all()
    assert t["train_runs"].tolist() == ["217:798", "0:204 415:798", "0:402 613:798", "0:600"]
    assert t["train_rows"].tolist() == [581, 204 + 383, 402 + 185, 600] and t["group_rows"].eq(198).all()
    assert t["purge_before"].eq(2).all() and t["purge_after"].eq(W).all() and t["embargo"].eq(5).all()
    assert t.loc[1, "val_first"] == str(prices.index[206].date())


def test_the_fold_table_records_the_walk_forward_layout_in_the_same_columns(prices):
    b = fold_bounds(prices, SPLITS, FoldsConfig(k=3, val_length=100, gap=5), MIN_LEN)
    t = fold_table(prices.index, b, "expanding")
    assert t["scheme"].eq("walk_forward").all() and t["layout"].eq("expanding").all()
    assert t["train_runs"].tolist() == ["0:495", "0:595", "0:695"] and t["train_rows"].tolist() == [495, 595, 695]
    assert t["purge_before"].eq(5).all() and t["purge_after"].eq(0).all() and t["embargo"].eq(0).all()


def test_the_start_up_lines_say_the_purged_layout(prices):
    m = _market(prices, _purged(k=4, embargo=5))
    assert layout_line(m) == (
        "folds: purged cross-validation, 4 group(s) of 198 rows before the test segment; each fold validates on its group "
        "and trains on the rows before and after it, less 2 row(s) before the group and the test segment (n-step targets), "
        "6 after the group (the observation window) and an embargo of 5; a run of rows too short for an episode is dropped"
    )
    line = split_line(m)
    assert line.startswith("split: fold 0: train 581 rows in 1 run(s) (2000-11-01..2003-01-22), validation 198 rows (2000-01-13..2000-10-16) | ")
    assert "fold 1: train 587 rows in 2 run(s) (2000-01-03..2000-10-12 + 2001-08-06..2003-01-22)" in line
    assert line.endswith("| test 200 rows (2003-01-27..2003-10-31)")
    walk = Market(prices, fold_bounds(prices, SPLITS, FoldsConfig(k=2, val_length=100), MIN_LEN), W)
    assert layout_line(walk) is None and [x.split(":")[0] for x in data_lines(load_config(None, []).data, walk)] == ["data", "split"]


# -- walk-forward with more, shorter windows ---------------------------------------------------------


def test_walk_forward_with_eight_shorter_windows_and_earlier_starts_fits_the_sp500_file():
    sp = load_prices(SP500, time_column="date")
    cfg = load_config(None, ["data.source=file", f"data.path={SP500}", "data.folds.k=8", "data.folds.val_length=250",
                             "env.window=16", "env.episode_length=64"])  # fmt: skip
    b = fold_bounds(sp, cfg.data.splits, cfg.data.folds, cfg.env.window + 2)
    test_lo = split_bounds(sp, cfg.data.splits, cfg.env.window + 2).test[0]
    assert [f.val for f in b] == [(test_lo - (8 - k) * 250, test_lo - (7 - k) * 250) for k in range(8)]
    assert b[0].train == (0, test_lo - 2000)  # fold 0 starts 2,000 rows (8 years) before the test
    m = Market(sp, b, cfg.env.window)
    m.check_lengths(cfg.env.episode_length)
    assert {m.fold_ranges[f]["val"].length for f in range(8)} == {249}
    with pytest.raises(ConfigError, match=r"^data\.folds: 18 validation window\(s\) of 250 rows .* leave fold 0 0 training rows"):
        fold_bounds(sp, cfg.data.splits, FoldsConfig(k=18, val_length=250), cfg.env.window + 2)


def test_a_fold_whose_runs_are_all_shorter_than_an_episode_is_refused_by_the_market(prices):
    short = SegmentBounds(train=(0, 300), val=(300, 400), test=(800, 1000), train_runs=((0, 20), (420, 440)), purge=(2, 6))
    with pytest.raises(DataError, match=r"^data: training runs have 13, 19 decision steps, none as many as env\.episode_length=32$"):
        Market(prices, short, W).check_lengths(32)
