"""The report puts each configuration's final Sharpe and alpha Sharpe beside the baselines
(issue 14 deliver 2), from the tables a run writes."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import pytest

from tune_gems.analysis.read.load import read_baselines
from tune_gems.stats.baseline_headline import baseline_comparison
from tune_gems.contracts.errors import DataError


def _exp(baselines):
    members = pd.DataFrame(
        {
            "experiment": "e", "trial_id": "t0", "arm": ["a", "a", "b", "b", "a", "b"], "epoch": [2, 2, 2, 2, 1, 1],
            "val_sharpe": [1.0, 3.0, -1.0, 0.0, 9.0, 9.0], "val_alpha_sharpe": [0.5, 1.5, 0.0, 1.0, 9.0, 9.0],
            "test_sharpe": [0.0, 2.0, 1.0, 1.0, 9.0, 9.0], "test_alpha_sharpe": [1.0, 1.0, 2.0, 4.0, 9.0, 9.0],
            "diverged": [False, False, False, True, False, False],
        }
    )  # fmt: skip
    trials = pd.DataFrame({"experiment": ["e"], "trial_id": ["t0"], "config_label": ["g6=wire"]})
    return SimpleNamespace(members=members, trials=trials, baselines=baselines)


def test_final_epoch_means_over_non_diverged_members_beside_path_averaged_baselines():
    baselines = pd.DataFrame(
        {
            "experiment": "e", "segment": ["val", "val", "test", "test"], "baseline": "buy_and_hold",
            "path": [0, 1, 0, 1], "sharpe": [1.0, 2.0, 3.0, 5.0], "alpha_sharpe": [-1.0, -0.5, 0.0, 1.0],
        }
    )  # fmt: skip
    t = baseline_comparison(_exp(baselines)).set_index("configuration")
    a = t.loc["e t0 g6=wire arm=a"]
    assert (a["members"], a["val_sharpe"], a["val_alpha_sharpe"], a["test_sharpe"]) == (2, 2.0, 1.0, 1.0)
    b = t.loc["e t0 g6=wire arm=b"]  # the diverged member is left out of the means
    assert (b["members"], b["val_sharpe"], b["test_alpha_sharpe"]) == (1, -1.0, 2.0)
    bh = t.loc["baseline: buy_and_hold"]
    assert (bh["val_sharpe"], bh["val_alpha_sharpe"], bh["test_sharpe"], bh["test_alpha_sharpe"]) == (1.5, -0.75, 4.0, 0.5)


def test_no_baselines_table_still_lists_the_configurations():
    t = baseline_comparison(_exp(None))
    assert list(t["configuration"]) == ["e t0 g6=wire arm=a", "e t0 g6=wire arm=b"]


def test_a_baselines_table_without_its_columns_is_one_line_data_error(tmp_path):
    pd.DataFrame({"segment": ["val"], "baseline": ["flat"]}).to_csv(tmp_path / "baselines.csv", index=False)
    with pytest.raises(DataError, match=r"baselines.csv: missing column\(s\) sharpe, alpha_sharpe"):
        read_baselines(tmp_path, "x")
    pd.DataFrame({"segment": ["val"], "baseline": ["flat"], "sharpe": ["high"], "alpha_sharpe": [0.0]}).to_csv(
        tmp_path / "baselines.csv", index=False
    )
    with pytest.raises(DataError, match="column sharpe must be numeric"):
        read_baselines(tmp_path, "x")


def test_each_configuration_carries_the_statements_metric_and_interval():
    """Issue 30 item 8: one metric with an interval per configuration (test alpha Sharpe, the
    rows' units here being the members: no seed column), the baselines without one."""
    t = baseline_comparison(_exp(None)).set_index("configuration")
    a = t.loc["e t0 g6=wire arm=a"]
    assert (a["skill_metric"], a["skill_seeds"], a["skill_estimate"]) == ("test_alpha_sharpe", 2, 1.0)
    assert a["skill_ci_low"] <= 1.0 <= a["skill_ci_high"]


def test_the_held_out_check_says_it_is_conditional_on_one_test_period(tmp_path):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import fake_results as fr

    from tune_gems.analysis.analyze import analyze

    v = analyze(fr.fold_scenario(tmp_path / "e", [0.5, 0.4, 0.6, 0.5])).verdicts.set_index("gem").loc["g12"]
    assert v["held_out"] == "confirmed"
    assert "held-out test segment (conditional on one test period" in v["reason"]
