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

from tune_gems.analysis.analyze import run_analysis  # noqa: E402
from tune_gems.analysis.describe.descriptive import iqm, stratified_bootstrap_ci  # noqa: E402
from tune_gems.analysis.describe.importance import param_importances  # noqa: E402
from tune_gems.analysis.describe.magnitudes import gem_magnitudes, gem_trajectories  # noqa: E402
from tune_gems.analysis.describe.variance import final_members, sharpe_variance  # noqa: E402
from tune_gems.analysis.read.load import load_experiment  # noqa: E402
from tune_gems.analysis.read.outcomes import trial_outcomes  # noqa: E402
from tune_gems.analysis.render.report import evidence_line, format_verdict_table  # noqa: E402
from tune_gems.analysis.verdicts.gem_verdicts import gem_verdicts  # noqa: E402
from tune_gems.analysis.cli import report_main, verdicts_main  # noqa: E402
from tune_gems.contracts.errors import DataError, OutputExistsError  # noqa: E402

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
    """Verdicts of an older-format fake; its earlier epochs are scaled down on purpose, so the
    verdict metric reads the final epoch only (last_k=1) unless a test says otherwise."""
    e = load_experiment(folder)
    return gem_verdicts(e.trials, e.history, e.members, **{"last_k": 1, **kw})


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
    b = fr.paired_scenario(root / "y" / "sweep", g10_rel=0.06, journal=False)  # another run: other values
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


# ---- verdicts (older results: one arm per trial, pairs across trials) --------------------------
# Rewritten for issue 13: the old rules gave "keep wired" from an unpaired, confounded comparison
# (different seeds), called a gem "off" without saying whether wiring hurt, and had no
# equivalence or power. The new verdicts come from designed comparisons only (tests/test_verdicts.py
# covers the arms designs); here: the same rules on results written before arms existed.


def test_old_results_pair_across_identical_trials(helps):
    v = verdicts(helps)
    g6, g10, g12 = (verdict_of(v, g) for g in ("g6", "g10", "g12"))
    # one shared history without saved returns: no measure of the test period's spread, so the
    # discovery stands unconfirmed (docs/analysis.md "The held-out confirmation")
    assert g12["discovery_verdict"] == "keep wired" and g12["verdict"] == "not confirmed on held-out data"
    assert g12["design"].startswith("across trials") and g12["n_seeds"] == 12 and g12["n_pairs"] == 12
    assert g12["effect"] == pytest.approx(2.0)
    assert 1.5 < g12["ci_low"] < 2.0 < g12["ci_high"] < 2.5
    assert g12["p_adjusted"] < 0.01
    assert g12["outcome"] == "val_sharpe"  # older results: no alpha Sharpe, said so in the reason
    assert "val_alpha_sharpe absent" in g12["reason"]
    assert g12["test_effect"] == pytest.approx(2.0)
    # g6 measured at raw rel 0 (no null in older results: null taken as 0), never wired: the
    # magnitude half of delete holds, the wiring half cannot be shown (issue 21)
    assert g6["verdict"] == "insufficient data" and "excess over its null ~0" in g6["reason"]
    assert "delete needs both" in g6["reason"]
    # g10 measured (rel 0.05), never wired: no effect can be estimated
    assert g10["verdict"] == "insufficient data" and "measured only" in g10["reason"]
    assert g10["excess_median"] == pytest.approx(0.05)


def test_no_effect_with_wide_noise_is_inconclusive_with_mde(no_help):
    v = verdicts(no_help)
    g12 = verdict_of(v, "g12")
    assert g12["verdict"] == "inconclusive"
    assert g12["effect"] == pytest.approx(0.0)
    assert g12["ci_low"] < 0 < g12["ci_high"]
    assert np.isfinite(g12["mde"]) and g12["mde"] > 0.1 and g12["seeds_needed"] > 12
    assert "detectable at 80% power" in g12["reason"]
    assert verdict_of(v, "g6")["verdict"] == "no data"


