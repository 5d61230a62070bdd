"""Purged cross-validation end to end (issue 30 item 1): `tune-gems train --dry-run` prints the
layout, a bad purged key stops `train` with one line, and the shipped spec
`sweeps/purged_cv.yaml` runs (sweep, then analyze) on its real price file at tiny settings."""

from __future__ import annotations

import pandas as pd
import pytest

from learner_fixtures import TINY
from sweep_fixtures import REPO, cli_in_process, ray_address  # noqa: F401 (fixture)
from tune_gems.design.arms import run_arms
from tune_gems.data.segments import FOLD_TABLE_COLUMNS
from tune_gems.sweep.spec_load import designed_config, load_spec

pytestmark = pytest.mark.slow

SPEC = REPO / "sweeps" / "purged_cv.yaml"
WALK_FORWARD = REPO / "sweeps" / "walk_forward.yaml"
PURGED = ["data.folds.scheme=purged", "data.folds.k=3", "data.folds.embargo=4"]
SMALL = [
    "config.trainer.population=2", "config.trainer.epochs=2", "config.trainer.iterations_per_epoch=3",
    "config.trainer.batch_size=16", "config.trainer.replay_capacity=512", "config.model.hidden=16",
    "config.model.stream_hidden=8", "config.model.atoms=11", "config.model.predictor_hidden=16", "config.device=cpu",
]  # fmt: skip


def test_train_dry_run_prints_the_purged_layout_and_writes_nothing(tmp_path):
    out = tmp_path / "run"
    res = cli_in_process("train", *TINY, *PURGED, "--dry-run", "--out", str(out))
    assert res.returncode == 0, res.stderr[-3000:]
    lines = res.stdout.splitlines()
    assert "members: 3 fold(s) x 1 arm(s) x 3 seed(s) = 9 (default)" in lines
    layout = [x for x in lines if x.startswith("folds: purged cross-validation, 3 group(s) of 252 rows")]
    assert len(layout) == 1 and "less 2 row(s) before the group" in layout[0] and "an embargo of 4" in layout[0]
    split = next(x for x in lines if x.startswith("split: "))
    assert "fold 1: train " in split and " in 2 run(s) (" in split and split.count("validation 252 rows") == 3
    assert not out.exists()


def test_a_walk_forward_key_under_purged_stops_train_with_one_line(tmp_path):
    out = tmp_path / "run"
    res = cli_in_process("train", *TINY, *PURGED, "data.folds.gap=2", "--out", str(out))
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        "tune-gems: error: config: data.folds: data.folds.gap is for scheme walk_forward only "
        "(purged folds drop the purge and data.folds.embargo)"
    ]
    assert not out.exists()


def test_the_shipped_spec_has_six_periods_at_the_training_compute_of_the_walk_forward_spec():
    """Member-iterations (members x epochs x iterations per epoch) within 1% of
    sweeps/walk_forward.yaml's, over 6 periods instead of 4."""

    def design(path):
        cfg = designed_config(load_spec(path), {})
        tc = cfg.trainer
        return cfg.data.folds.k, run_arms(cfg).members * tc.epochs * tc.iterations_per_epoch

    (k_purged, cost_purged), (k_walk, cost_walk) = design(SPEC), design(WALK_FORWARD)
    assert (k_purged, k_walk) == (6, 4) and abs(cost_purged / cost_walk - 1) < 0.01


def test_the_purged_spec_runs_end_to_end_on_its_price_file(tmp_path, ray_address):
    res = cli_in_process("sweep", str(SPEC), "--storage", str(tmp_path), "--name", "purged", *SMALL, env={"RAY_ADDRESS": ray_address})
    assert res.returncode == 0, res.stderr[-3000:]
    assert "folds: purged cross-validation, 6 group(s) of 710 rows" in res.stdout
    exp = tmp_path / "purged"
    folds = pd.read_parquet(exp / "folds.parquet")
    assert set(FOLD_TABLE_COLUMNS) <= set(folds.columns) and folds["fold"].tolist() == list(range(6))
    assert folds["scheme"].eq("purged").all() and folds["group_rows"].eq(710).all() and folds["embargo"].eq(5).all()
    assert folds["train_runs"].str.count(":").tolist() == [1, 2, 2, 2, 2, 1]
    members = pd.read_parquet(exp / "members.parquet")
    assert sorted(set(members["fold"])) == list(range(6))
    assert (members[members["epoch"] == 2].groupby("fold").size() == 2 * 2).all()  # 2 arms x 2 seeds per fold
    ana = cli_in_process("analyze", str(exp), "--no-plots")  # the tables are the claim (plots: test_plots_drawn)
    assert ana.returncode == 0, ana.stderr[-3000:]
    verdicts = pd.read_csv(exp / "analysis" / "verdicts.csv").set_index("gem")
    assert verdicts.loc["g6", "folds"] == 6
