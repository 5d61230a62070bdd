"""Labels describe the members they name (issue 31 item 2): an arm's label has its settings
applied, a trial's names its arms, a plot's keep only what tells them apart; older results
(every label the trial's base config) read the same as new ones, and the report, `compare`
and the baseline line show the arm's own settings."""

from __future__ import annotations

import pandas as pd

from fake_results import wire_scenario
from sweep_fixtures import cli_in_process
from tune_gems.analysis.read.load import load_experiment
from tune_gems.analysis.describe.variance import sharpe_variance, split_arms
from tune_gems.contracts.config_label import arm_label, short_labels, trial_label
from tune_gems.stats.baseline_headline import baseline_comparison

BASE = "g6=measure g10=measure g12=measure sn=on noisy=on"
WIRED = "g6=measure g10=measure g12=wire sn=on noisy=on"


def test_an_arms_label_has_its_settings_applied():
    assert arm_label(BASE, {"gems.g12.mode": "wire", "gems.g12.weight": 0.1, "trainer.lr": 1e-3}) == WIRED
    assert arm_label(BASE, {"model.spectral_norm": False, "model.noisy": "True"}) == \
        "g6=measure g10=measure g12=measure sn=off noisy=on"
    assert arm_label(BASE, {"gems.qmag.mode": "wire"}) == "g6=measure g10=measure g12=measure qmag=wire sn=on noisy=on"
    assert arm_label(WIRED, {"gems.g12.mode": "wire"}) == WIRED  # applying twice changes nothing
    assert arm_label(BASE, {"gems.g12.mode": float("nan")}) == BASE  # a missing setting: the trial's


def test_a_trials_label_names_each_arms_own_tokens():
    assert trial_label([("default", BASE)]) == BASE
    assert trial_label([("proposal", WIRED), ("control", BASE)]) == \
        "g6=measure g10=measure sn=on noisy=on | proposal: g12=wire; control: g12=measure"
    assert trial_label([("a", BASE), ("b", BASE)]) == BASE


def test_short_labels_keep_what_tells_them_apart():
    assert short_labels([f"{WIRED} | arm wired", f"{BASE} | arm control"]) == ["g12=wire [wired]", "g12=measure [control]"]
    assert short_labels([BASE]) == [BASE]
    assert short_labels([f"{BASE} | arm a", f"{BASE} | arm b"]) == ["[a]", "[b]"]


def test_older_results_get_the_arms_labels_when_read(tmp_path):
    exp = wire_scenario(tmp_path / "w", n=6, trials=2)  # written as before issue 31: every label the base config's
    assert set(pd.read_parquet(exp / "members.parquet")["config_label"]) == {BASE}
    e = load_experiment(exp)
    by_arm = e.members.groupby("arm")["config_label"].unique().map(list).to_dict()
    assert by_arm == {"control": [BASE], "wired": [WIRED]}
    assert set(e.trials["config_label"]) == set(e.history["config_label"]) == {
        "g6=measure g10=measure sn=on noisy=on | control: g12=measure; wired: g12=wire"}
    t, m = split_arms(e.trials, e.members)
    sv = sharpe_variance(m, t, n_boot=50)
    assert sorted(sv["config_label"]) == [f"{BASE} | arm control", f"{WIRED} | arm wired"]
    assert sv["n_trials"].tolist() == [2, 2] and sv["n_members"].tolist() == [12, 12]
    names = set(baseline_comparison(e)["configuration"])
    assert f"w t0 {WIRED} arm=wired" in names and f"w t0 {BASE} arm=control" in names
    again = load_experiment(exp)
    pd.testing.assert_frame_equal(again.members, e.members)  # reading is idempotent


def test_report_and_compare_show_the_arms_settings(tmp_path):
    a = wire_scenario(tmp_path / "a", n=6)
    b = wire_scenario(tmp_path / "b", n=6, effect=0.0)
    res = cli_in_process("analyze", str(a), "--no-plots", "--n-boot", "50")
    assert res.returncode == 0, res.stderr[-2000:]
    report = (a / "analysis" / "report.md").read_text()
    assert f"| {WIRED} \\| arm wired |" in report and f"| {BASE} \\| arm control |" in report
    assert f"| {BASE} \\| arm wired |" not in report
    res = cli_in_process("compare", str(a), str(b), "--n-boot", "50")
    assert res.returncode == 0, res.stderr[-2000:]
    assert f"{WIRED} | arm wired" in res.stdout and f"{BASE} | arm wired" not in res.stdout