def test_verdict_thresholds_are_parameters(helps):
    v = verdicts(helps, rel_threshold=0.1)  # g10's excess 0.05 is then within the null band,
    assert verdict_of(v, "g10")["verdict"] == "insufficient data"  # but g10 was never wired
    assert "delete needs both" in verdict_of(v, "g10")["reason"]
    assert verdict_of(v, "g12")["discovery_verdict"] == "keep wired"  # a significant gain outranks delete
    v = verdicts(helps, alpha=1e-6)  # 12 seeds cannot reach p <= 1e-6: too few informative pairs (issue 30)
    assert verdict_of(v, "g12")["verdict"] == "insufficient data"
    assert "too few informative pairs for the rule" in verdict_of(v, "g12")["reason"]
    v = verdicts(helps, last_k=3)  # the fake's earlier epochs are scaled: a 3-epoch mean is 2/3 of 2
    assert verdict_of(v, "g12")["effect"] == pytest.approx(2.0 * (1 + 2 + 3) / 9)


def test_wired_but_magnitude_zero_and_not_better_is_delete_once_wiring_is_equivalent(root):
    f = fr.paired_scenario(root / "zero_g12", shift=0.0, g12_rel=0.0, journal=False)
    g12 = verdict_of(verdicts(f), "g12")  # wiring's effect not shown within +-0.1: not yet delete
    assert g12["verdict"] == "inconclusive" and "delete needs both" in g12["reason"]
    g12 = verdict_of(verdicts(f, rope=10.0), "g12")  # within a wide ROPE: both halves hold
    assert g12["verdict"] == "delete" and "wiring is equivalent to none" in g12["reason"]


def test_different_seeds_are_confounded_not_a_verdict(root):
    """The audit's case: wired trials on seeds the measured trials never used. The old code said
    "keep wired" from an unpaired comparison; now there is no verdict, and the fix is named."""
    f = fr.unpaired_scenario(root / "unpaired", shift=3.0)
    g12 = verdict_of(verdicts(f), "g12")
    assert g12["verdict"] == "insufficient: confounded"
    assert g12["n_seeds"] == 0 and math.isnan(g12["effect"]) and math.isnan(g12["ci_low"])
    assert "no member seed" in g12["reason"] and "same `seed`" in g12["fix"]


def test_wired_only_is_insufficient_data(root):
    trials = [fr.FakeTrial(f"w{j}", {"g12": "wire"}, [1.0, 2.0, 3.0, 4.0], seeds=[j * 10 + i for i in range(4)])
              for j in range(2)]
    f = fr.write_experiment(root / "wired_only", trials, journal=False)
    v = verdicts(f)
    assert verdict_of(v, "g12")["verdict"] == "insufficient data"
    assert "wired only" in verdict_of(v, "g12")["reason"]
    assert verdict_of(v, "g6")["verdict"] == "no data"


def test_format_verdict_table(helps):
    text = format_verdict_table(verdicts(helps))
    assert "keep wired" in text and "insufficient data" in text
    # the verdict line says the word, the test that decided it (here the held-out stage, which has no
    # measure of the test period's spread) with its estimate and the MDE; report.md's why line the rest
    assert "g12: not confirmed on held-out data (the discovery: keep wired) - held-out test segment: +2, no interval" in text
    assert "; MDE " in text and "Holm p" in text
    line = evidence_line(verdicts(helps).set_index("gem").loc["g12"].to_dict() | {"gem": "g12"})
    assert "12 seeds; across trials" in line


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


EXPECTED_FILES = {"sharpe_variance.csv", "gem_magnitudes.csv", "verdicts.csv", "placebo.csv", "redundancy.csv",
                  "importances.csv", "report.md", "gem_effects.png", "sharpe_distributions.png",
                  "gem_magnitudes.png", "importances.png"}
MARKER = ".tune-gems-output.json"


