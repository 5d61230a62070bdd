"""The analysis's edges (issue 39 items 2 and 5, issue 38 items 4-5): a window the data cannot
honour is refused and every record states the window used; experiment folders given twice or
as a symlink loop are one line for library callers too; `compare` lists the interval that
decided; `--verbose` reaches the verdict renderer. The hostile cases through the CLI are the
`issue39_analysis` family of tests/test_hostile_matrix.py."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import fake_results as fr
from tune_gems.analysis.analyze import analyze
from tune_gems.analysis.read.load import load_experiment
from tune_gems.analysis.read.outcomes import last_evaluated_epochs
from tune_gems.analysis.rules.settings import Thresholds
from tune_gems.contracts.errors import ConfigError, DataError

FAST = dict(n_boot=50)


# -- the window ----------------------------------------------------------------------------------


def test_a_first_epoch_is_refused_without_its_window_and_stated_only_with_it():
    with pytest.raises(ConfigError, match=r"^--first-epoch: applies only to --window from-epoch \(the window is last-k"):
        Thresholds(first_epoch=2)
    with pytest.raises(ConfigError, match="the window is last-half"):
        Thresholds(window="last-half", first_epoch=2)
    assert Thresholds(window="from-epoch").first_epoch == 1  # the default first epoch, where it applies
    assert "first_epoch" not in Thresholds().settings() and Thresholds(window="from-epoch", first_epoch=3).settings()["first_epoch"] == 3
    th = Thresholds(window="from-epoch", first_epoch=3)
    assert th.with_window("last-k", last_k=2) == Thresholds(last_k=2)  # the first epoch leaves with its window
    assert th.with_window("from-epoch", first_epoch=1).window_text() == "every validation epoch from epoch 1 on"


def test_a_first_epoch_past_a_run_is_refused_naming_the_run():
    th = Thresholds(window="from-epoch", first_epoch=4)
    th.check_window({"trial a": 4, "trial b": 6}, "exp")  # every run holds epoch 4
    with pytest.raises(ConfigError, match=r"^--first-epoch: 4 is past the last evaluated epoch \(3\) of trial b in exp"):
        th.check_window({"trial a": 4, "trial b": 3}, "exp")
    with pytest.raises(ConfigError, match=r"past the last evaluated epoch \(3\) of exp: .* holds no epoch; give --first-epoch 3 or less$"):
        th.check_window({"trial a": 3}, "exp")
    Thresholds(last_k=50).check_window({"trial a": 3}, "exp")  # only a from-epoch window is checked here


def test_the_last_evaluated_epochs_are_the_ok_trials(tmp_path):
    exp = load_experiment(fr.paired_scenario(tmp_path / "p", journal=False))  # a failed trial at 1, a diverged at 2
    last = last_evaluated_epochs(exp.trials, exp.members)
    assert set(last.values()) == {3} and "trial d1" not in last and "trial f1" not in last
    two = load_experiment([fr.paired_scenario(tmp_path / "a" / "p", journal=False), fr.wire_scenario(tmp_path / "w", n=4)])
    assert "w/trial t0" in last_evaluated_epochs(two.trials, two.members)


def test_a_run_shorter_than_the_window_is_named(tmp_path):
    trials = [fr.FakeTrial("long", {"g12": "measure"}, [1.0, 2.0]), fr.FakeTrial("short", {"g12": "wire"}, [1.5, 2.5], epochs=2)]
    folder = fr.write_experiment(tmp_path / "e", trials, journal=False)
    with pytest.raises(ConfigError, match=r"past the last evaluated epoch \(2\) of trial short in"):
        analyze(folder, window="from-epoch", first_epoch=3, **FAST)
    assert len(analyze(folder, window="from-epoch", first_epoch=2, **FAST).verdicts)


def test_every_record_states_the_window_used_through_the_cli(tmp_path, capsys):
    from tune_gems.commands.cli import main

    folder = fr.wire_scenario(tmp_path / "w", n=6)  # 4 epochs
    assert main(["analyze", str(folder), "--window", "from-epoch", "--first-epoch", "2", "--no-plots", "--n-boot", "50"]) == 0
    v = pd.read_csv(folder / "analysis" / "verdicts.csv")
    assert set(v["window"]) == {"every validation epoch from epoch 2 on"}
    report = (folder / "analysis" / "report.md").read_text()
    assert "`window=from-epoch`" in report and "`first_epoch=2`" in report
    assert "averaged over every validation epoch from epoch 2 on" in report
    capsys.readouterr()
    assert main(["analyze", str(folder), "--window", "from-epoch", "--first-epoch", "5", "--out", str(tmp_path / "no")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--first-epoch: 5 is past the last evaluated epoch (4)" in err[0]
    assert not (tmp_path / "no").exists()


# -- the folders read ----------------------------------------------------------------------------


def test_a_folder_given_twice_is_refused_naming_it(tmp_path):
    folder = fr.wire_scenario(tmp_path / "w", n=4)
    with pytest.raises(DataError, match=r"^EXPERIMENT_DIR: .*w is given twice: its seeds would count twice"):
        load_experiment([folder, folder])
    with pytest.raises(DataError, match=r"is the same folder as .*w: its seeds would count twice"):
        load_experiment([folder, folder / ".." / "w"])


def test_a_symlink_loop_is_one_line_for_library_callers(tmp_path):
    from tune_gems.analysis.plan import plan

    (tmp_path / "loop").symlink_to("loop")
    for call in (lambda: load_experiment(tmp_path / "loop"), lambda: plan(tmp_path / "loop")):
        with pytest.raises(DataError, match=r"^EXPERIMENT_DIR: .*loop is a symlink loop"):
            call()
    from tune_gems.analysis.analyze import check_out
    from tune_gems.contracts.errors import OutputError

    with pytest.raises(OutputError, match=r"^--out: .*loop is a symlink loop"):
        check_out(tmp_path / "loop", [fr.wire_scenario(tmp_path / "w", n=4)], overwrite=False)


# -- compare: the interval that decided ----------------------------------------------------------


def test_compare_lists_the_interval_that_decided(tmp_path):
    from tune_gems.commands.compare import compare, format_comparison

    a = fr.fold_scenario(tmp_path / "a", [0.3, 0.1, 0.2, 0.25, 0.15], n=6)
    b = fr.fold_scenario(tmp_path / "b", [0.0, 0.1, -0.1, 0.05, -0.05], n=6)
    c = compare(a, b, **FAST)
    row = c.verdicts.set_index("gem").loc["g12"]
    for side, folder in (("a", a), ("b", b)):
        v = analyze(folder, **FAST).verdicts.set_index("gem").loc["g12"]
        assert np.isfinite(v["pooled_effect"]) and v["effect"] != v["pooled_effect"]  # seeds alone differ
        assert row[f"decided_by [{side}]"] == "pooled over 5 periods"
        assert (row[f"effect [{side}]"], row[f"ci_low [{side}]"], row[f"ci_high [{side}]"]) == pytest.approx(
            (v["decided_effect"], v["decided_ci_low"], v["decided_ci_high"]))  # equivalent: the TOST's interval
        assert row[f"verdict [{side}]"] == v["verdict"]
    assert "decided_by [a]" in format_comparison(c)


# -- --verbose -----------------------------------------------------------------------------------


def test_the_full_chain_is_printed_with_verbose(tmp_path, capsys):
    from tune_gems.commands.cli import main

    folder = fr.wire_scenario(tmp_path / "w", n=6)
    assert main(["analyze", str(folder), "--no-plots", "--n-boot", "50"]) == 0
    plain = capsys.readouterr().out
    assert "g12: keep wired - seeds: +" in plain and "    why: " not in plain
    assert main(["analyze", str(folder), "--no-plots", "--n-boot", "50", "--overwrite", "--verbose"]) == 0
    verbose = capsys.readouterr().out
    assert "g12: keep wired - seeds: +" in verbose and "    why: wiring helps;" in verbose
    assert "  - wiring helps: " in (folder / "analysis" / "report.md").read_text()  # the report keeps the chain
