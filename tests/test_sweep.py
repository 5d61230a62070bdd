"""Sweeps on a real (local) Ray instance: the smoke sweep through the CLI, the result tables,
the persisted Optuna study, and spec validation before Ray starts."""

from __future__ import annotations

import json
import math

import optuna
import numpy as np
import pandas as pd
import pytest

from sweep_fixtures import SMOKE, TINY_SWEEP, cli, cli_in_process, ray_address  # noqa: F401 (fixture)
from tune_gems.contracts.errors import ConfigError, OutputExistsError
from tune_gems.stats.metrics import EPOCH_METRICS, MEMBER_IDS, MEMBER_METRICS
from tune_gems.sweep.driver import run_sweep
from tune_gems.sweep.search import JOURNAL_FILE, journal_storage
from tune_gems.sweep.spec_load import load_spec

pytestmark = pytest.mark.slow


def _tables(exp):
    return {n: pd.read_parquet(exp / f"{n}.parquet") for n in ("trials", "history", "members")}


def test_smoke_sweep_end_to_end_through_the_cli(tmp_path, ray_address):
    """The README's main job, shrunk: `tune-gems sweep sweeps/smoke.yaml` as a process of its own,
    joining the running Ray instance through RAY_ADDRESS (its console is Ray's workers' lines),
    then `tune-gems analyze`, `confirm` and `compare` on what it wrote (through the CLI's `main`
    in this process: a confirmation trains here, without Ray)."""
    res = cli("sweep", str(SMOKE), "--storage", str(tmp_path), "--name", "smoke", *TINY_SWEEP, env={"RAY_ADDRESS": ray_address})
    assert res.returncode == 0, res.stderr[-3000:]
    exp = tmp_path / "smoke"
    t = _tables(exp)
    n = 4  # num_samples of TINY_SWEEP
    assert len(t["trials"]) == n and set(t["trials"]["status"]) == {"TERMINATED"}
    arms = pd.read_parquet(exp / "arms.parquet")
    n_arms = arms.groupby("trial_id").size()  # the design's arms per trial, 2 seeds each
    assert len(t["history"]) == n * 2 and len(t["members"]) == 2 * 2 * int(n_arms.sum())
    head = ["experiment", "trial_id", "config_label", *EPOCH_METRICS]
    cols = list(t["history"].columns)
    assert cols[: len(head)] == head  # then the design's per-arm and gain columns (union over trials)
    assert all("@" in c or "gain" in c for c in cols[len(head):]) and "val_sharpe_gain" in cols
    assert list(t["members"].columns) == ["experiment", "trial_id", "config_label", *MEMBER_IDS, *MEMBER_METRICS]
    assert {"control", "proposal"} <= set(t["members"]["arm"])  # smoke.yaml's wire_search design
    assert set(arms["trial_id"]) == set(t["trials"]["trial_id"]) and (exp / "gems.json").is_file()
    settings = [c for c in arms.columns if c.startswith(("gems.", "model.", "trainer."))]
    assert not arms.duplicated(subset=["trial_id", *settings]).any()  # the design never trains two identical arms
    assert (exp / "baselines.parquet").is_file()
    for col in ("gems.g6.mode", "gems.g6.weight", "gems.g10.mode", "gems.g12.mode", "model.spectral_norm", "objective",
                "objective_se", "objective_df"):
        assert col in t["trials"].columns
    df, se = t["trials"]["objective_df"], t["trials"]["objective_se"]
    # verdict_gain: its informative pairs less one (none where every pair ties: 2 tiny seeds may)
    assert df.notna().any() and ((df >= 0) | df.isna()).all() and (df[se.notna()] >= 1).all()
    assert t["history"].groupby("trial_id")["epoch"].apply(list).map(lambda e: e == [1, 2]).all()
    assert t["history"]["test_sharpe_mean"].notna().sum() == n  # the final epoch only
    assert f"results: {exp}" in res.stdout and "analyze:" in res.stdout
    # the console: every HEALTH_DIAG line (trials x epochs), each prefixed with its own trial id,
    # none merged by Ray; one status line per finished trial; no Ray result dumps
    ids = list(t["trials"]["trial_id"])
    diag = [line for line in res.stdout.splitlines() if " HEALTH_DIAG epoch=" in line]
    assert sorted(line[1:line.index("]")] for line in diag) == sorted(ids * 2), res.stdout[-3000:]
    assert all(line.startswith(f"[{line[1:line.index(']')]}] HEALTH_DIAG") for line in diag)
    assert "repeated" not in res.stdout and "completed after" not in res.stdout
    status = [line for line in res.stdout.splitlines() if " finished: " in line and line.startswith("tune-gems sweep: trial ")]
    assert [line.split()[3] for line in status] == [f"{k}/{n}" for k in range(1, n + 1)]
    assert all("objective verdict_gain=" in line and "| best " in line and "ETA" in line for line in status)
    _check_console_and_labels(res.stdout + res.stderr, exp, t, arms)
    _check_trial_files(exp, t)

    study = optuna.load_study(study_name="smoke", storage=journal_storage(exp / JOURNAL_FILE))
    assert len(study.trials) == n
    # the study is named and joins trials.parquet: metric name, Tune trial id, label, metrics
    assert study.metric_names == ["verdict_gain"]
    by_id = t["trials"].set_index("trial_id")
    for tr in study.trials:
        tid = tr.user_attrs["tune_trial_id"]
        assert by_id.loc[tid, "optuna_trial"] == tr.number
        assert tr.user_attrs["config_label"] == by_id.loc[tid, "config_label"]
        assert tr.user_attrs["val_sharpe_mean"] == pytest.approx(by_id.loc[tid, "val_sharpe_mean"])
        for key in ("objective_se", "objective_df"):  # the objective's noise, for a sampler that weighs trials
            value = float(by_id.loc[tid, key])
            assert tr.user_attrs[key] == pytest.approx(value) if math.isfinite(value) else key not in tr.user_attrs
    assert all(tr.state == optuna.trial.TrialState.COMPLETE for tr in study.trials)
    # define-by-run: a weight exists exactly where its gem is wired, and matches the trial config
    trials = t["trials"].set_index("seed")
    for tr in study.trials:
        row = trials.loc[tr.number]  # per_trial seeds: seed = 0 + trial number
        for g in ("g6", "g10", "g12"):
            mode = tr.params[f"gems.{g}.mode"]
            assert row[f"gems.{g}.mode"] == mode
            assert (f"gems.{g}.weight" in tr.params) == (mode == "wire")
            if mode == "wire":
                assert row[f"gems.{g}.weight"] == pytest.approx(tr.params[f"gems.{g}.weight"])

    ana = cli_in_process("analyze", str(exp))
    assert ana.returncode == 0, ana.stderr[-2000:]
    assert "verdict" in ana.stdout and (exp / "analysis" / "report.md").is_file()
    # the standing against the baselines opens the console output and the report
    assert ana.stdout.startswith("against the baselines (test_alpha_sharpe at the final epoch against flat (0)")
    assert (exp / "analysis" / "report.md").read_text().splitlines()[2].startswith("Against the baselines (test_alpha_sharpe")
    _check_confirm(exp, t)
    _check_confirmation_tables(exp)
    _check_result_grid(exp)