def test_run_analysis_writes_everything_and_refuses_overwrite(root, helps, no_help):
    out = root / "report_out"
    res = run_analysis([helps, no_help], out, **FAST)
    names = {p.name for p in out.iterdir()}
    assert EXPECTED_FILES <= names
    assert set(res.files) | {MARKER} == names  # the marker lets a later --overwrite replace it
    v = pd.read_csv(out / "verdicts.csv")
    assert list(v["gem"]) == ["g6", "g10", "g12"]
    assert {"verdict", "reason", "design", "n_seeds", "effect", "ci_low", "ci_high", "p_adjusted", "tost_p_adjusted",
            "mde", "seeds_needed", "excess_median"} <= set(v.columns)
    sv = pd.read_csv(out / "sharpe_variance.csv")
    assert {"n_trials", "n_failed", "n_diverged", "val_sharpe_iqm", "test_sharpe_iqm"} <= set(sv.columns)
    report = (out / "report.md").read_text()
    for needle in ("## Verdicts", "gem_effects.png", "sharpe_distributions.png", "gem_magnitudes.png",
                   "importances.png", "## Null arms (placebo, A/A)", "## Redundancy", str(helps), str(no_help),
                   "2 failed, 2 diverged of 16 trials", "out of memory",
                   "g12: not confirmed on held-out data (the discovery: keep wired) - held-out test segment: +", "(the discovery read keep wired)", "12 seeds; across trials"):  # issue 31: the design moved to the why line
        assert needle in report
    for png in (out / n for n in names if n.endswith(".png")):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    before = (out / "report.md").stat().st_mtime_ns
    with pytest.raises(OutputExistsError, match="report_out") as info:
        run_analysis([helps], out, **FAST)
    assert "\n" not in str(info.value)
    assert (out / "report.md").stat().st_mtime_ns == before
    run_analysis([helps], out, overwrite=True, **FAST)  # an analysis wrote it: may be replaced
    assert "no_help" not in (out / "report.md").read_text()
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".report_out.")]


def test_run_analysis_default_out_and_no_half_written_results(root, monkeypatch):
    f = fr.paired_scenario(root / "atomic", journal=False)
    import tune_gems.analysis.analyze as run_mod

    def boom(*a, **k):
        raise RuntimeError("boom")

    monkeypatch.setattr(run_mod, "render_report", boom)
    with pytest.raises(RuntimeError):
        run_analysis(f, **FAST)
    assert sorted(p.name for p in f.iterdir()) == ["history.parquet", "members.parquet", "trials.parquet"]
    monkeypatch.undo()
    res = run_analysis(f, **FAST)
    assert res.out_dir == (f / "analysis").resolve() and (f / "analysis" / "report.md").is_file()
    assert "skipped: no Optuna study" in res.importances["note"].iloc[0]
    assert not (f / "analysis" / "importances.png").exists()


