"""Several price histories on the population axis (issue 37 item 3), the training side: members =
histories x folds x arms x seeds, history-major, seed-paired across histories; each history's
members equal a run of that history alone, bit for bit (the folds invariant extended to
histories); one history is the layout and bits of a run before histories; the result columns
(members' `history`, per-history history aggregates, HEALTH_DIAG, eval_returns, baselines and the
history table)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from learner_fixtures import assert_runs_alone_equal_their_members, bits_equal, prefilled_learner, tiny_config, trained_with_lines
from tune_gems.data.series import synthetic_prices
from tune_gems.design.arms import ArmsConfig, MemberLayout, expand_arms
from tune_gems.rng import member_seeds
from tune_gems.stats.metrics import FOLD_METRICS, epoch_metrics
from tune_gems.trainer.trainer import Trainer

NAMES = ("spx", "ndx", "oil")
FOLDS = ["data.folds.k=2", "data.folds.val_length=60"]
ARMS = ArmsConfig.model_validate({"factors": {"gems.g10.mode": ["measure", "wire"]}})


def write_histories(path, n: int = 900, seeds=(11, 12, 13), names=NAMES):
    """A multi-asset file: one date column, one synthetic price column per history (one calendar)."""
    frame = pd.DataFrame({name: synthetic_prices(n, seed).to_numpy() for name, seed in zip(names, seeds)})
    frame.insert(0, "date", synthetic_prices(n, seeds[0]).index.strftime("%Y-%m-%d"))
    frame.to_csv(path, index=False)
    return path


def history_config(path, columns, *overrides):
    return tiny_config("data.source=file", f"data.path={path}", "data.time_column=date",
                       f"data.price_columns=[{','.join(columns)}]", *overrides)


def test_the_member_layout_is_history_major_then_fold_then_arm_then_seed():
    lay = MemberLayout(("a", "b"), 3, folds=2, histories=2)
    assert lay.members == 24
    ids = [(lay.history_index(m), lay.fold_index(m), lay.arm_of(m), lay.seed_index(m)) for m in (0, 5, 6, 11, 12, 17, 23)]
    assert ids == [(0, 0, "a", 0), (0, 0, "b", 2), (0, 1, "a", 0), (0, 1, "b", 2), (1, 0, "a", 0), (1, 0, "b", 2), (1, 1, "b", 2)]
    assert lay.blocks == [slice(3 * b, 3 * b + 3) for b in range(8)]  # (history, fold, arm) blocks of 3 seeds
    assert lay.member_seeds(4) == member_seeds(4, 3) * 8  # seed index s: one seed in every history, fold and arm
    assert lay.per_member([1, 2]) == [1, 1, 1, 2, 2, 2] * 4
    one = MemberLayout(("a", "b"), 3, folds=2)  # one history: the fold-major layout of a run before histories
    assert one.histories == 1 and [one.history_index(m) for m in range(12)] == [0] * 12
    assert [one.fold_index(m) for m in range(12)] == [0] * 6 + [1] * 6


def test_run_arms_lays_out_the_configs_histories(tmp_path):
    from tune_gems.design.arms import run_arms
    from tune_gems.design.resources import default_members

    cfg = history_config(write_histories(tmp_path / "h.csv"), NAMES, "trainer.population=2",
                         "arms.factors.gems.g10.mode=[measure,wire]", *FOLDS)
    record = run_arms(cfg)
    assert (record.layout.histories, record.layout.folds, record.members) == (3, 2, 3 * 2 * 2 * 2)
    assert default_members(cfg) == record.members


def _learner(cfg):
    return prefilled_learner(cfg, expand_arms(cfg, ARMS))


@pytest.mark.parametrize("design", [FOLDS, ["data.folds.scheme=purged", "data.folds.k=2", "data.folds.embargo=3"], []],
                         ids=["walk_forward", "purged", "one_fold"])
def test_each_historys_members_equal_a_run_of_that_history_alone_bit_for_bit(tmp_path, design):
    """3 histories x F folds x 2 arms x 2 seeds in one learner against, per history, a learner of
    that history alone (`data.price_columns=[<it>]`, the same folds and arms: the same per-block
    shapes). After collection and 9 iterations (two hard target copies) every state tensor of
    every member matches: a member's numbers do not depend on which other histories share the
    graph (each history has its own normalisation, folds and episodes)."""
    path = write_histories(tmp_path / "h.csv")
    together = _learner(history_config(path, NAMES, "trainer.population=2", *design))
    H, A, S = 3, 2, 2
    F = together.layout.folds
    assert together.P == H * F * A * S and together.path_of_member == [h for h in range(H) for _ in range(F * A * S)]
    alone = [_learner(history_config(path, [name], "trainer.population=2", *design)) for name in NAMES]
    assert all(run.P == F * A * S and run.env.market.n_paths == 1 for run in alone)
    state = assert_runs_alone_equal_their_members(together, alone)
    # the histories do differ (their prices and normalisations), so the comparison can fail
    params = state["online.params"]
    assert not torch.equal(params[0], params[F * A * S]) and not torch.equal(params[F * A * S], params[2 * F * A * S])


def test_one_history_listed_is_the_run_of_that_column_bit_for_bit(tmp_path):
    """`data.price_columns=[ndx]` and `data.price_column=ndx` are one run: the same market, member
    layout and, after 9 iterations, every state tensor (one history is the layout before histories)."""
    path = write_histories(tmp_path / "h.csv")
    listed = _learner(history_config(path, ["ndx"], *FOLDS))
    plain = _learner(tiny_config("data.source=file", f"data.path={path}", "data.time_column=date", "data.price_column=ndx", *FOLDS))
    assert listed.layout == plain.layout and torch.equal(listed.env.market.features, plain.env.market.features)
    for _ in range(9):
        listed.iteration()
        plain.iteration()
    ours, theirs = listed.state_tensors(), plain.state_tensors()
    assert all(bits_equal(v, theirs[k]) for k, v in ours.items())


def test_each_history_is_normalised_on_its_own_training_window(tmp_path):
    from tune_gems.trainer.run_setup import prepare_market

    path = write_histories(tmp_path / "h.csv")
    market = prepare_market(history_config(path, NAMES, *FOLDS), torch.device("cpu"))
    prices = pd.read_csv(path)
    assert market.n_paths == 3 and market.n_folds == 2 and market.columns == NAMES
    for f, bounds in enumerate(market.bounds):
        s, e = bounds.train
        for h, name in enumerate(NAMES):
            logret = np.diff(np.log(prices[name].to_numpy()))[max(s, 1) - 1 : e - 1]
            assert market.norm_means[market.row(f, h)] == pytest.approx(logret.mean(), rel=1e-12)
            assert market.norm_stds[market.row(f, h)] == pytest.approx(logret.std(), rel=1e-12)


@pytest.fixture(scope="module")
def history_run(tmp_path_factory):
    """A tiny trainer of 2 histories x 2 folds x 2 arms x 2 seeds, trained to its end."""
    path = write_histories(tmp_path_factory.mktemp("h") / "h.csv", names=("spx", "ndx"), seeds=(11, 12))
    return trained_with_lines(history_config(path, ["spx", "ndx"], "trainer.population=2", "trainer.epochs=2",
                                             "arms.factors.gems.g10.mode=[measure,wire]", *FOLDS))


def test_member_rows_carry_their_history_and_the_history_row_its_means(history_run):
    t, _ = history_run
    members = pd.DataFrame(t.member_history)
    last = members[members["epoch"] == 2]
    assert last["history"].tolist() == [h for h in range(2) for _ in range(8)]
    assert last["fold"].tolist() == [f for _ in range(2) for f in range(2) for _ in range(4)]
    assert last.groupby(["history", "fold"])["seed_index"].apply(list).tolist() == [[0, 1, 0, 1]] * 4
    h = t.history[-1]
    assert tuple(h) == epoch_metrics((), t.arms.names, (0, 1), (0, 1))
    cells = {"history0": last["history"] == 0, "history1": last["history"] == 1, "fold1": last["fold"] == 1,
             "history1.fold0": (last["history"] == 1) & (last["fold"] == 0)}
    for suffix, cell in cells.items():
        for column in FOLD_METRICS:
            seg, stat = column.split("_", 1)
            expect = last.loc[cell, f"{seg}_{stat.removesuffix('_mean')}"].mean()
            assert h[f"{column}@{suffix}"] == pytest.approx(expect, rel=1e-12, abs=1e-12), (suffix, column)
    # different prices: the histories' validation statistics differ
    assert h["val_sharpe_mean@history0"] != h["val_sharpe_mean@history1"]


def test_the_health_lines_fold_part_names_the_history(history_run):
    _, lines = history_run
    assert all(" folds [spx/0: vs=" in line and " | spx/1: vs=" in line and " | ndx/1: vs=" in line for line in lines)
    assert " ts=" in lines[-1] and " ts=" not in lines[0]


def test_eval_returns_hold_each_members_history_and_its_asset_returns(history_run):
    t, _ = history_run
    arrays = t.window.arrays()
    P, T = t.learner.P, t.market.ranges["val"].length
    assert arrays["history"].tolist() == [h for h in range(2) for _ in range(8)]
    assert arrays["path"].tolist() == arrays["history"].tolist()  # a price file's paths are its histories
    own = t.market.returns_next.numpy()[arrays["history"]]  # each member's history's raw returns (rows of fold 0)
    steps = arrays["window_start"][:, None] + np.arange(T)  # its own fold's validation window
    np.testing.assert_array_equal(arrays["asset"], np.take_along_axis(own, steps, axis=1))
    assert arrays["asset"].shape == (P, T)


def test_baselines_are_per_history_and_fold_and_the_history_table_names_each(history_run):
    t, _ = history_run
    b = t.baselines()
    assert len(b) == 2 * 2 * 3 * 2 and (b["history"] == b["path"]).all()  # folds x segments x baselines x histories
    hold = b[(b["segment"] == "test") & (b["baseline"] == "buy_and_hold")]
    assert hold.groupby("history")["sharpe"].nunique().tolist() == [1, 1] and hold["sharpe"].nunique() == 2
    table = t.history_table()
    assert table["history"].tolist() == [0, 1] and table["name"].tolist() == ["spx", "ndx"]
    assert table["column"].tolist() == ["spx", "ndx"] and table["source"].nunique() == 1
    assert table["rows"].tolist() == [t.market.n] * 2 and table["first"].tolist() == [str(t.market.index[0].date())] * 2


def test_a_run_of_one_history_writes_a_one_row_history_table_and_history_zero():
    t = Trainer(tiny_config("trainer.epochs=1", "trainer.iterations_per_epoch=2"), log=None)
    row = t.run_epoch().members[0]
    assert row["history"] == 0 and t.window.arrays()["history"].tolist() == [0] * t.learner.P
    table = t.history_table()
    assert table[["history", "name", "source", "rows"]].values.tolist() == [[0, "synthetic", "synthetic", 900]]
    assert set(t.baselines()["history"]) == {0}


def test_a_run_with_histories_resumes_from_its_checkpoint_bit_for_bit(tmp_path):
    from learner_fixtures import assert_same_run, full_and_resumed

    path = write_histories(tmp_path / "h.csv", names=("spx", "ndx"), seeds=(11, 12))
    cfg = history_config(path, ["spx", "ndx"], "trainer.epochs=2", "trainer.iterations_per_epoch=3", "trainer.population=2")
    full, resumed = full_and_resumed(cfg, tmp_path / "ck.pt")
    assert_same_run(full, resumed)
