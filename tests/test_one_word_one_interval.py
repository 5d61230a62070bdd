"""Every printed word stands beside the estimate, interval and Holm p of the test that gave it, and
no text contradicts its numbers: a pooled variance under one degree of freedom reads `insufficient
data` without an interval (never +-35 on the screen or the plot's axis), `equivalent` stands on a
finite interval inside the margin, ties are counted once per comparison, an unmeasured held-out
effect is empty with its reason, `confirm` prints one interval per word, and the sweep's closing
table of an interrupted run has no NaN and no premature "no signal"."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

import fake_results as fr
from fake_results import ArmTrial, _arm_tables, seed_values, write_arms_experiment
from tune_gems.analysis.analyze import analyze
from tune_gems.analysis.render.plot_tables import final_verdict_table
from tune_gems.analysis.render.plots import final_verdicts
from tune_gems.analysis.render.report import format_verdict_table, verdict_line

FAST = dict(n_boot=50)


def two_gems_over_histories(folder: Path, *, seed: int, n: int = 8, folds: int = 6) -> Path:
    """g6 and g12 each wired in its own arm over 3 histories x `folds` folds, per-seed differences
    N(0, 1): a family of two whose shared pooled variance can have under one degree of freedom."""
    rng = np.random.default_rng(seed)
    arms = {"control": {}, "w6": {"gems.g6.mode": "wire", "gems.g6.weight": 0.1},
            "w12": {"gems.g12.mode": "wire", "gems.g12.weight": 0.1}}
    frames, first = [], None
    for h in range(3):
        for k in range(folds):
            base = seed_values(n, seed=100) + 0.3 * k - 0.7 * h
            vals = {"control": list(base), "w6": list(base + rng.normal(0, 1, n)), "w12": list(base + rng.normal(0, 1, n))}
            tables = _arm_tables(folder.name, [ArmTrial("t0", arms, vals, seed=3)], True)
            frames.append(tables[2].assign(fold=k, history=h, member=tables[2]["member"] + (folds * h + k) * 3 * n))
            first = first or tables
    write_arms_experiment(folder, [ArmTrial("t0", {"control": {}}, {"control": [0.0] * n}, seed=3)])
    for table, name in zip((first[0], first[1], first[3]), ("trials", "history", "arms")):
        table.to_parquet(folder / f"{name}.parquet", index=False)
    pd.concat(frames, ignore_index=True).to_parquet(folder / "members.parquet", index=False)
    return folder


def test_a_pooled_variance_under_one_df_reads_insufficient_data_and_is_never_drawn(tmp_path):
    res = analyze(two_gems_over_histories(tmp_path / "h", seed=11), **FAST)
    g = res.verdicts.set_index("gem").loc["g12"]
    assert g["pooled_df"] < 1 and g["verdict"] == "insufficient data" and g["discovery_verdict"] == "insufficient data"
    assert g["decided_by"] == f"insufficient: pooled df {g['pooled_df']:.3g} < 1"
    assert np.isnan([g["decided_ci_low"], g["decided_ci_high"], g["pooled_ci_low"], g["pooled_ci_high"], g["mde"]]).all()
    assert g["power_note"].startswith("no MDE: the pooled variance has") and g["reason"].startswith("the pooled variance has")
    line = verdict_line(g.to_dict() | {"gem": "g12"})
    assert line.startswith("g12: insufficient data (pooled df") and "no interval; MDE -" in line
    # the other gem keeps its decisive interval, and the plot its scale
    fig = final_verdicts(final_verdict_table(res.verdicts, res.placebo))
    ax = fig.axes[0]
    assert any(a.get_gid() == "insufficient:g12" for a in ax.get_lines()) and ax.get_xlim()[1] < 2
    text = format_verdict_table(res.verdicts)
    assert "insufficient: pooled df" in text and "e+" not in text.split("\n\n")[0]  # no runaway interval or MDE


@pytest.mark.parametrize("settings", [{}, {"one_sided_keep": True}])
def test_equivalent_stands_on_a_finite_interval_inside_the_margin(tmp_path, settings):
    for name, folder in (("seeds", fr.wire_scenario(tmp_path / "s", effect=0.0, noise=0.01, n=20)),
                         ("pooled", fr.fold_scenario(tmp_path / "f", [0.0, 0.01, -0.01, 0.0, 0.005], noise=0.01))):
        g = analyze(folder, **FAST, **settings).verdicts.set_index("gem").loc["g12"]
        assert g["verdict"] == "equivalent", name
        lo, hi, rope = g["decided_ci_low"], g["decided_ci_high"], g["rope"]
        assert np.isfinite([lo, hi]).all() and -rope < lo <= hi < rope, name
        tost = g["pooled_tost_p_adjusted"] if name == "pooled" else g["tost_p_adjusted"]
        assert g["decided_p_adjusted"] == tost and g["decided_ci_level"] == pytest.approx(0.9)


def test_ties_are_counted_once_per_comparison(tmp_path):
    """A fold whose pairs all tie: the reason states the comparison's tie share, the same number as
    its `tied_share` column (over every fold pair), not the seeds' fold-averaged share beside it."""
    g = analyze(fr.fold_scenario(tmp_path / "t", [0.3, 0.0, 0.3, 0.3], noise=0.0), **FAST).verdicts.set_index("gem").loc["g12"]
    assert g["tied_share"] == 0.25
    assert "25% of the pairs tie exactly (48 of 64 informative, the rest left out)" in g["reason"]
    assert "0% of the pairs" not in g["reason"]


