"""The plan step: from a finished pilot, the layouts that reach a target MDE with the rule that
decides, priced with the verdict's own power inputs (its pilot read as `analyze` reads it), what
they cost on the pilot's recorded time, and the layouts the rule refuses."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fake_results as fr  # noqa: E402
from test_histories_analysis import GEM, THREE, history_scenario  # noqa: E402

from tune_gems.analysis.analyze import analyze  # noqa: E402
from tune_gems.analysis.plan import ONE, OWN, design_overrides, format_plan, plan  # noqa: E402
from tune_gems.analysis.rules.power import informative_of, mde, two_stage  # noqa: E402

TRAIN_S, EVAL_S, IPE = 2.0, 0.5, 50
FOLDS_TABLE = pd.DataFrame(dict(fold=[0, 1, 2, 3, 4], train_runs=["0:2000", "0:2200", "0:2400", "0:2600", "0:2800"],
                                train_rows=[2000, 2200, 2400, 2600, 2800], group_rows=[200] * 5))
"""Five expanding walk-forward folds of 200 validation rows: they share training rows."""


def _pilot(folder, effects=(0.5, 0.3, 0.7, 0.4, 0.6), folds_table=True):
    """A 5-fold pilot of g12 (16 seeds per arm), with the recorded time a run writes and the fold
    table whose overlap the verdict corrects."""
    f = fr.fold_scenario(folder, list(effects))
    h = pd.read_parquet(f / "history.parquet").assign(train_s=TRAIN_S, eval_s=EVAL_S)
    h.to_parquet(f / "history.parquet", index=False)
    t = pd.read_parquet(f / "trials.parquet").assign(**{"trainer.iterations_per_epoch": IPE})
    t.to_parquet(f / "trials.parquet", index=False)
    if folds_table:
        FOLDS_TABLE.assign(experiment=f.name, trial_id="t0").to_parquet(f / "folds.parquet", index=False)
    return f


def test_the_pilots_design_states_analyzes_mde_and_each_layout_the_verdicts_power_inputs_moved(tmp_path):
    f = _pilot(tmp_path / "pilot")
    p = plan(f, target_mde=0.2, periods=(4, 8, 12), seeds=(6, 12, 24))
    v = analyze(f).verdicts.set_index("gem")
    g = p.gems[0]
    assert (p.periods, p.seeds, p.arms, p.epochs) == (5, 16, 2, 4) and g.gem == "g12"
    assert g.inputs.overlap > 0  # the fold table's overlap, as the verdict carried it
    assert (g.mde, g.two_stage, g.floor) == tuple(float(v.at["g12", k]) for k in ("mde", "mde_two_stage", "mde_floor"))
    members = 5 * 2 * 16  # the pilot's population
    assert p.cost.per_member_iteration == pytest.approx(TRAIN_S / (IPE * members))
    d = p.designs.set_index("periods")
    assert d.at[4, "refused"] == "" and d.at[5, "pilot"]
    for k, r in d.iterrows():  # the fewest seeds of the list whose MDE reaches the target, the verdict's inputs moved
        n = int(r["seeds"])
        if not n:
            continue
        at = g.inputs.__class__(**{**g.inputs.__dict__, "n": informative_of(n, g.tied_share), "folds": k})
        assert r["mde"] == pytest.approx(mde(at, p.level, p.power)) <= 0.2
        assert r["two-stage"] == pytest.approx(two_stage(at, p.level, p.power))
        smaller = [s for s in sorted({6, 12, 16, 24}) if s < n]
        if smaller:
            fewer = g.inputs.__class__(**{**at.__dict__, "n": informative_of(smaller[-1], g.tied_share)})
            assert mde(fewer, p.level, p.power) > 0.2
        assert r["seconds"] == pytest.approx(4 * r["members"] * (IPE * TRAIN_S / (IPE * members) + EVAL_S / members))
    text = format_plan(p)
    assert "the pilot (analyze's MDE)" in text and "s per member-iteration" in text
    pilot_line = next(line for line in text.splitlines() if "the pilot (analyze's MDE)" in line)
    assert f"{g.mde:.3g}" in pilot_line.split() and f"{g.two_stage:.3g}" in pilot_line.split()


def test_plan_command_and_its_refusals(tmp_path, capsys):
    from tune_gems.commands.cli import main

    f = _pilot(tmp_path / "pilot")
    assert main(["plan", str(f), "--target-mde", "0.3"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Plan from the pilot") and "periods  seeds  members  MDE" in out
    assert main(["plan", str(f), "--target-mde", "-1"]) == 2
    assert capsys.readouterr().err.strip() == "tune-gems: error: --target-mde: must be a positive number, got -1.0"
    one = fr.wire_scenario(tmp_path / "one_fold")
    assert main(["plan", str(one)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "one validation period: the period spread cannot be estimated" in err[0]


def test_a_pilot_without_recorded_time_is_planned_uncosted(tmp_path):
    f = fr.fold_scenario(tmp_path / "pilot", [0.5, 0.3, 0.7, 0.4])
    p = plan(f, target_mde=0.3, periods=(4, 8), seeds=(8, 16))
    assert p.cost is None and np.isnan(p.designs["seconds"].dropna()).all()
    assert any("not costed" in n for n in p.notes)


def test_each_layout_carries_the_overrides_that_run_it(tmp_path):
    f = _pilot(tmp_path / "pilot")
    p = plan(f, target_mde=0.3, periods=(4, 8), seeds=(8, 16))
    lines = format_plan(p).splitlines()
    head = next(i for i, line in enumerate(lines) if line.strip().startswith("periods  seeds"))
    assert lines[head].rstrip().endswith("to run it")
    for line in lines[head + 3:head + 5]:  # under the rule and the pilot, each printed layout ends with its overrides, ready to paste
        k, n = line.split()[:2]
        assert line.rstrip().endswith(design_overrides(int(k), int(n) if n != "-" else 16, 4))
    (f / "spec.yaml").write_text("name: pilot\n")  # a sweep's pilot: its config keys live under `config:`
    assert "config.data.folds.k=" in format_plan(plan(f, target_mde=0.3, periods=(4, 8), seeds=(8, 16)))


def test_the_cost_reads_only_recorded_time(tmp_path):
    from tune_gems.analysis.plan import _cost
    from tune_gems.analysis.read.load import load_experiment

    exp = load_experiment(_pilot(tmp_path / "pilot"))
    exp.history.loc[exp.history.index[:2], "train_s"] = [-922.0, np.inf]  # past the loader: an Experiment built by hand
    cost = _cost(exp)
    assert cost.per_member_iteration == pytest.approx(TRAIN_S / (IPE * 5 * 2 * 16))
    exp.history["train_s"] = np.nan
    assert _cost(exp) is None


def test_a_pilot_without_its_verdict_metric_says_which_it_used(tmp_path):
    f = _pilot(tmp_path / "pilot")
    m = pd.read_parquet(f / "members.parquet").assign(val_alpha_sharpe=np.nan)
    m.to_parquet(f / "members.parquet", index=False)
    p = plan(f, target_mde=0.3, periods=(8,), seeds=(16,))
    assert any("val_sharpe used instead" in n for n in p.notes)
    assert "note: val_alpha_sharpe" in format_plan(p)


def test_a_pilot_whose_pairs_all_tie_is_refused(tmp_path):
    from tune_gems.contracts.errors import DataError

    f = _pilot(tmp_path / "pilot")
    m = pd.read_parquet(f / "members.parquet").assign(val_alpha_sharpe=0.0, val_sharpe=0.0)  # nobody ever traded
    m.to_parquet(f / "members.parquet", index=False)
    with pytest.raises(DataError, match="no gem has a pooled power statement"):
        plan(f, target_mde=0.3)


def test_a_pilot_over_histories_lists_one_period_per_history_and_refuses_what_the_rule_would(tmp_path):
    """Three histories of one file (one calendar) x 2 folds: the pilot's own layout is listed with
    analyze's MDE and refused (2 shared periods); one period per history is refused on one calendar
    and priced on histories of their own calendars; a row with more histories says what to add."""
    folder = history_scenario(tmp_path / "pilot", [h[:2] for h in THREE], noise=0.2)
    p = plan(folder, histories=(8,), periods=(1, 6), seeds=(12, 48))
    v = analyze(folder).verdicts.set_index("gem")
    g = p.gems[0]
    assert (p.histories, p.periods, p.seeds, g.gem) == (3, 2, 12, GEM)
    assert (g.mde, g.two_stage) == (float(v.at[GEM, "mde"]), float(v.at[GEM, "mde_two_stage"]))
    assert np.isfinite(g.inputs.calendar)  # the calendar part the verdict carried
    d = p.designs
    pilot = d[d["pilot"]].iloc[0]
    assert (pilot["histories"], pilot["periods"], pilot["calendars"]) == (3, 2, ONE)
    assert pilot["refused"].startswith("fewer than 6 calendar periods")
    one = d[d["periods"] == 1]
    assert (one[one["calendars"] == ONE]["refused"] != "").all()
    assert one[(one["calendars"] == OWN) & (one["histories"] == 8)]["refused"].eq("").all()
    assert d[(d["histories"] == 3) & (d["periods"] == 1) & (d["calendars"] == OWN)]["refused"].iloc[0].startswith(
        "fewer than 4 calendar periods")
    assert d["histories"].min() == 3  # never fewer histories than the pilot trains
    text = format_plan(p)
    assert "3 price histories x 2 period(s) x 12 seeds" in text and "the rule refuses it" in text
    rows = [line for line in text.splitlines() if line.startswith("  8 ")]
    assert rows and all("needs 5 more price histories than the pilot's file has" in r for r in rows if " one " in r)
    assert all("needs 8 histories on their own calendars" in r for r in rows if " own " in r)


def test_a_layout_of_more_histories_on_one_calendar_names_the_files_next_price_columns(tmp_path):
    """The pilot's histories are three columns of one file: a layout of more histories on that
    calendar trains the file's next price columns (the overrides run the design they list)."""
    folder = history_scenario(tmp_path / "pilot", [h[:2] for h in THREE], noise=0.2)
    prices = tmp_path / "closes.csv"
    names = ["A", "B", "C", "D", "E", "F", "G", "H"]
    pd.DataFrame({"date": pd.date_range("2001-01-01", periods=30).astype(str),
                  **{c: np.linspace(10, 20, 30) + i for i, c in enumerate(names)}}).to_csv(prices, index=False)
    pd.DataFrame({"history": [0, 1, 2], "name": ["a", "b", "c"], "source": str(prices), "column": ["C", "A", "B"],
                  "rows": 30}).to_parquet(folder / "histories.parquet", index=False)
    p = plan(folder, histories=(6, 12), periods=(6,), seeds=(12,))
    assert p.columns == ("C", "A", "B", "D", "E", "F", "G", "H")
    text = format_plan(p)
    six = [line for line in text.splitlines() if line.startswith("  6 ") and " one " in line]
    assert six and all(line.rstrip().endswith("data.price_columns=[C,A,B,D,E,F] " + design_overrides(6, 12, p.epochs))
                       for line in six), six
    assert all("needs 9 more price histories" in line for line in text.splitlines() if line.startswith("  12 ") and " one " in line)
    assert "with confirmation (a keep the held-out stage confirms too)" in text
