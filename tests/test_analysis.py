"""Tests of tune_gems.analysis on synthetic experiment folders with known answers (CPU, no Ray)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fake_results as fr  # noqa: E402

from tune_gems.analysis import (  # noqa: E402
    bootstrap_diff_ci,
    final_members,
    format_verdict_table,
    gem_magnitudes,
    gem_trajectories,
    gem_verdicts,
    iqm,
    load_experiment,
    paired_bootstrap_ci,
    param_importances,
    run_analysis,
    sharpe_variance,
    stratified_bootstrap_ci,
    trial_outcomes,
)
from tune_gems.analysis.scripts import report_main, verdicts_main  # noqa: E402
from tune_gems.errors import DataError, OutputExistsError  # noqa: E402

M_LABEL = "g6=measure g10=measure g12=measure sn=on noisy=on"
W_LABEL = "g6=measure g10=measure g12=wire sn=on noisy=on"
FAST = dict(n_boot=500)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("exps")


@pytest.fixture(scope="module")
def helps(root):
    return fr.paired_scenario(root / "helps", shift=2.0)


@pytest.fixture(scope="module")
def no_help(root):
    return fr.paired_scenario(root / "no_help", shift=0.0, g6="off")


def verdict_of(df: pd.DataFrame, gem: str) -> pd.Series:
    return df.set_index("gem").loc[gem]


def verdicts(folder, **kw):
    e = load_experiment(folder)
    return gem_verdicts(e.trials, e.history, e.members, **{**FAST, **kw})


# ---- statistics -------------------------------------------------------------------------------


def test_iqm_known_values():
    assert iqm(np.arange(1, 9)) == pytest.approx(4.5)  # mean of 3, 4, 5, 6
    assert iqm([0, 0, 1, 1, 1, 1, 100, 100]) == pytest.approx(1.0)
    assert iqm([1.0, 2.0, 6.0]) == pytest.approx(3.0)  # n < 4: nothing trimmed
    assert iqm([np.nan, 1.0, 3.0]) == pytest.approx(2.0)
    assert math.isnan(iqm([]))
    rng = np.random.default_rng(1)
    for n in (4, 5, 7, 10, 33):
        x = rng.standard_t(2, n)
        assert iqm(x) == pytest.approx(sps.trim_mean(x, 0.25))


def test_stratified_bootstrap_ci_contains_true_mean_and_is_seeded():
    rng = np.random.default_rng(3)
    groups = [rng.normal(5.0, 1.0, 8) for _ in range(10)]
    est, lo, hi = stratified_bootstrap_ci(groups, n_boot=1000, seed=0)
    assert lo < 5.0 < hi
    assert lo < est < hi
    assert stratified_bootstrap_ci(groups, n_boot=1000, seed=0) == (est, lo, hi)
    assert stratified_bootstrap_ci(groups, n_boot=1000, seed=1) != (est, lo, hi)
    wide = stratified_bootstrap_ci(groups, n_boot=1000, seed=0, confidence=0.99)
    assert wide[1] <= lo and wide[2] >= hi
    assert all(math.isnan(v) for v in stratified_bootstrap_ci([[1.0]])[1:])


def test_paired_and_diff_intervals():
    d = np.array([1.9, 2.1] * 6)
    mean, lo, hi = paired_bootstrap_ci(d, n_boot=500, seed=0)
    assert mean == pytest.approx(2.0) and 1.9 <= lo < 2.0 < hi <= 2.1
    a = [np.full(4, 3.0) + k * 0.01 for k in range(3)]
    b = [np.full(4, 1.0) + k * 0.01 for k in range(3)]
    est, lo, hi = bootstrap_diff_ci(a, b, n_boot=500, seed=0)
    assert est == pytest.approx(2.0) and 1.9 < lo <= hi < 2.1


# ---- loading ----------------------------------------------------------------------------------


def test_load_two_folders(helps, no_help):
    e = load_experiment([helps, no_help])
    assert e.labels == ["helps", "no_help"]
    assert set(e.trials["experiment"]) == {"helps", "no_help"}
    assert len(e.trials) == 16
    assert len(e.members) == len(pd.read_parquet(helps / "members.parquet")) * 2
    assert sorted(e.studies) == ["helps", "no_help"]
    assert e.trials["diverged"].dtype == bool


def test_load_same_name_folders_stay_apart(root):
    a = fr.paired_scenario(root / "x" / "sweep", journal=False)
    b = fr.paired_scenario(root / "y" / "sweep", journal=False)
    e = load_experiment([a, b])
    assert e.labels == ["sweep", "y/sweep"]
    assert e.trials.groupby("experiment").size().to_dict() == {"sweep": 8, "y/sweep": 8}
    assert e.studies == {}


def test_bad_folders_raise_data_error(root, helps):
    with pytest.raises(DataError, match="no such directory"):
        load_experiment(root / "nope")
    empty = root / "empty"
    empty.mkdir()
    with pytest.raises(DataError, match="trials.parquet") as info:
        load_experiment(empty)
    assert "\n" not in str(info.value)
    bad = fr.paired_scenario(root / "corrupt", journal=False)
    (bad / "history.parquet").write_bytes(b"this is not parquet")
    with pytest.raises(DataError, match="history.parquet") as info:
        load_experiment(bad)
    assert "\n" not in str(info.value)
    nocol = fr.paired_scenario(root / "nocol", journal=False)
    pd.read_parquet(nocol / "members.parquet").drop(columns="seed").to_parquet(nocol / "members.parquet")
    with pytest.raises(DataError, match=r"members.parquet: missing column\(s\) seed"):
        load_experiment(nocol)
    badj = fr.paired_scenario(root / "badjournal", journal=False)
    (badj / "optuna_journal.log").write_text("{not json\n" + (helps / "optuna_journal.log").read_text())
    with pytest.raises(DataError, match="optuna_journal.log"):
        load_experiment(badj)


# ---- Sharpe variance, failed and diverged trials -----------------------------------------------


def test_failed_and_diverged_counted_and_excluded(helps):
    e = load_experiment(helps)
    out = trial_outcomes(e.trials, e.members).set_index("trial_id")
    assert out.loc["f1", "outcome"] == "failed" and "out of memory" in out.loc["f1", "reason"]
    assert out.loc["d1", "outcome"] == "diverged" and out.loc["d1", "reason"] == "diverged at epoch 2"
    assert (out.drop(index=["f1", "d1"])["outcome"] == "ok").all()
    fin = final_members(e.members, e.trials)
    assert not fin.loc[fin["trial_id"].isin(["f1", "d1"]), "included"].any()
    sv = sharpe_variance(e.members, e.trials, **FAST).set_index("config_label")
    m = sv.loc[M_LABEL]
    assert (m["n_trials"], m["n_failed"], m["n_diverged"], m["n_members"]) == (3, 1, 1, 12)
    assert sv.loc[W_LABEL, ["n_failed", "n_diverged"]].tolist() == [0, 0]
    assert m["val_sharpe_max"] < 999  # the excluded trials' Sharpe never leaks in
    assert np.isfinite(sv.drop(columns="experiments").to_numpy(float)).all()


def test_sharpe_variance_numbers(helps):
    e = load_experiment(helps)
    sv = sharpe_variance(e.members, e.trials, **FAST).set_index("config_label")
    per_trial = {b: np.array([fr.base_val(b + i) for i in range(fr.P)]) for b in fr.BASE_SEEDS}
    v = np.concatenate(list(per_trial.values()))
    m = sv.loc[M_LABEL]
    assert m["val_sharpe_mean"] == pytest.approx(v.mean())
    assert m["val_sharpe_std"] == pytest.approx(v.std(ddof=1))
    assert m["val_sharpe_var"] == pytest.approx(v.var(ddof=1))
    assert m["val_sharpe_min"] == pytest.approx(v.min())
    assert m["val_sharpe_max"] == pytest.approx(v.max())
    best = [x.max() for x in per_trial.values()]
    assert m["val_sharpe_best_min"] == pytest.approx(min(best))
    assert m["val_sharpe_best_max"] == pytest.approx(max(best))
    assert m["val_sharpe_iqm"] == pytest.approx(sps.trim_mean(v, 0.25))
    assert m["val_sharpe_iqm_ci_low"] < m["val_sharpe_iqm"] < m["val_sharpe_iqm_ci_high"]
    assert m["test_sharpe_mean"] == pytest.approx(v.mean() - 0.5)  # final-epoch test Sharpe
    again = sharpe_variance(e.members, e.trials, **FAST).set_index("config_label")
    pd.testing.assert_frame_equal(sv, again)


def test_unfinished_trial_and_nan_member_are_excluded_and_counted(root):
    trials = [
        fr.FakeTrial("a", {"g12": "measure"}, [1.0, 2.0, 3.0, 4.0]),
        fr.FakeTrial("b", {"g12": "measure"}, [5.0, 6.0, np.nan, 8.0]),
        fr.FakeTrial("c", {"g12": "measure"}, [100.0, 100.0, 100.0, 100.0], status="RUNNING"),
    ]
    e = load_experiment(fr.write_experiment(root / "unfinished", trials, journal=False))
    out = trial_outcomes(e.trials, e.members).set_index("trial_id")
    assert out.loc["c", "outcome"] == "failed" and "not finished" in out.loc["c", "reason"]
    row = sharpe_variance(e.members, e.trials, **FAST).iloc[0]
    assert (row["n_trials"], row["n_failed"], row["n_members"], row["n_members_excluded"]) == (2, 1, 7, 1)
    assert row["val_sharpe_mean"] == pytest.approx(np.mean([1, 2, 3, 4, 5, 6, 8]))
    by_exp = sharpe_variance(e.members, e.trials, by=["experiment", "config_label"], **FAST)
    assert list(by_exp["experiment"]) == ["unfinished"] and by_exp["n_members"].iloc[0] == 7


# ---- magnitudes -------------------------------------------------------------------------------


def test_gem_magnitudes_and_trajectories(helps):
    e = load_experiment(helps)
    mag = gem_magnitudes(e.history, e.trials, e.members).set_index(["gem", "mode"])
    assert mag.loc[("g6", "measure"), "rel_mean"] == 0.0
    assert mag.loc[("g10", "measure"), "rel_mean"] == pytest.approx(0.05)
    assert mag.loc[("g10", "measure"), "mean"] == pytest.approx(0.05 * fr.LOSS)
    assert mag.loc[("g12", "wire"), "n_trials"] == 3
    assert mag.loc[("g10", "measure"), "n_trials"] == 6  # failed / diverged excluded
    assert (mag["n_trials_excluded"] == 2).all()
    traj = gem_trajectories(e.history, e.trials, e.members)
    g10 = traj[(traj["gem"] == "g10") & (traj["mode"] == "measure")]
    assert g10["epoch"].tolist() == [1, 2, 3] and (g10["n_trials"] == 6).all()


# ---- verdicts ---------------------------------------------------------------------------------


def test_verdicts_delete_wire_candidate_keep_wired(helps):
    v = verdicts(helps)
    g6, g10, g12 = (verdict_of(v, g) for g in ("g6", "g10", "g12"))
    assert g6["verdict"] == "delete" and "redundant" in g6["reason"]
    assert g6["measured_rel_mean"] == 0.0 and g6["measured_n"] == 6
    assert g10["verdict"] == "wire candidate" and g10["measured_rel_mean"] == pytest.approx(0.05)
    assert g12["verdict"] == "keep wired"
    assert g12["test"].startswith("paired") and g12["n_pairs"] == 12
    assert g12["sharpe_diff"] == pytest.approx(2.0)
    assert 1.5 < g12["ci_low"] < 2.0 < g12["ci_high"] < 2.5
    assert g12["p_value"] < 0.01
    assert g12["test_sharpe_diff"] == pytest.approx(2.0)
    assert g12["n_excluded"] == 2 and g12["wired_n"] == 3


def test_verdicts_off_and_no_data(no_help):
    v = verdicts(no_help)
    g12 = verdict_of(v, "g12")
    assert g12["verdict"] == "off"
    assert g12["sharpe_diff"] == pytest.approx(0.0)
    assert g12["ci_low"] < 0 < g12["ci_high"]
    assert verdict_of(v, "g6")["verdict"] == "no data"


def test_verdict_threshold_is_a_parameter(helps):
    v = verdicts(helps, rel_threshold=0.1)
    assert verdict_of(v, "g10")["verdict"] == "delete"  # 0.05 < 0.1
    assert verdict_of(v, "g12")["verdict"] == "keep wired"  # Sharpe evidence decides
    v = verdicts(helps, min_members=13)  # 12 pairs < 13 -> unpaired on 12 vs 12 members: too few
    g12 = verdict_of(v, "g12")
    assert g12["verdict"] == "wire candidate" and "insufficient data" in g12["reason"]


def test_wired_but_magnitude_zero_and_not_better_is_delete(root):
    f = fr.paired_scenario(root / "zero_g12", shift=0.0, g12_rel=0.0, journal=False)
    assert verdict_of(verdicts(f), "g12")["verdict"] == "delete"


def test_unpaired_keep_wired(root):
    f = fr.unpaired_scenario(root / "unpaired", shift=3.0)
    g12 = verdict_of(verdicts(f), "g12")
    assert g12["verdict"] == "keep wired"
    assert g12["test"].startswith("unpaired") and g12["n_pairs"] == 0
    assert g12["wired_members"] == 12 and g12["measured_members"] == 12
    assert 2.0 < g12["sharpe_diff"] < 4.0 and g12["ci_low"] > 0


def test_insufficient_wired_members(root):
    f = fr.unpaired_scenario(root / "few_wired", shift=3.0, n_wired_trials=1, wired_members=2)
    g12 = verdict_of(verdicts(f), "g12")
    assert g12["verdict"] == "wire candidate"
    assert "insufficient data: n_wired=2" in g12["reason"]
    assert math.isnan(g12["ci_low"])


def test_wired_only_is_insufficient_data(root):
    trials = [fr.FakeTrial(f"w{j}", {"g12": "wire"}, [1.0, 2.0, 3.0, 4.0], seeds=[j * 10 + i for i in range(4)])
              for j in range(2)]
    f = fr.write_experiment(root / "wired_only", trials, journal=False)
    v = verdicts(f)
    assert verdict_of(v, "g12")["verdict"] == "insufficient data"
    assert verdict_of(v, "g6")["verdict"] == "no data"


def test_format_verdict_table(helps):
    text = format_verdict_table(verdicts(helps))
    assert "keep wired" in text and "wire candidate" in text and "delete" in text
    assert "g12: keep wired - wired val Sharpe better" in text


# ---- importances ------------------------------------------------------------------------------


def test_importances_from_journal(helps):
    imp = param_importances(load_experiment(helps).studies)
    assert set(imp["param"]) == {"gems.g6.mode", "gems.g10.mode", "gems.g12.mode", "gems.g12.weight"}
    assert imp["importance"].sum() == pytest.approx(1.0)
    assert (imp["n_complete"] == 6).all() and (imp["study"] == "helps").all()


def test_importances_skipped_with_note(root):
    assert "no Optuna study" in param_importances({})["note"].iloc[0]
    one = fr.write_experiment(root / "one_trial", [fr.FakeTrial("a", {"g12": "measure"}, [1.0, 2.0])])
    imp = param_importances(load_experiment(one).studies)
    assert len(imp) == 1 and imp["param"].isna().all() and "1 complete trial" in imp["note"].iloc[0]
    same = fr.write_experiment(root / "single_valued", [
        fr.FakeTrial("a", {"g12": "measure"}, [1.0, 2.0]),
        fr.FakeTrial("b", {"g12": "measure"}, [2.0, 3.0]),
    ])
    imp = param_importances(load_experiment(same).studies)
    assert "single-valued" in imp["note"].iloc[0]


# ---- the whole pipeline -----------------------------------------------------------------------


EXPECTED_FILES = {"sharpe_variance.csv", "gem_magnitudes.csv", "verdicts.csv", "importances.csv",
                  "report.md", "sharpe_distributions.png", "gem_magnitudes.png", "importances.png"}


def test_run_analysis_writes_everything_and_refuses_overwrite(root, helps, no_help):
    out = root / "report_out"
    res = run_analysis([helps, no_help], out, **FAST)
    names = {p.name for p in out.iterdir()}
    assert EXPECTED_FILES <= names
    assert set(res.files) == names
    v = pd.read_csv(out / "verdicts.csv")
    assert list(v["gem"]) == ["g6", "g10", "g12"]
    assert {"verdict", "measured_rel_mean", "measured_n", "wired_n", "sharpe_diff", "ci_low", "ci_high",
            "test", "p_value", "reason"} <= set(v.columns)
    sv = pd.read_csv(out / "sharpe_variance.csv")
    assert {"n_trials", "n_failed", "n_diverged", "val_sharpe_iqm", "test_sharpe_iqm"} <= set(sv.columns)
    report = (out / "report.md").read_text()
    for needle in ("## Verdicts", "sharpe_distributions.png", "gem_magnitudes.png", "importances.png",
                   str(helps), str(no_help), "2 failed, 2 diverged of 16 trials", "out of memory"):
        assert needle in report
    for png in (out / n for n in names if n.endswith(".png")):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    before = (out / "report.md").stat().st_mtime_ns
    with pytest.raises(OutputExistsError, match="report_out") as info:
        run_analysis([helps], out, **FAST)
    assert "\n" not in str(info.value)
    assert (out / "report.md").stat().st_mtime_ns == before
    run_analysis([helps], out, overwrite=True, **FAST)
    assert "no_help" not in (out / "report.md").read_text()
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".report_out.")]


def test_run_analysis_default_out_and_no_half_written_results(root, monkeypatch):
    f = fr.paired_scenario(root / "atomic", journal=False)
    import tune_gems.analysis.run as run_mod

    def boom(*a, **k):
        raise RuntimeError("boom")

    monkeypatch.setattr(run_mod, "render_report", boom)
    with pytest.raises(RuntimeError):
        run_analysis(f, **FAST)
    assert sorted(p.name for p in f.iterdir()) == ["history.parquet", "members.parquet", "trials.parquet"]
    monkeypatch.undo()
    res = run_analysis(f, **FAST)
    assert res.out_dir == f / "analysis" and (f / "analysis" / "report.md").is_file()
    assert "skipped: no Optuna study" in res.importances["note"].iloc[0]
    assert not (f / "analysis" / "importances.png").exists()


def test_scripts(root, helps, capsys):
    assert verdicts_main([str(helps), "--n-boot", "200"]) == 0
    assert "keep wired" in capsys.readouterr().out
    assert report_main([str(root / "missing")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "missing" in err and "\n" not in err
    out = root / "script_out"
    assert report_main([str(helps), "--out", str(out), "--n-boot", "200", "--no-plots"]) == 0
    assert (out / "report.md").is_file() and not (out / "sharpe_distributions.png").exists()
    assert report_main([str(helps), "--out", str(out)]) == 2
    assert "not empty" in capsys.readouterr().err