def test_an_unmeasured_held_out_effect_is_empty_with_its_reason(tmp_path):
    folder = fr.fold_scenario(tmp_path / "u", [0.3, 0.35, 0.25, 0.4])
    members = pd.read_parquet(folder / "members.parquet")
    members.loc[members["arm"] == "wired", "test_alpha_sharpe"] = np.nan  # never measured
    members.to_parquet(folder / "members.parquet", index=False)
    g = analyze(folder, **FAST).verdicts.set_index("gem").loc["g12"]
    assert np.isnan(g["test_effect"]) and g["held_out"].startswith("not confirmed: no test-segment measure")
    assert g["verdict"] == "not confirmed on held-out data" and "inf" not in str(g["test_effect"])


def test_counts_name_their_noun_in_the_number_they_need():
    from tune_gems.analysis.text import counted

    assert (counted(1, "history"), counted(3.0, "history"), counted(1, "period"), counted(4, "period")) == (
        "1 history", "3 histories", "1 period", "4 periods")


def test_confirm_prints_one_interval_per_word_and_counts_the_histories_it_ran():
    from tune_gems.analysis.verdicts.search_choice import CONFIRMATION_COLUMNS, confirmation_power, format_confirmation

    row = {c: math.nan for c in CONFIRMATION_COLUMNS} | dict(
        gem="g12", chosen_trial="t1", discovery_verdict="inconclusive", discovery_effect=0.02, discovery_ci_low=-0.3,
        discovery_ci_high=0.35, confirmation_effect=0.03, confirmation_ci_low=-0.01, confirmation_ci_high=0.06,
        final_verdict="equivalent", final_ci_low=-0.0347, final_ci_high=0.0992, note="", final_rule="")
    text = format_confirmation(pd.DataFrame([row]))
    assert text.splitlines()[2].count("[") == 2 and "+0.03 [-0.0347, 0.0992]" in text  # the discovery's, then the final word's
    # a two-history discovery without an MDE still plans over two histories, not "one price history"
    discovery = pd.DataFrame([dict(gem="g12", p_value=0.5, family_size=1, n_seeds=8, histories=2, folds=2,
                                   sd_diff=1.0, n_informative=8)])
    trials = pd.DataFrame(dict(trial_id=["t1"], status=["TERMINATED"], **{"gems.g12.mode": ["wire"]},
                               verdict_gain_g12=[0.1]))
    (plan,) = confirmation_power(discovery, trials, ["g12"], one_history=True, alpha=0.05, power=0.8, seeds=None,
                                 default_seeds=8)
    assert "2 histories x 2 fold(s), the same price histories" in plan.note and "one price history" not in plan.note


def test_a_price_data_confirmation_never_speaks_of_fresh_paths():
    from tune_gems.commands.confirm import _report

    assert "fresh synthetic paths" not in _report(Path("e"), "t", "v", [], fresh=False)
    assert "fresh synthetic paths" in _report(Path("e"), "t", "v", [], fresh=True)


def test_a_confirmation_trial_says_its_eta_after_each_epoch():
    from tune_gems.commands.confirm_trials import epoch_line

    trainer = SimpleNamespace(epoch=1, cfg=SimpleNamespace(trainer=SimpleNamespace(epochs=4)))
    assert epoch_line(SimpleNamespace(trial_id="confirm-g6"), trainer, 30.0) == (
        "tune-gems confirm: confirm-g6: epoch 1/4 | 30s in this trial, ETA 1m30s")


def test_an_interrupted_sweeps_closing_table_has_no_nan_and_no_premature_no_signal():
    from tune_gems.sweep.console import closing_table, tie_note

    trials = pd.DataFrame(dict(trial_id=["a", "b", "c"], status=["TERMINATED", "UNFINISHED", "UNFINISHED"],
                               objective=[0.0, 0.0, np.nan], val_sharpe_mean=[0.5, np.nan, np.nan],
                               epochs_done=[3, 1, 0], config_label=["x", "y", "z"]))
    table = closing_table(trials)
    assert "nan" not in table.lower() and " - " in table
    assert tie_note(trials, "verdict_gain") is None  # one finished trial: nothing to tie yet
    assert tie_note(trials.assign(status="TERMINATED", objective=0.0), "verdict_gain").startswith("no signal")