def test_scripts(root, helps, capsys):
    assert verdicts_main([str(helps), "--last-k", "1"]) == 0
    assert "keep wired" in capsys.readouterr().out
    assert report_main([str(root / "missing")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "missing" in err and "\n" not in err
    out = root / "script_out"
    assert report_main([str(helps), "--out", str(out), "--n-boot", "200", "--no-plots"]) == 0
    assert (out / "report.md").is_file() and not (out / "sharpe_distributions.png").exists()
    assert report_main([str(helps), "--out", str(out)]) == 2
    assert "not empty" in capsys.readouterr().err


# ---- data safety through the real CLI (issue 16 deliver 1) ------------------------------------


def snapshot(top: Path) -> dict[str, tuple[int, int]]:
    """Every file under `top` with its size and modification time (ns)."""
    return {str(p.relative_to(top)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(top.rglob("*")) if p.is_file()}


def cli(*args: str, capsys=None):
    """`tune-gems analyze ARGS`: in a subprocess (exit status and stderr as a user sees them), or
    in-process through `tune_gems.commands.cli.main` when `capsys` is given (the same code, faster)."""
    import subprocess
    from types import SimpleNamespace

    if capsys is not None:
        from tune_gems.commands.cli import main

        code = main(["analyze", *args])
        cap = capsys.readouterr()
        return SimpleNamespace(returncode=code, stdout=cap.out, stderr=cap.err)
    return subprocess.run([sys.executable, "-m", "tune_gems", "analyze", *args], capture_output=True, text=True,
                          timeout=300)


@pytest.fixture(scope="module")
def two_experiments(tmp_path_factory):
    top = tmp_path_factory.mktemp("safety")
    fr.paired_scenario(top / "runs" / "exp_a", journal=False)
    fr.wire_scenario(top / "runs" / "exp_b", n=8)
    (top / "mine").mkdir()
    (top / "mine" / "notes.txt").write_text("the user's own file")
    return top


@pytest.mark.parametrize("case", ["out_is_input", "out_is_parent_of_experiments", "out_inside_input",
                                  "out_is_users_folder"])
def test_cli_refuses_outputs_that_hold_user_data(two_experiments, capsys, case):
    """The data-loss cases of issue 16; the first one in a real subprocess, the rest in-process."""
    top = two_experiments
    exp_a, exp_b = top / "runs" / "exp_a", top / "runs" / "exp_b"
    out = {"out_is_input": exp_a, "out_is_parent_of_experiments": top / "runs",
           "out_inside_input": exp_a / "sub" / "x", "out_is_users_folder": top / "mine"}[case]
    before = snapshot(top)
    r = cli(str(exp_a), str(exp_b), "--out", str(out), "--overwrite", "--no-plots",
            capsys=None if case == "out_is_input" else capsys)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "--out" in lines[0] and "Traceback" not in r.stderr
    assert snapshot(top) == before  # nothing deleted, nothing written
    assert not list(top.rglob(".*.tmp-*"))


def test_cli_overwrite_replaces_only_its_own_output(two_experiments, capsys):
    top = two_experiments
    exp_b = top / "runs" / "exp_b"
    out = top / "reports" / "b"
    r = cli(str(exp_b), "--out", str(out), "--no-plots", "--n-boot", "100", capsys=capsys)
    assert r.returncode == 0, r.stderr
    assert (out / MARKER).is_file() and "keep wired" in r.stdout
    before = snapshot(top / "runs")
    r = cli(str(exp_b), "--out", str(out), "--no-plots", "--n-boot", "100", "--overwrite")
    assert r.returncode == 0, r.stderr
    assert snapshot(top / "runs") == before
    r = cli(str(exp_b), "--out", str(out), "--no-plots", capsys=capsys)
    assert r.returncode == 2 and "not empty" in r.stderr


@pytest.mark.parametrize("flag,value,needle", [("--alpha", "nan", "finite"), ("--alpha", "-0.1", "[1e-06, 0.5)"),
                                               ("--rope", "-1", "--rope"), ("--rel-threshold", "nan", "finite"),
                                               ("--rel-threshold", "-1e-3", "--rel-threshold"),
                                               ("--last-k", "0", "--last-k"), ("--power", "1.5", "--power"),
                                               ("--placebo-weight", "inf", "finite"), ("--n-sim", "10", "--n-sim")])
def test_cli_refuses_bad_thresholds(two_experiments, capsys, flag, value, needle):
    """In-process through `tune_gems.commands.cli.main` (the CLI's own entry point) to keep the suite fast."""
    from tune_gems.commands.cli import main

    top = two_experiments
    before = snapshot(top)
    extra = ["--calibrate"] if flag == "--n-sim" else []
    code = main(["analyze", str(top / "runs" / "exp_b"), f"{flag}={value}", "--out", str(top / "reports" / "bad"),
                 *extra])
    err = capsys.readouterr().err
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and flag in lines[0] and needle in lines[0], err
    assert snapshot(top) == before