def _check_trial_files(exp, t):
    """Issue 40: Tune's reports (result.json, every logger) carry the epoch's scalars, the member
    rows and the baselines and folds tables go to each trial's own folder, and members.parquet
    read back from them equals an uninterrupted run of each trial's config, bit for bit; a
    finished trial's final checkpoint holds no training state."""
    from cluster_fixtures import assert_trial_matches_uninterrupted, result_rows
    from tune_gems.sweep.trainable import FINAL_MARK

    rows = result_rows(exp)
    assert len(rows) == len(t["history"]) and not {"members_json", "baselines_json", "folds_json"} & set().union(*rows)
    for tid in t["trials"]["trial_id"]:
        folder = next(exp.glob(f"train_trial_{tid}_*"))
        assert sorted(p.name for p in (folder / "members").iterdir()) == ["epoch-000001.json", "epoch-000002.json"]
        assert (folder / "baselines.json").is_file() and (folder / "folds.json").is_file()
        final = sorted(folder.glob("checkpoint_*"))[-1]
        assert (final / FINAL_MARK).is_file() and not (final / "checkpoint.pt").exists()
        assert_trial_matches_uninterrupted(exp, tid)


def _check_console_and_labels(shown: str, exp, t, arms):
    """Issue 31 on the smoke sweep: the closing table's best objective first, labels naming each
    arm's own settings, one TensorBoard run per trial id, no Ray start-up notice or reporter box."""
    from tune_gems.contracts.config_label import arm_label

    lines = shown.splitlines()
    head = next(i for i, line in enumerate(lines) if line.split()[:2] == ["trial_id", "status"])
    order = [line.split()[0] for line in lines[head + 1:head + 1 + len(t["trials"])]]
    best_first = t["trials"].assign(_key=-t["trials"]["objective"]).sort_values(["_key", "trial_id"], kind="stable")
    assert order == list(best_first["trial_id"])  # equal objectives (a tiny sweep's 0.000s) by trial id
    for (tid, arm), m in t["members"].groupby(["trial_id", "arm"]):
        row = arms[(arms["trial_id"] == tid) & (arms["arm"] == arm)].iloc[0].to_dict()
        base = "g6=measure g10=measure g12=measure sn=on noisy=on"
        assert set(m["config_label"]) == {arm_label(base, row)}, (tid, arm)
    from tune_gems.analysis.read.load import load_experiment

    read = load_experiment(exp)  # new results read back as written (older ones get these labels when read)
    assert read.trials.set_index("trial_id")["config_label"].to_dict() == t["trials"].set_index("trial_id")["config_label"].to_dict()
    assert sorted(p.name for p in (exp / "tensorboard").iterdir()) == sorted(t["trials"]["trial_id"])
    for quiet in ("To visualize your results with TensorBoard", "Configuration for experiment",
                  "Token authentication is enabled", "Connecting to existing Ray cluster", "A new study created",
                  "Wrote the latest version"):  # Ray's, Optuna's and Tune's notices: only with --verbose
        assert quiet not in shown


