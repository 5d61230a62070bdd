"""Several price histories end to end (issue 37 item 3), through the CLI's `main` on small data:
`tune-gems train` with two histories writes every result file with the history in it, bad
histories stop it with one line and nothing written, a sweep and its confirmation's trials
write the history of every member and the history table, and the shipped factorial's dry run
passes on the CPU."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from learner_fixtures import TINY
from sweep_fixtures import REPO, SMOKE, TINY_SWEEP, cli_in_process, ray_address  # noqa: F401 (fixture)
from tune_gems.data.histories import HISTORY_TABLE_COLUMNS
from tune_gems.stats.metrics import FOLD_METRICS, MEMBER_IDS

pytestmark = pytest.mark.slow

DAILY = REPO / "examples" / "daily_closes.csv"
FACTORIAL = REPO / "sweeps" / "histories_factorial.yaml"
FACTORIAL_CPU = REPO / "sweeps" / "histories_factorial_cpu.yaml"
FOLDS = ["data.folds.k=2", "data.folds.val_length=60"]


@pytest.fixture(scope="module")
def daily(tmp_path_factory) -> Path:
    """The first 900 days of the shipped three-history file (S&P 500, NASDAQ, WTI)."""
    path = tmp_path_factory.mktemp("data") / "daily.csv"
    pd.read_csv(DAILY).head(900).to_csv(path, index=False)
    return path


def two_histories(daily: Path) -> list[str]:
    return ["data.source=file", f"data.path={daily}", "data.time_column=date", "data.price_columns=[sp500,wti]"]


def test_train_with_two_histories_writes_the_history_into_every_result_file(tmp_path, daily):
    out = tmp_path / "run"
    tiny = [x for x in TINY if not x.startswith("data.synthetic")]
    res = cli_in_process("train", *tiny, "trainer.population=2", "trainer.epochs=2", *two_histories(daily), *FOLDS, "--out", str(out))
    assert res.returncode == 0, res.stderr[-3000:]
    assert "histories=2 folds=2 members=8" in res.stdout
    assert f"tune-gems train: data: {daily}, 2 histories on one calendar, 900 rows each: sp500 (price column 'sp500') | wti (price column 'wti')" in res.stdout  # noqa: E501
    diag = [line for line in res.stdout.splitlines() if line.startswith("HEALTH_DIAG")]
    assert len(diag) == 2 and all(" folds [sp500/0: vs=" in line and " | wti/1: vs=" in line for line in diag)
    histories = pd.read_csv(out / "histories.csv")
    assert tuple(histories.columns) == HISTORY_TABLE_COLUMNS and histories["name"].tolist() == ["sp500", "wti"]
    assert histories["rows"].tolist() == [900, 900] and histories["first"].tolist() == ["1999-01-04"] * 2
    members = pd.read_csv(out / "members.csv")
    assert list(members.columns[: len(MEMBER_IDS)]) == list(MEMBER_IDS)
    last = members[members["epoch"] == 2]
    assert last["history"].tolist() == [0] * 4 + [1] * 4 and last["fold"].tolist() == [0, 0, 1, 1] * 2
    history = pd.read_csv(out / "history.csv")
    assert all(f"{m}@history{h}" in history.columns and f"{m}@history{h}.fold1" in history.columns
               for m in FOLD_METRICS for h in range(2))  # fmt: skip
    baselines = pd.read_csv(out / "baselines.csv")
    assert sorted(set(baselines["history"])) == [0, 1] and (baselines["history"] == baselines["path"]).all()
    with np.load(out / "eval_returns.npz") as z:
        assert z["history"].tolist() == [0] * 4 + [1] * 4
    assert pd.read_csv(out / "folds.csv")["fold"].tolist() == [0, 1]


def test_train_dry_run_counts_the_histories_in_the_members(tmp_path, daily):
    res = cli_in_process("train", *[x for x in TINY if not x.startswith("data.synthetic")], *two_histories(daily), *FOLDS,
                         "--dry-run", "--out", str(tmp_path / "run"))  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    assert "members: 2 histories x 2 fold(s) x 1 arm(s) x 3 seed(s) = 12 (default)" in res.stdout.splitlines()
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("case", ["calendar", "constant"])
def test_bad_histories_stop_train_with_one_line_and_write_nothing(tmp_path, daily, case):
    frame = pd.read_csv(daily)
    if case == "calendar":  # a second file with one day missing: a row fewer
        frame.drop(index=10)[["date", "wti"]].to_csv(tmp_path / "oil.csv", index=False)
        data = [f"data.histories=[{{path: {daily}, price_column: sp500}}, {{path: {tmp_path / 'oil.csv'}, price_column: wti}}]"]
        want = (f"data.histories: history 'oil' ({tmp_path / 'oil.csv'}, column 'wti') has 899 rows, history 'daily' 900: "
                "the members put row t of every history side by side, so histories need as many rows; cut the longer ones")
    else:
        frame.assign(wti=30.0).to_csv(tmp_path / "flat.csv", index=False)
        data = [f"data.path={tmp_path / 'flat.csv'}", "data.price_columns=[sp500,wti]"]
        want = f"history 'wti': {tmp_path / 'flat.csv'}: constant price 30 in all 900 rows of column 'wti': not a price series"
    out = tmp_path / "run"
    res = cli_in_process("train", *[x for x in TINY if not x.startswith("data.synthetic")], "data.source=file", *data, "--out",
                         str(out))
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [f"tune-gems: error: {want}"]
    assert not out.exists()


def test_a_sweep_and_its_confirmation_plans_with_two_histories_write_every_members_history(tmp_path, daily, ray_address):
    tiny = [x for x in TINY_SWEEP if not x.startswith(("num_samples", "config.data.synthetic"))]
    res = cli_in_process(
        "sweep", str(SMOKE), "--storage", str(tmp_path), "--name", "histories", "num_samples=2", *tiny,
        *(f"config.{x}" for x in two_histories(daily)), env={"RAY_ADDRESS": ray_address},
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"tune-gems sweep: data: {daily}, 2 histories on one calendar, 900 rows each: " in res.stdout
    exp = tmp_path / "histories"
    members = pd.read_parquet(exp / "members.parquet")
    counts = pd.crosstab(members["trial_id"], members["history"])  # member rows per trial and history
    assert list(counts.columns) == [0, 1] and (counts[0] == counts[1]).all()  # each history: the trial's arms x 2 seeds
    histories = pd.read_parquet(exp / "histories.parquet")
    assert set(histories["trial_id"]) == set(members["trial_id"])
    assert histories.groupby("trial_id")["name"].apply(list).map(lambda n: n == ["sp500", "wti"]).all()
    history = pd.read_parquet(exp / "history.parquet")
    assert {"val_alpha_sharpe_mean@history0", "val_alpha_sharpe_mean@history1"} <= set(history.columns)
    assert history["val_alpha_sharpe_gain"].notna().all()  # designed gains pair within each history
    # the confirmation's plans (what `tune-gems confirm` trains once the search's analysis has chosen): the
    # discovery's histories
    from tune_gems.commands.confirm_plan import plan_confirmation
    from tune_gems.sweep.spec_load import load_spec

    spec = load_spec(exp / "spec.yaml", [])
    plans, _notes, build = plan_confirmation(spec, pd.read_parquet(exp / "trials.parquet"), members, ["g6", "g10", "g12"])
    if not plans:  # no trial wired a gem: nothing to confirm
        return
    assert build(plans[0]).data.price_columns == ["sp500", "wti"]
    # and the real command: the search analysed per history, then confirmed once on the same two histories,
    # its tables keying every member's history
    res = cli_in_process("analyze", str(exp), "--out", str(tmp_path / "analysis"), "--no-plots")  # tables: the claim
    assert res.returncode == 0, res.stderr[-3000:]
    res = cli_in_process("confirm", str(exp), "--out", str(tmp_path / "confirmation"))
    assert res.returncode == 0, res.stderr[-3000:]
    assert "the search's 2 price histories (sp500, wti): the confirmation has fresh seeds on the same histories" in res.stdout
    confirmed = pd.read_parquet(tmp_path / "confirmation" / "members.parquet")
    assert set(confirmed["history"]) == {0, 1}
    assert pd.read_parquet(tmp_path / "confirmation" / "histories.parquet")["name"].drop_duplicates().tolist() == ["sp500", "wti"]
    confirmed_history = pd.read_parquet(tmp_path / "confirmation" / "history.parquet")
    assert {"val_alpha_sharpe_mean@history0", "val_alpha_sharpe_mean@history1"} <= set(confirmed_history.columns)
    verdicts = pd.read_csv(tmp_path / "confirmation" / "verdicts.csv")
    paired = verdicts[verdicts["n_seeds"] > 0]
    assert len(paired) and (paired["histories"] == 2).all()
    assert paired["reason"].str.contains("over 2 histories x 1 fold ").all(), paired["reason"].tolist()  # no folds here


def test_a_two_history_factorial_is_analysed_and_planned_per_history(tmp_path, daily, ray_address):
    """The shipped CPU factorial on two of its histories, at test size: analyze decides each contrast
    by the nested rule over the histories (too few to pool: it says so), every table keys the history,
    and plan prices designs with histories."""
    res = cli_in_process("sweep", str(FACTORIAL_CPU), "--storage", str(tmp_path), "--name", "factorial", f"config.data.path={daily}",
              "config.data.price_columns=[sp500,wti]", "config.data.folds.val_length=60", "config.trainer.population=6",
              "config.env.window=8", "config.env.episode_length=32", "config.trainer.iterations_per_epoch=20",
              "config.trainer.learning_starts=16", env={"RAY_ADDRESS": ray_address})
    assert res.returncode == 0, res.stderr[-3000:]
    exp, out = tmp_path / "factorial", tmp_path / "analysis"
    res = cli_in_process("analyze", str(exp), "--out", str(out), "--no-plots")  # tables and lines: the claim
    assert res.returncode == 0, res.stderr[-3000:]
    assert "    per history, folds 0/1: sp500 " in res.stdout  # each history's effects, by name, under its verdict
    g6 = pd.read_csv(out / "verdicts.csv").set_index("gem").loc["g6"]
    assert g6["histories"] == 2 and g6["folds"] == 2 and g6["verdict"] == "insufficient data"
    assert g6["reason"].startswith("too few periods over 2 histories x 2 folds (2 histories with an effect, need >= 3")
    assert "wti fold 1: " in g6["fold_effects"] and np.isfinite(g6["mde"])
    factors = pd.read_csv(out / "factors.csv")
    mains = factors[factors["kind"] != "interaction"]
    assert mains["fold_effects"].str.contains("sp500 fold 0: ").any()
    folds = pd.read_csv(out / "fold_effects.csv")
    assert sorted(set(zip(folds["history"], folds["history_name"], folds["fold"]))) == [
        (0, "sp500", 0), (0, "sp500", 1), (1, "wti", 0), (1, "wti", 1)]
    pairs = pd.read_csv(out / "paired_seeds.csv")
    assert dict(zip(pairs["history"], pairs["history_name"])) == {0: "sp500", 1: "wti"}
    res = cli_in_process("plan", str(exp))
    assert res.returncode == 0, res.stderr[-3000:]
    assert "2 price histories (sp500, wti) x 2 period(s) x 6 seeds x 8 arms" in res.stdout
    assert any(line.split()[:3] == ["histories", "calendars", "periods"] for line in res.stdout.splitlines())
    assert "the pilot (analyze's MDE); the rule refuses it: fewer than 3 histories" in res.stdout


def test_the_shipped_factorial_dry_runs_on_the_cpu_and_its_cpu_twin_is_the_same_design():
    res = cli_in_process("sweep", str(FACTORIAL), "--dry-run")
    assert res.returncode == 0, res.stderr[-3000:]
    lines = res.stdout.splitlines()
    assert any(x.startswith("widest trial: 3 histories x 2 fold(s) x 8 arm(s) x 16 seed(s) = 768 ") for x in lines)
    assert any(x.startswith("tune-gems sweep: data: ") and "3 histories on one calendar, 5012 rows each" in x for x in lines)
    gpu, cpu = (yaml.safe_load(p.read_text()) for p in (FACTORIAL, FACTORIAL_CPU))
    assert gpu["config"]["data"] == cpu["config"]["data"] and gpu["config"]["arms"] == cpu["config"]["arms"]
    assert gpu["config"]["gems"] == cpu["config"]["gems"] and gpu["objective"] == cpu["objective"]
    res = cli_in_process("sweep", str(FACTORIAL_CPU), "--dry-run")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "widest trial: 3 histories x 2 fold(s) x 8 arm(s) x 2 seed(s) = 96 " in res.stdout and "time: about " in res.stdout
