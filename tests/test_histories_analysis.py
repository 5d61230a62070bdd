"""The analysis over several price histories (issue 37 item 3), on small synthetic experiments:
pairs never cross histories, one history pairs exactly as before, a family over 2+ histories is
decided by the nested rule through `decide` (its words, reason and MDE), the market-noise
evidence and the plot tables key per history, and `plan` prices designs with histories."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fake_results import ArmTrial, _arm_tables, paired_noise, seed_values, write_arms_experiment
from tune_gems.analysis.pairs.pairing import build_cells, by_history_fold
from tune_gems.analysis.pairs.selectors import wiring_pairs
from tune_gems.analysis.read.load import load_experiment
from tune_gems.analysis.render.report import verdict_line
from tune_gems.analysis.render.plot_tables import improvement_table, learning_curve_table, paired_seed_table
from tune_gems.analysis.rules.decision import Evidence, decide
from tune_gems.analysis.rules.histories import HistoryComponents, history_components
from tune_gems.analysis.rules.power import history_mde
from tune_gems.analysis.rules.settings import Thresholds
from tune_gems.analysis.verdicts.family import Sources
from tune_gems.analysis.verdicts.gem_verdicts import gem_verdict_tables
from tune_gems.analysis.verdicts.history_verdicts import history_family
from tune_gems.analysis.verdicts.verdict_market_noise import ACROSS_HISTORIES, EvalReturns, market_evidence

GEM = "g12"
COLUMN = "val_alpha_sharpe"


def history_scenario(folder: Path, effects: list[list[float]], *, n: int = 12, noise: float = 0.05,
                     history_column: bool = True) -> Path:
    """One trial whose members span len(effects) histories x len(effects[h]) folds x arms control /
    wired (GEM wired) x n seeds: in fold k of history h, wired = control + effects[h][k] + symmetric
    noise; every (history, fold) has its own control level (its own market and period)."""
    frames, first = [], None
    arms = {"control": {}, "wired": {f"gems.{GEM}.mode": "wire", f"gems.{GEM}.weight": 0.1}}
    for h, per_fold in enumerate(effects):
        for k, eff in enumerate(per_fold):
            base = seed_values(n, seed=100) + 0.3 * k - 0.7 * h
            vals = {"control": list(base), "wired": list(base + eff + paired_noise(n, seed=10 + k + 5 * h, sd=noise))}
            tables = _arm_tables(folder.name, [ArmTrial("t0", arms, vals, seed=3)], True)
            m = tables[2].assign(fold=k)
            if history_column:
                m["history"] = h
            m["member"] = m["member"] + (h * len(per_fold) + k) * 2 * n
            frames.append(m)
            first = first or tables
    write_arms_experiment(folder, [ArmTrial("t0", {"control": {}}, {"control": [0.0] * n}, seed=3)])
    first[0].to_parquet(folder / "trials.parquet", index=False)
    first[1].to_parquet(folder / "history.parquet", index=False)
    first[3].to_parquet(folder / "arms.parquet", index=False)
    pd.concat(frames, ignore_index=True).to_parquet(folder / "members.parquet", index=False)
    return folder


def _cells(folder: Path):
    exp = load_experiment(folder)
    return exp, build_cells(exp.trials, exp.members, exp.arms)


def test_pairs_never_cross_histories_and_a_seed_is_one_unit_over_them(tmp_path):
    exp, cells = _cells(history_scenario(tmp_path / "two", [[0.4, 0.4], [-0.2, -0.2]]))
    pr = wiring_pairs(cells, GEM, column=COLUMN, k=1)
    t = cells.table.set_index("cell")
    assert (t.loc[pr.pairs["cell_hi"], "history"].to_numpy() == t.loc[pr.pairs["cell_lo"], "history"].to_numpy()).all()
    assert pr.n == 12 and pr.n_pairs == 12 * 4 and pr.n_histories == 2  # one unit per seed, 4 (history, fold) pairs each
    np.testing.assert_allclose(pr.diffs, 0.1, atol=0.1)  # the mean of +0.4, +0.4, -0.2, -0.2 per seed
    parts = dict(by_history_fold(pr, cells))
    assert sorted(parts) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for (h, _), part in parts.items():
        np.testing.assert_allclose(np.median(part.diffs), [0.4, -0.2][h], atol=0.05)


def test_one_history_pairs_exactly_as_without_a_history_column(tmp_path):
    with_col = wiring_pairs(_cells(history_scenario(tmp_path / "a", [[0.3, -0.1, 0.2]]))[1], GEM, column=COLUMN, k=1)
    without = wiring_pairs(_cells(history_scenario(tmp_path / "b", [[0.3, -0.1, 0.2]], history_column=False))[1], GEM,
                           column=COLUMN, k=1)
    np.testing.assert_array_equal(with_col.diffs, without.diffs)
    assert (with_col.n_pairs, with_col.n_contexts, with_col.n_histories) == (without.n_pairs, without.n_contexts, 1)
    assert with_col.design() == without.design()


THREE = [[0.5, 0.45, 0.5, 0.55, 0.45, 0.5], [0.6, 0.55, 0.6, 0.5, 0.55, 0.6], [0.4, 0.5, 0.45, 0.4, 0.5, 0.45]]
"""A planted effect that varies a little between histories and folds (the spreads, the calendar part
of the 6 periods the histories share included, are estimated)."""


@pytest.mark.parametrize("effects,word,why", [
    (THREE, "keep wired", "pooled over 3 histories x 6 folds"),
    ([h[:2] for h in THREE], "insufficient data", "too few periods over 3 histories x 2 folds"),
    (THREE[:2], "insufficient data", "too few periods over 2 histories x 6 folds")])
def test_a_family_over_histories_is_decided_by_the_nested_rule(tmp_path, effects, word, why):
    exp, cells = _cells(history_scenario(tmp_path / "h", effects, noise=0.2))
    th = Thresholds()
    v, fold_rows, _family = gem_verdict_tables(cells, list(exp.gems), th, exp.members)
    row = v.set_index("gem").loc[GEM]
    h, k = len(effects), len(effects[0])
    # the same decision straight from the rule on the same pairs: the verdict is decide()'s nested branch
    pr = wiring_pairs(cells, GEM, column=COLUMN, k=th.window_length)
    hf = history_family([pr], cells)
    dec = decide(Evidence(diffs=[pr.diffs[None, :]], histories=hf.data), th)
    assert row["verdict"] == str(dec.verdict[0, 0]) == word
    assert row["pooled_effect"] == pytest.approx(float(dec.pooled["mu"][0, 0]))
    assert row["histories"] == h and row["folds"] == k
    assert row["period"].startswith(why) and why in row["reason"], row["reason"]
    assert row["calendar_periods"] == k  # the columns of one file: fold k of every history is one period
    # its MDE is the nested rule's (`history_mde` on the components the rule pooled, the calendar part
    # included), never the seed rule's, and the two-stage MDE stands beside it
    c = history_components(hf.data, dec.histories)
    comp = HistoryComponents(*(float(np.asarray(x)[0, 0]) for x in (c.history, c.period, c.within, c.seed, c.calendar)),
                             bool(c.shared[0, 0]))
    assert comp.shared and row["var_calendar"] == pytest.approx(comp.calendar)
    n = float(np.mean([fd.n_informative[0, 0][fd.n_informative[0, 0] > 0].mean() for fd in hf.data.folds]))
    want = history_mde(comp, h, k, n, contrasts=1, level=th.alpha, power=th.power)
    assert row["mde"] == pytest.approx(want, rel=1e-9)
    assert row["mde_two_stage"] >= row["mde"]  # a keep the held-out stage confirms too: never below
    assert sorted(set(zip(fold_rows["history"], fold_rows["fold"]))) == [(a, b) for a in range(h) for b in range(k)]
    # the console's first line names the histories, or why there are too few
    named = f"pooled over {h} histories x {k} folds:" if word == "keep wired" else "(too few "
    assert named in verdict_line(row.to_dict() | {"gem": GEM})


def test_market_evidence_over_two_histories_is_the_pooled_rules_and_a_member_is_found_in_its_history(tmp_path):
    exp, cells = _cells(history_scenario(tmp_path / "one_fold", [[0.3], [0.1]]))
    pr = wiring_pairs(cells, GEM, column=COLUMN, k=1)
    ev = market_evidence(pr, cells, None, column=COLUMN, k=1, confidence=0.95)
    assert ev.status == ACROSS_HISTORIES and not ev.ok
    p = 4
    returns = EvalReturns(epochs=np.array([1]), positions=np.zeros((1, p, 3), np.float32), diverged=np.zeros((1, p), bool),
                          asset=np.zeros((p, 3), np.float32), arm=np.array(["a", "a", "a", "a"]),
                          seed_index=np.array([0, 1, 0, 1]), cost=0.0, periods_per_year=252.0,
                          history=np.array([0, 0, 1, 1]))
    assert [returns.member("a", s, history=h) for h in (0, 1) for s in (0, 1)] == [0, 1, 2, 3]
    assert returns.member("a", 0, fold=1) is None


def test_the_plot_tables_key_per_history(tmp_path):
    exp, cells = _cells(history_scenario(tmp_path / "two", [[0.4, 0.4], [-0.2, -0.2]]))
    pairs = paired_seed_table(gem_verdict_tables(cells, list(exp.gems), Thresholds(last_k=1), exp.members)[2])
    assert sorted(set(zip(pairs["history"], pairs["fold"]))) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    np.testing.assert_allclose(pairs.groupby("history")["difference"].median().to_numpy(), [0.4, -0.2], atol=0.05)
    curves = learning_curve_table(exp.members)
    per_curve = curves.groupby(["arm", "history", "fold"])["epoch"].count()  # one curve per arm, history and fold
    assert len(per_curve) == 2 * 2 * 2 and set(per_curve) == {4} and set(curves["n_seeds"]) == {12}
    imp = improvement_table(pairs).iloc[0]
    assert (imp["folds"], imp["histories"]) == (2, 2) and imp["n_pairs"] == 12 * 4


def test_every_table_reason_plot_and_console_line_names_the_histories(tmp_path):
    from tune_gems.analysis.analyze import analyze
    from tune_gems.analysis.describe.variance import final_members
    from tune_gems.analysis.read.labels import history_names, with_history_names
    from tune_gems.analysis.render.figures import LEARNING_CURVES_CSV, PAIRED_SEEDS_CSV, analysis_figures, plot_tables
    from tune_gems.analysis.render.plots import sharpe_distributions
    from tune_gems.analysis.render.report import format_verdict_table

    folder = history_scenario(tmp_path / "two", [[0.4, 0.4], [-0.2, -0.2]])
    pd.DataFrame({"history": [0, 1], "name": ["sp500", "wti"]}).to_parquet(folder / "histories.parquet")
    res = analyze(folder, n_boot=50)
    folds = res.fold_effects
    assert list(zip(folds["history"], folds["history_name"], folds["fold"])) == [
        (0, "sp500", 0), (0, "sp500", 1), (1, "wti", 0), (1, "wti", 1)]
    reason = res.verdicts.set_index("gem").at[GEM, "fold_effects"]
    assert reason.startswith("sp500 fold 0: +0.4") and "; wti fold 1: -0.2" in reason, reason
    console = format_verdict_table(res.verdicts, fold_effects=folds).splitlines()
    per = next(x for x in console if x.startswith("    per history"))
    assert per.startswith("    per history, folds 0/1: sp500 +0.4") and ", wti -0.2" in per, per
    tables = plot_tables(res)
    for name in (PAIRED_SEEDS_CSV, LEARNING_CURVES_CSV):
        t = tables[name]
        assert dict(zip(t["history"], t["history_name"])) == {0: "sp500", 1: "wti"}, name
    figs = {file: fig for (_, file), fig in analysis_figures(res, tables).items()}
    ticks = [t.get_text() for t in figs["fold_forest.png"].axes[0].get_yticklabels()]
    assert [t.split(":")[0] for t in ticks[:4]] == ["sp500 fold 0", "sp500 fold 1", "wti fold 0", "wti fold 1"]
    assert [ax.get_title().split("\n")[1] for ax in figs["learning_curves.png"].axes] == [
        "sp500 fold 0", "sp500 fold 1", "wti fold 0", "wti fold 1"]
    legend = [t.get_text() for t in figs["paired_seeds.png"].legends[0].get_texts()]
    assert legend == ["sp500", "wti", "fold 0", "fold 1"]  # colour: the history; marker: the fold
    final = with_history_names(final_members(res.experiment.members, res.experiment.trials), history_names(res.experiment.histories))
    titles = [ax.get_title() for ax in sharpe_distributions(final).axes]
    assert titles == [f"{seg}, {h} fold {f}" for h in ("sp500", "wti") for f in (0, 1) for seg in ("validation", "test")]


def test_the_learning_curves_draw_one_panel_per_fold_of_each_history(tmp_path):
    from tune_gems.analysis.render.plots import learning_curves

    exp, _ = _cells(history_scenario(tmp_path / "two", [[0.4, 0.4], [-0.2, -0.2]]))
    curves = learning_curve_table(exp.members)
    fig = learning_curves(curves)
    titles = [ax.get_title() for ax in fig.axes]
    assert [t.split("\n")[1] for t in titles] == [f"history {h} fold {f}" for h in (0, 1) for f in (0, 1)]
    lines = {ln.get_gid(): ln for ax in fig.axes for ln in ax.get_lines() if ln.get_gid()}
    one = curves[(curves["arm"] == "wired") & (curves["history"] == 1) & (curves["fold"] == 0)].sort_values("epoch")
    np.testing.assert_allclose(lines["curve:t0:wired:1/0"].get_ydata(), one["median"].to_numpy())  # one history's curve


def test_confirm_plans_its_seeds_with_the_nested_rules_mde(tmp_path):
    from tune_gems.analysis.verdicts.search_choice import confirmation_power, discovery_power_inputs

    exp, cells = _cells(history_scenario(tmp_path / "search", THREE, noise=0.2))
    th = Thresholds()
    v = gem_verdict_tables(cells, list(exp.gems), Thresholds(), exp.members)[0]
    row = v.set_index("gem").loc[GEM]
    inputs = discovery_power_inputs(row.to_dict() | {"gem": GEM})
    assert (inputs.histories, inputs.folds, inputs.history_tau2) == (3, 6, pytest.approx(float(row["var_history"])))
    assert inputs.calendar == pytest.approx(float(row["var_calendar"]))  # the calendar part the verdict carried
    (plan,) = confirmation_power(v.assign(p_value=v["p_value"]), exp.trials, [GEM], one_history=True, alpha=th.alpha,
                                 power=th.power, seeds=None, default_seeds=12)
    assert plan.discovery_mde == pytest.approx(float(row["mde"]), rel=1e-9)  # the verdict's own, history_mde's
    assert plan.note.startswith("the confirmation (3 histories x 6 fold(s), the same price histories")
    assert plan.confirmation_mde <= plan.discovery_mde


EXPANDING = pd.DataFrame(dict(fold=[0, 1], train_runs=["0:2260", "0:3260"], train_rows=[2260, 3260],
                              group_rows=[1000, 1000]))
"""Two expanding walk-forward folds of 1000 validation rows (the 3-history S&P 500 / NASDAQ / WTI
run's layout): both train from row 0, so they share training rows."""


def test_a_historys_folds_that_share_training_rows_need_no_factor_over_histories(tmp_path):
    """Expanding folds share training rows; over several histories the spread between them measures what
    a history's folds share, so no Nadeau-Bengio factor is put on anything: the verdict with the fold
    table is the verdict without it."""
    from tune_gems.analysis.verdicts.walk_forward import experiment_overlap

    folder = history_scenario(tmp_path / "h", [h[:2] for h in THREE], noise=0.2)
    exp, cells = _cells(folder)

    def verdict(overlap):
        return gem_verdict_tables(cells, list(exp.gems), Thresholds(), exp.members, sources=Sources(overlap=overlap))[0].set_index("gem").loc[GEM]

    bare = verdict(experiment_overlap(exp.folds.table))
    EXPANDING.assign(experiment=folder.name, trial_id="t0").to_parquet(folder / "folds.parquet", index=False)
    row = verdict(experiment_overlap(load_experiment(folder).folds.table))
    keys = ["verdict", "pooled_effect", "pooled_ci_low", "pooled_ci_high", "mde", "fold_overlap", "reason"]
    pd.testing.assert_series_equal(row[keys], bare[keys])
    assert row["fold_overlap"] == 1.0
    assert "share training rows" not in row["reason"]


def test_a_fold_table_over_several_histories_is_read_per_history_the_largest_overlap_per_pair(tmp_path):
    from tune_gems.analysis.rules.periods import fold_overlap
    from tune_gems.analysis.verdicts.walk_forward import experiment_overlap

    folder = history_scenario(tmp_path / "h", [h[:2] for h in THREE[:2]])
    short = EXPANDING.assign(train_runs=["0:1000", "0:2000"], train_rows=[1000, 2000])  # a shorter history
    pd.concat([EXPANDING.assign(history=0), short.assign(history=1)]).assign(
        experiment=folder.name, trial_id="t0").to_parquet(folder / "folds.parquet", index=False)
    exp = load_experiment(folder)
    found = experiment_overlap(exp.folds.table)
    np.testing.assert_allclose(found.corr, np.maximum(fold_overlap(EXPANDING).corr, fold_overlap(short).corr))
    assert found.folds == (0, 1)


def test_the_analysis_records_each_history_pairs_return_correlation_per_window(tmp_path):
    """history_correlations.csv: per validation window and the test segment, each pair of histories'
    daily return correlation, read from the price files the history table names (beside the
    experiment when the run's path is relative), and the verdict rows carry the medians."""
    from tune_gems.analysis.analyze import analyze
    from tune_gems.analysis.describe.history_returns import history_correlations

    folder = history_scenario(tmp_path / "runs" / "h", THREE, noise=0.2)
    rng = np.random.default_rng(0)
    common, own = rng.normal(0, 0.01, 700), rng.normal(0, 0.01, (3, 700))
    r = np.stack([common + 0.3 * own[0], common + 0.3 * own[1], own[2]])  # a and b move together, c alone
    prices = pd.DataFrame(100 * np.exp(np.cumsum(r, 1)).T, columns=["a", "b", "c"])
    prices.insert(0, "date", pd.bdate_range("2010-01-01", periods=700))
    prices.to_csv(tmp_path / "runs" / "closes.csv", index=False)  # the run read "closes.csv" from runs/
    pd.DataFrame({"history": [0, 1, 2], "name": ["a", "b", "c"], "source": "closes.csv", "column": ["a", "b", "c"],
                  "first": "", "last": "", "rows": 700}).to_csv(folder / "histories.csv", index=False)
    starts = np.arange(6) * 80 + 100
    pd.DataFrame({"fold": range(6), "val_start": starts, "val_end": starts + 80, "test_start": 620,
                  "test_end": 700}).to_csv(folder / "folds.csv", index=False)
    def table():
        exp = load_experiment(folder)
        return history_correlations(exp.histories, exp.folds.dates, exp.paths, exp.labels)

    t = table()
    assert len(t) == 3 * 7 and set(t["segment"]) == {"validation", "test"} and (t["note"] == "").all()
    by_pair = t.groupby(["name_a", "name_b"])["correlation"]
    assert by_pair.min()[("a", "b")] > 0.8 and by_pair.max()[("a", "c")] < 0.5
    row = analyze(folder).verdicts.set_index("gem").loc[GEM]
    assert row["return_corr_val"] == pytest.approx(t[t["segment"] == "validation"]["correlation"].median())
    pd.DataFrame({"history": [0, 1, 2], "name": ["a", "b", "c"], "source": "gone.csv", "column": ["a", "b", "c"]}) \
        .to_csv(folder / "histories.csv", index=False)
    gone = table()
    assert gone["correlation"].isna().all() and (gone["note"] == "price file not found").all()
