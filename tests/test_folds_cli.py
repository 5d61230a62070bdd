"""Walk-forward folds end to end (issue 20): `tune-gems train data.folds.k=3 ...` and a sweep
with folds, through the CLI's `main` on small data (the sweeps join this module's Ray)."""

from __future__ import annotations

import pandas as pd
import pytest

from learner_fixtures import TINY
from sweep_fixtures import SMOKE, TINY_SWEEP, cli_in_process, ray_address  # noqa: F401 (fixture)
from tune_gems.data.segments import FOLD_TABLE_COLUMNS
from tune_gems.stats.metrics import FOLD_METRICS, MEMBER_IDS

pytestmark = pytest.mark.slow

FOLDS = ["data.folds.k=3", "data.folds.val_length=60"]


def test_train_with_three_folds_writes_folds_members_and_per_fold_history(tmp_path):
    out = tmp_path / "run"
    res = cli_in_process("train", *TINY, "trainer.population=2", "trainer.epochs=2", *FOLDS, "--out", str(out))
    assert res.returncode == 0, res.stderr[-3000:]
    assert "folds=3 members=6" in res.stdout
    diag = [line for line in res.stdout.splitlines() if line.startswith("HEALTH_DIAG")]
    assert len(diag) == 2 and all(" folds [0: vs=" in line and " | 2: vs=" in line for line in diag)
    folds = pd.read_csv(out / "folds.csv")
    assert tuple(folds.columns) == FOLD_TABLE_COLUMNS and folds["fold"].tolist() == [0, 1, 2]
    assert (folds["val_end"] - folds["val_start"]).tolist() == [60, 60, 60]
    members = pd.read_csv(out / "members.csv")
    assert list(members.columns[: len(MEMBER_IDS)]) == list(MEMBER_IDS)
    assert sorted(members.groupby("fold")["member"].apply(list).tolist()) == [[0, 1] * 2, [2, 3] * 2, [4, 5] * 2]
    history = pd.read_csv(out / "history.csv")
    assert all(f"{m}@fold{k}" in history.columns for m in FOLD_METRICS for k in range(3))
    assert history["test_sharpe_mean@fold2"].notna().tolist() == [False, True]
    baselines = pd.read_csv(out / "baselines.csv")
    assert sorted(set(baselines["fold"])) == [0, 1, 2]


def test_folds_that_do_not_fit_stop_train_with_one_line_and_write_nothing(tmp_path):
    out = tmp_path / "run"
    res = cli_in_process("train", *TINY, "data.folds.k=20", "--out", str(out))
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        "tune-gems: error: data.folds: 20 validation window(s) of 135 rows and a gap of 0 before the test segment "
        "(which starts at row 765) leave fold 0 0 training rows; need at least min_len=10"
    ]
    assert not out.exists()


def test_a_sweep_with_folds_writes_the_fold_of_every_member_and_a_fold_table(tmp_path, ray_address):
    tiny = [x for x in TINY_SWEEP if not x.startswith("num_samples")]
    res = cli_in_process(
        "sweep", str(SMOKE), "--storage", str(tmp_path), "--name", "folds", "num_samples=2", *tiny,
        "config.data.folds.k=2", "config.data.folds.val_length=60", env={"RAY_ADDRESS": ray_address},
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    exp = tmp_path / "folds"
    members = pd.read_parquet(exp / "members.parquet")
    assert set(members["fold"]) == {0, 1}
    per_trial = members[members["epoch"] == 2].groupby(["trial_id", "fold"]).size()
    assert (per_trial.groupby("trial_id").nunique() == 1).all()  # each fold has the trial's arms x 2 seeds
    folds = pd.read_parquet(exp / "folds.parquet")
    assert set(folds["trial_id"]) == set(members["trial_id"]) and folds.groupby("trial_id")["fold"].apply(list).map(lambda f: f == [0, 1]).all()
    history = pd.read_parquet(exp / "history.parquet")
    assert {"val_alpha_sharpe_mean@fold0", "val_alpha_sharpe_mean@fold1"} <= set(history.columns)
    assert history["val_alpha_sharpe_gain"].notna().all()  # designed gains pair within each fold
    # issue 21: the confirmation re-tests a choice on the same folds (fresh seeds and paths)
    trials = pd.read_parquet(exp / "trials.parquet")
    wired = trials[[c for c in trials.columns if c.startswith("gems.") and c.endswith(".mode")]].eq("wire").any(axis=None)
    conf = cli_in_process("confirm", str(exp), env={"RAY_ADDRESS": ray_address})
    if not wired:  # nothing to confirm: one line, exit 2
        assert conf.returncode == 2 and "nothing to confirm" in conf.stderr
        return
    assert conf.returncode == 0, conf.stderr[-3000:]
    cm = pd.read_parquet(exp / "confirmation" / "members.parquet")
    assert set(cm["fold"]) == {0, 1}
    assert (pd.read_parquet(exp / "confirmation" / "trials.parquet")["data.folds.k"] == 2).all()
    v = pd.read_csv(exp / "confirmation" / "verdicts.csv").set_index("gem")
    confirmed = pd.read_csv(exp / "confirmation" / "confirmation.csv", keep_default_na=False)
    for gem in confirmed.loc[confirmed["chosen_trial"] != "", "gem"]:
        assert v.loc[gem, "folds"] == 2  # the final verdict is over the same two periods