def _check_confirmation_tables(exp):
    """`compare` reads the confirmation folder's settings from its trials table, and its
    analysis draws the shrinkage from confirmation.csv (issue 31 items 4 and 6)."""
    res = cli_in_process("compare", str(exp), str(exp / "confirmation"))
    assert res.returncode == 0, res.stderr[-2000:]
    differ = [line for line in res.stdout.splitlines() if line.startswith("  config.")]
    assert differ and not [line for line in differ if line.endswith("confirmation=-")], res.stdout[:3000]
    ana = cli_in_process("analyze", str(exp / "confirmation"))
    assert ana.returncode == 0, ana.stderr[-2000:]
    assert (exp / "confirmation" / "analysis" / "confirmation_shrinkage.png").is_file()


def _check_result_grid(exp):
    """The recipe of docs/workflow.md ("Tune's own results") runs as written on the smoke
    experiment: a ResultGrid from ExperimentAnalysis with an absolute path, no Ray, no trainable."""
    import re
    import subprocess
    import sys

    from sweep_fixtures import REPO

    doc = (REPO / "docs" / "workflow.md").read_text()
    code = re.search(r"<!-- recipe: result-grid -->\n```python\n(.*?)```", doc, re.S).group(1)
    code = code.replace('EXPERIMENT = "experiments/smoke"', f'EXPERIMENT = "{exp.name}"')
    res = subprocess.run([sys.executable, "-c", code], cwd=exp.parent, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    trials = pd.read_parquet(exp / "trials.parquet")
    best = trials.loc[trials["objective"].idxmax()]
    assert f"{len(trials)} trials, best {best['trial_id']}" in res.stdout, res.stdout


def _check_confirm(exp, t):
    """Issue 21 on the smoke sweep: Optuna was told the verdict's statistic, and `tune-gems
    confirm` re-runs each gem's best trial once on fresh member seeds and fresh paths."""
    trials = t["trials"]
    np.testing.assert_array_equal(trials["objective"].to_numpy(float), trials["verdict_gain"].to_numpy(float))
    res = cli_in_process("confirm", str(exp))
    assert res.returncode == 0, res.stderr[-2000:]
    assert "final verdict" in res.stdout and "shrinkage" in res.stdout
    diag = [line for line in res.stdout.splitlines() if line.startswith("HEALTH_DIAG ")]
    assert diag and all(" arms [" not in line and " arms=" in line for line in diag)  # the sweep's short line, no per-arm tail
    out = exp / "confirmation"
    table = pd.read_csv(out / "confirmation.csv", keep_default_na=False)
    ct = pd.read_parquet(out / "trials.parquet")
    cm = pd.read_parquet(out / "members.parquet")
    chosen = table[table["chosen_trial"] != ""]
    assert len(chosen) == len(ct) >= 1 and (out / "report.md").is_file()
    for _, r in chosen.iterrows():  # the chosen trial's gem settings, re-run
        mine = ct.set_index("trial_id").loc[f"confirm-{r['gem']}"]
        disc = trials.set_index("trial_id").loc[r["chosen_trial"]]
        for g in ("g6", "g10", "g12"):
            assert mine[f"gems.{g}.mode"] == disc[f"gems.{g}.mode"]
        assert float(r["discovery_gain"]) == pytest.approx(float(disc[f"verdict_gain_{r['gem']}"]))
        assert r["final_verdict"] == r["confirmation_verdict"]
    assert not set(cm["seed"]) & set(t["members"]["seed"])  # fresh member seeds

    def paths(tr, m):
        return set(m.merge(tr[["trial_id", "data.synthetic.seed"]], on="trial_id")
                   .eval("`data.synthetic.seed` + seed_index").astype(int))

    assert not paths(ct, cm) & paths(trials, t["members"])  # fresh synthetic paths
    assert not set(cm["seed_index"]) & set(t["members"]["seed_index"])  # fresh seed indices
    arms = pd.read_parquet(out / "arms.parquet")
    for gem in chosen["gem"]:  # each trial compares its gem alone: the proposal and it measured
        mine = arms[arms["trial_id"] == f"confirm-{gem}"].set_index("arm")
        assert list(mine.index) == ["proposal", "control"] and mine.loc["control", "also_named"] == f"without-{gem}"
        others = [c for c in mine.columns if c.startswith("gems.") and c.endswith(".mode") and c != f"gems.{gem}.mode"]
        assert (mine.loc["proposal", others] == mine.loc["control", others]).all()
        assert mine.loc["control", f"gems.{gem}.mode"] == "measure" != mine.loc["proposal", f"gems.{gem}.mode"]
    record = json.loads((exp / "confirmed.json").read_text())
    assert record["status"] == "done" and set(record["trials"]) == set(chosen["gem"])
    for again in (cli_in_process("confirm", str(exp)),
                  cli_in_process("confirm", str(exp), "--out", str(exp.parent / "elsewhere"))):
        # the search is confirmed once, whatever the output folder
        assert again.returncode == 2 and "confirmed already" in again.stderr and again.stderr.count("\n") == 1
    assert not (exp.parent / "elsewhere").exists()


def test_sweep_refuses_an_existing_experiment_and_writes_nothing(tmp_path, ray_address):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "keep.txt").write_text("earlier results")
    with pytest.raises(OutputExistsError, match="taken"):
        run_sweep(SMOKE, TINY_SWEEP, storage=str(tmp_path), name="taken")
    assert [p.name for p in (tmp_path / "taken").iterdir()] == ["keep.txt"]


