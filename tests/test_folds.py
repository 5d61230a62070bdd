"""Walk-forward folds on the population axis (issue 20), the training side: members = folds x
arms x seeds, fold-major; each fold's members equal a run of that fold alone at the same shapes
(the arms invariant extended to folds); the result columns (members' `fold`, per-fold history
aggregates, HEALTH_DIAG, eval_returns, baselines and the fold table)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from learner_fixtures import assert_runs_alone_equal_their_members, bits_equal, tiny_config, trained_with_lines
from tune_gems.design.arms import ArmsConfig, MemberLayout, expand_arms
from tune_gems.stats.metrics import FOLD_METRICS, epoch_metrics
from tune_gems.rng import member_seeds
from tune_gems.trainer.trainer import Trainer

FOLDS = ["data.folds.k=3", "data.folds.val_length=60", "data.folds.gap=2"]
PURGED = ["data.folds.scheme=purged", "data.folds.k=3", "data.folds.embargo=4"]
ARMS = ArmsConfig.model_validate({"factors": {"gems.g10.mode": ["measure", "wire"]}})


def test_the_member_layout_is_fold_major_then_arm_then_seed():
    lay = MemberLayout(("a", "b"), 3, folds=2)
    assert lay.members == 12
    assert [(lay.fold_index(m), lay.arm_of(m), lay.seed_index(m)) for m in (0, 4, 5, 6, 11)] == [
        (0, "a", 0), (0, "b", 1), (0, "b", 2), (1, "a", 0), (1, "b", 2)
    ]  # fmt: skip
    assert lay.blocks == [slice(0, 3), slice(3, 6), slice(6, 9), slice(9, 12)]
    assert lay.member_seeds(4) == member_seeds(4, 3) * 4  # seed index s: one seed in every fold and arm
    assert lay.per_member([1, 2]) == [1, 1, 1, 2, 2, 2] * 2


def _learner(cfg, folds=None, prices=None):
    from tune_gems.ops import resolve_backend
    from tune_gems.trainer.run_setup import prepare_market
    from tune_gems.trainer.learner import Learner

    dev = torch.device("cpu")
    market = prepare_market(cfg, dev, prices=prices, n_seed_indices=cfg.trainer.population, folds=folds)
    learner = Learner(cfg, market, dev, resolve_backend("reference", dev), arms=expand_arms(cfg, ARMS))
    learner.reset_envs()
    for _ in range(cfg.trainer.learning_starts // cfg.trainer.n_envs):
        learner.collect()
    return learner


@pytest.mark.parametrize("design", [FOLDS, PURGED], ids=["walk_forward", "purged"])
def test_each_folds_members_equal_a_run_of_that_fold_alone_bit_for_bit(design):
    """3 folds x 2 arms x 2 seeds in one learner against, per fold, a learner of that fold alone
    with the same 2 arms (the same per-block shapes: every matmul and per-group reduction runs
    per (fold, arm) block in both). After collection and 9 iterations (two hard target copies)
    every state tensor of every member matches, so a member's numbers do not depend on how many
    folds share the graph. Walk-forward, and purged cross-validation (where the folds have one
    or two runs of training rows, so the start tables differ in shape between the two)."""
    cfg = tiny_config("trainer.population=2", *design)
    together = _learner(cfg)
    F, A, S = 3, 2, 2
    assert together.P == F * A * S and together.fold_of_member == [f for f in range(F) for _ in range(A * S)]
    alone = [_learner(cfg, folds=[f]) for f in range(F)]
    assert all(run.P == A * S and run.env.market.fold_ids == (f,) for f, run in enumerate(alone))
    state = assert_runs_alone_equal_their_members(together, alone)
    # the folds do differ (their windows and normalisations), so the comparison can fail
    params = state["online.params"]
    assert not torch.equal(params[0], params[A * S]) and not torch.equal(params[A * S], params[2 * A * S])


def test_perturbing_a_purged_folds_validation_group_changes_nothing_its_members_train_on():
    """The look-ahead audit at the learner: fold 1 of 3 purged groups trained alone (2 arms x 2
    seeds, collection and 9 iterations) on one price history and on the same history with
    every price of fold 1's validation group and embargo changed: every state tensor (weights,
    optimiser, replay, environments, metrics) is bit-identical. The change does reach the
    market (fold 1's validation features) and a fold that trains on that group (fold 0)."""
    from tune_gems.data.series import synthetic_prices

    cfg = tiny_config("trainer.population=2", "data.synthetic.paths=shared", *PURGED)
    prices = synthetic_prices(cfg.data.synthetic.n, cfg.data.synthetic.seed)
    plain = _learner(cfg, folds=[1], prices=prices)
    lo, hi = plain.env.market.bounds[0].val
    changed_prices = prices.copy()
    changed_prices.iloc[lo : hi + cfg.data.folds.embargo] *= np.linspace(0.5, 3.0, hi + cfg.data.folds.embargo - lo)
    changed = _learner(cfg, folds=[1], prices=changed_prices)
    for _ in range(9):
        plain.iteration()
        changed.iteration()
    ours, theirs = plain.state_tensors(), changed.state_tensors()
    assert all(bits_equal(v, theirs[k]) for k, v in ours.items()), [k for k, v in ours.items() if not bits_equal(v, theirs[k])]
    val = plain.env.market.fold_ranges[0]["val"]
    assert not torch.equal(plain.env.market.features[:, val.lo : val.hi], changed.env.market.features[:, val.lo : val.hi])
    other = [_learner(cfg, folds=[0], prices=p) for p in (prices, changed_prices)]
    assert not torch.equal(other[0].state_tensors()["replay.reward"], other[1].state_tensors()["replay.reward"])


def test_seed_index_s_starts_from_the_same_weights_in_every_fold_and_arm():
    learner = _learner(tiny_config("trainer.population=2", *FOLDS))  # collection only: no update yet
    params = learner.online_flat.data
    assert learner.seeds == member_seeds(0, 2) * 6
    for m in range(learner.P):
        assert torch.equal(params[m], params[learner.layout.seed_index(m)]), m
    assert not torch.equal(params[0], params[1])


@pytest.fixture(scope="module")
def fold_run():
    """A tiny trainer of 3 folds x 2 arms x 2 seeds, trained to its end."""
    return trained_with_lines(tiny_config("trainer.population=2", "trainer.epochs=2", "arms.factors.gems.g10.mode=[measure,wire]", *FOLDS))


def test_member_rows_carry_their_fold_and_history_the_per_fold_means(fold_run):
    t, _ = fold_run
    members = pd.DataFrame(t.member_history)
    last = members[members["epoch"] == 2]
    assert last["fold"].tolist() == [f for f in range(3) for _ in range(4)]
    assert (last.groupby("fold")["seed_index"].apply(list) == pd.Series([[0, 1, 0, 1]] * 3)).all()
    h = t.history[-1]
    assert tuple(h) == epoch_metrics((), t.arms.names, (0, 1, 2))
    for f in range(3):
        mine = last[last["fold"] == f]
        for column in FOLD_METRICS:
            seg, stat = column.split("_", 1)
            expect = mine[f"{seg}_{stat.removesuffix('_mean')}"].mean()
            assert h[f"{column}@fold{f}"] == pytest.approx(expect, rel=1e-12, abs=1e-12), (f, column)
    # different validation windows: the folds' validation statistics differ
    assert len({round(h[f"val_sharpe_mean@fold{f}"], 9) for f in range(3)}) > 1 or len(set(last["val_turnover"])) > 1


def test_the_health_line_has_a_per_fold_part(fold_run):
    _, lines = fold_run
    assert all(" folds [0: vs=" in line and " | 2: vs=" in line for line in lines)
    assert " ts=" in lines[-1] and " ts=" not in lines[0]  # the test segment at the end only


def test_eval_returns_hold_each_members_own_validation_window(fold_run):
    t, _ = fold_run
    arrays = t.window.arrays()
    P, T = t.learner.P, t.market.ranges["val"].length
    assert arrays["returns"].shape[1:] == (P, T) and arrays["asset"].shape == (P, T)
    assert arrays["fold"].tolist() == [f for f in range(3) for _ in range(4)]
    starts = [t.market.fold_ranges[f]["val"].lo for f in range(3)]
    assert arrays["window_start"].tolist() == [starts[f] for f in arrays["fold"]]
    paths = t.market.returns_next.numpy()
    for p in range(P):
        lo = arrays["window_start"][p]
        np.testing.assert_array_equal(arrays["asset"][p], paths[arrays["path"][p], lo : lo + T])


def test_baselines_and_the_fold_table_are_per_fold(fold_run):
    t, _ = fold_run
    b = t.baselines()
    table = t.fold_table()
    assert table["fold"].tolist() == [0, 1, 2] and (table["val_end"] - table["val_start"] == 60).all()
    assert (table["val_start"] - table["train_end"] == 2).all() and table["test_start"].nunique() == 1
    assert set(b["fold"]) == {0, 1, 2} and len(b) == 3 * 2 * 3 * 2  # folds x segments x baselines x paths
    val = b[(b["segment"] == "val") & (b["baseline"] == "buy_and_hold") & (b["path"] == 0)]
    assert val["sharpe"].nunique() == 3  # three validation windows
    test = b[(b["segment"] == "test") & (b["baseline"] == "buy_and_hold") & (b["path"] == 0)]
    assert test["sharpe"].nunique() == 1  # one test segment


def test_designed_gains_pair_members_within_a_fold():
    from tune_gems.design.arm_sets import paired_gains

    # proposal - control at each (fold, seed index): fold-blind pairing would mix folds
    arm_of = ["proposal", "proposal", "control", "control"] * 2
    fold_major_key = [0, 1, 0, 1, 2, 3, 2, 3]  # fold * S + seed index, as Trainer._gains builds it
    values = np.array([1.0, 2.0, 0.0, 0.0, 5.0, 7.0, 1.0, 1.0])
    g = paired_gains((), arm_of, fold_major_key, values, values)
    assert g["val_sharpe_gain"] == pytest.approx(np.mean([1, 2, 4, 6]))


def test_a_checkpoint_written_before_folds_existed_resumes_and_one_with_other_folds_is_refused(tmp_path):
    from tune_gems.contracts.errors import CheckpointError
    from tune_gems.trainer import checkpoint as ckpt

    cfg = tiny_config("trainer.epochs=2", "trainer.iterations_per_epoch=2")
    t = Trainer(cfg, log=None)
    t.run_epoch()
    state, meta = t.checkpoint_payload()
    old = dict(meta, config={**meta["config"], "data": {k: v for k, v in meta["config"]["data"].items() if k != "folds"}})
    old["config"]["data"]["synthetic"] = {k: v for k, v in old["config"]["data"]["synthetic"].items() if k != "edge_periods"}
    ckpt.save(tmp_path / "old.pt", state, old)
    resumed = Trainer(cfg, log=None)
    resumed.load_checkpoint(tmp_path / "old.pt")  # the keys it lacks hold their defaults here
    assert resumed.epoch == 1
    with pytest.raises(CheckpointError, match=r"written with data\.folds\.k=None, this run has data\.folds\.k=2$"):
        Trainer(tiny_config("trainer.epochs=2", "data.folds.k=2"), log=None).load_checkpoint(tmp_path / "old.pt")


def test_a_run_with_folds_resumes_from_its_checkpoint_bit_for_bit(tmp_path):
    from learner_fixtures import assert_same_run, full_and_resumed

    cfg = tiny_config("trainer.epochs=2", "trainer.iterations_per_epoch=3", "trainer.population=2", *FOLDS)
    full, resumed = full_and_resumed(cfg, tmp_path / "ck.pt")
    assert_same_run(full, resumed)
    for k, v in full.window.arrays().items():
        assert np.array_equal(v, resumed.window.arrays()[k]), k


def test_the_memory_check_counts_every_fold():
    from tune_gems.design.resources import default_members, estimate_memory

    cfg = tiny_config("trainer.population=2", "arms.factors.gems.g10.mode=[measure,wire]", *FOLDS)
    assert default_members(cfg) == 3 * 2 * 2
    assert estimate_memory(cfg).members == 12
