"""The plan step (issue 30 item 2): from a finished pilot with folds, the designs (periods x
seeds x epochs) that reach a target MDE with the pooled test, and what they cost on the pilot's
own recorded time per member-iteration."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fake_results as fr  # noqa: E402

from tune_gems.analysis.plan import format_plan, plan  # noqa: E402
from tune_gems.analysis.rules.power import pooled_mde  # noqa: E402

TRAIN_S, EVAL_S, IPE = 2.0, 0.5, 50


def _pilot(folder, effects=(0.5, 0.3, 0.7, 0.4, 0.6)):
    """A 5-fold pilot of g12 (16 seeds per arm), with the recorded time a run writes."""
    f = fr.fold_scenario(folder, list(effects))
    h = pd.read_parquet(f / "history.parquet").assign(train_s=TRAIN_S, eval_s=EVAL_S)
    h.to_parquet(f / "history.parquet", index=False)
    t = pd.read_parquet(f / "trials.parquet").assign(**{"trainer.iterations_per_epoch": IPE})
    t.to_parquet(f / "trials.parquet", index=False)
    return f


def test_the_plan_states_each_designs_pooled_mde_and_cost(tmp_path):
    p = plan(_pilot(tmp_path / "pilot"), target_mde=0.2)
    assert (p.periods, p.seeds, p.arms, p.epochs) == (5, 16, 2, 4) and p.cost is not None
    members = 5 * 2 * 16  # the pilot's population
    assert p.cost.per_member_iteration == pytest.approx(TRAIN_S / (IPE * members))
    assert p.cost.per_member_eval == pytest.approx(EVAL_S / members)
    g = p.parts[0]
    assert g.gem == "g12" and g.period > 0 and g.within > 0
    for _, r in p.designs.sample(10, random_state=0).iterrows():
        mde = pooled_mde(g.components(int(r["window"])), int(r["periods"]), r["seeds"] * (1 - g.tied_share),
                         df=g.df_per_period * (r["periods"] - 1), level=0.05, power=0.8)
        assert r["mde g12"] == pytest.approx(mde)
        assert r["seconds"] == pytest.approx(r["epochs"] * r["members"] * (IPE * TRAIN_S / (IPE * members) + EVAL_S / members))
        assert r["reaches"] == (r["mde"] <= 0.2)
    # the periods, not the seeds, are what lowers it: at the pilot's K more seeds barely help
    at_pilot = p.designs[(p.designs["periods"] == 5) & (p.designs["epochs"] == 4)].sort_values("seeds")
    assert at_pilot["mde"].iloc[-1] > 0.8 * at_pilot["mde"].iloc[0]
    more = p.designs[(p.designs["periods"] == 16) & (p.designs["seeds"] == 16) & (p.designs["epochs"] == 4)]
    assert more["mde"].iloc[0] < 0.7 * at_pilot[at_pilot["seeds"] == 16]["mde"].iloc[0]
    text = format_plan(p)
    assert "designs that reach MDE <= 0.2" in text and "floor with infinitely many seeds" in text
    assert "s per member-iteration" in text and "more periods, not more seeds" in text


def test_plan_command_and_its_refusals(tmp_path, capsys):
    from tune_gems.commands.cli import main

    f = _pilot(tmp_path / "pilot")
    assert main(["plan", str(f), "--target-mde", "0.3"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Plan from the pilot") and "periods  seeds  epochs" in out
    assert main(["plan", str(f), "--target-mde", "-1"]) == 2
    assert capsys.readouterr().err.strip() == "tune-gems: error: --target-mde: must be a positive number, got -1.0"
    one = fr.wire_scenario(tmp_path / "one_fold")
    assert main(["plan", str(one)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "one validation period: the period spread cannot be estimated" in err[0]


def test_a_pilot_without_recorded_time_is_planned_uncosted(tmp_path):
    f = fr.fold_scenario(tmp_path / "pilot", [0.5, 0.3, 0.7, 0.4])
    p = plan(f, target_mde=0.3)
    assert p.cost is None and np.isnan(p.designs["seconds"]).all()
    assert any("not costed" in n for n in p.notes)


def test_each_design_carries_the_overrides_that_run_it(tmp_path):
    from tune_gems.analysis.plan import design_overrides

    f = _pilot(tmp_path / "pilot")
    p = plan(f, target_mde=0.3)
    for _, r in p.designs.iterrows():
        assert r["overrides"] == (f"data.folds.k={r['periods']} trainer.population={r['seeds']} "
                                  f"trainer.epochs={r['epochs']}")
    lines = format_plan(p).splitlines()
    head = next(i for i, line in enumerate(lines) if line.strip().startswith("periods  seeds"))
    assert lines[head].rstrip().endswith("overrides that run it")
    for line in lines[head + 1:head + 4]:  # each printed design ends with its overrides, ready to paste
        assert line.rstrip().endswith(design_overrides(*map(int, line.split()[:3])))
    (f / "spec.yaml").write_text("name: pilot\n")  # a sweep's pilot: its config keys live under `config:`
    assert plan(f, target_mde=0.3).designs["overrides"].str.startswith("config.data.folds.k=").all()


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
    p = plan(f, target_mde=0.3)
    assert any("val_sharpe used instead" in n for n in p.notes)
    assert "note: val_alpha_sharpe" in format_plan(p)


def test_a_pilot_whose_pairs_all_tie_is_refused(tmp_path):
    from tune_gems.contracts.errors import DataError

    f = _pilot(tmp_path / "pilot")
    m = pd.read_parquet(f / "members.parquet").assign(val_alpha_sharpe=0.0, val_sharpe=0.0)  # nobody ever traded
    m.to_parquet(f / "members.parquet", index=False)
    with pytest.raises(DataError, match="no gem has informative seed pairs .* in two or more folds"):
        plan(f, target_mde=0.3)