def test_relative_storage_is_refused_inside_a_ray_job(tmp_path, monkeypatch):
    """Inside `ray job submit` the working directory is Ray's temporary copy of the upload."""
    monkeypatch.setenv("RAY_JOB_CONFIG_JSON_ENV_VAR", "{}")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="storage: 'experiments' is relative"):
        run_sweep(SMOKE, TINY_SWEEP)
    assert list(tmp_path.iterdir()) == []


def test_common_seeds_give_members_identical_seeds_across_trials(tmp_path, ray_address):
    out = run_sweep(SMOKE, [*TINY_SWEEP, "num_samples=2", "seeds=common", "config.trainer.epochs=1"], storage=str(tmp_path), name="c")
    # per trial, seed index -> seed (every arm of a trial shares it; the design's arm count varies)
    per_index = out.members.groupby(["trial_id", "seed_index"])["seed"].agg(set)
    assert per_index.map(len).eq(1).all()
    seeds = per_index.map(min).groupby(level="trial_id").apply(tuple)
    assert seeds.nunique() == 1 and len(seeds) == 2


@pytest.mark.parametrize(
    "override, fragment",
    [
        (["bogus=1"], "bogus: unknown key"),
        (["num_samples=zero"], "num_samples"),
        (["num_samples=0"], "num_samples"),
        (["config.trainer.lr=-1"], "trainer.lr"),
        (["config.trainer.typo=3"], "trainer.typo: unknown key"),
        (["search.gems.g7={modes: [wire]}"], "unknown gem 'g7'"),
        (["search.params={trainer.lr: {type: float, low: -1, high: 1}}"], "search.params.trainer.lr"),
        (["search.params={trainer.nope: {type: int, low: 1, high: 3}}"], "search.params.trainer.nope"),
        (["objective.metric=test_sharpe_mean"], "never searched"),
        (["resources.gpu=1.5"], "resources.gpu"),
    ],
)
def test_bad_specs_fail_before_ray_with_one_line(override, fragment):
    with pytest.raises(ConfigError) as e:
        load_spec(SMOKE, override)
    msg = str(e.value)
    assert fragment in msg and "\n" not in msg and str(SMOKE) in msg


def test_cli_bad_spec_exits_2_with_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("num_samples: [1\n")
    res = cli_in_process("sweep", str(bad), "--storage", str(tmp_path))
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1 and "bad.yaml" in res.stderr and "malformed YAML" in res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml"]
