"""Walk-forward results as one row per gem and fold (issue 31 item 3): fold_effects.csv holds
the period rule's own per-fold estimates beside the verdict's pooled interval, the forest plot
draws exactly that table (the pooled diamond = verdicts.csv's pooled interval), and report.md
leads with it and shows the per-fold table; through the CLI's `main`."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import fake_results as fr
from sweep_fixtures import cli_in_process
from tune_gems.analysis.analyze import analyze
from tune_gems.analysis.render.figures import analysis_figures, plot_tables
from tune_gems.analysis.verdicts.fold_effects import FOLD_EFFECT_COLUMNS
from tune_gems.analysis.rules.periods import fold_estimates
from tune_gems.analysis.verdicts.walk_forward import fold_text

EFFECTS = [0.5, 0.3, 0.6, 0.4]
DATES = [("2012-01-10", "2013-01-08"), ("2013-01-09", "2014-01-06"), ("2014-01-07", "2015-01-02"),
         ("2015-01-05", "2015-12-30")]


def _with_fold_table(folder):
    """The folds.parquet a sweep writes beside its members (one trial x fold: its validation dates)."""
    pd.DataFrame({"experiment": folder.name, "trial_id": "t0", "fold": range(len(DATES)),
                  "val_first": [a for a, _ in DATES], "val_last": [b for _, b in DATES]}).to_parquet(
        folder / "folds.parquet", index=False)
    return folder


@pytest.fixture(scope="module")
def folded(tmp_path_factory):
    folder = _with_fold_table(fr.fold_scenario(tmp_path_factory.mktemp("folds") / "e", EFFECTS, n=12))
    m = pd.read_parquet(folder / "members.parquet")  # fold 1: a third of the pairs tie exactly
    tie = (m["fold"] == 1) & (m["seed_index"] < 4)
    ctrl = m[tie & (m["arm"] == "control")].set_index(["epoch", "seed_index"])["val_alpha_sharpe"]
    w = tie & (m["arm"] == "wired")
    m.loc[w, "val_alpha_sharpe"] = [ctrl[(e, s)] for e, s in zip(m.loc[w, "epoch"], m.loc[w, "seed_index"])]
    m.to_parquet(folder / "members.parquet", index=False)
    return folder, analyze(folder, n_boot=50)


def test_one_row_per_gem_and_fold_from_the_rules_own_estimates(folded):
    folder, res = folded
    t, v = res.fold_effects, res.verdicts.set_index("gem")
    assert list(t.columns) == FOLD_EFFECT_COLUMNS and list(t["fold"]) == [0, 1, 2, 3] and set(t["gem"]) == {"g12"}
    assert [(r["start"], r["end"]) for _, r in t.iterrows()] == DATES
    # verdicts.csv's one-string cell is written from these very rows
    assert v.at["g12", "fold_effects"] == "; ".join(fold_text(r) for _, r in t.iterrows())
    # each fold's effect is the Hodges-Lehmann estimate of that fold's seed pairs (paired_seeds.csv)
    pairs = plot_tables(res)["paired_seeds.csv"]
    for _, r in t.iterrows():
        d = pairs[pairs["fold"] == r["fold"]]["difference"].to_numpy(float)
        est = fold_estimates(d[None, :])
        assert r["effect"] == pytest.approx(est["theta"][0]) and r["seeds"] == est["n_informative"][0]
        assert r["pairs"] == len(d) and r["tied_share"] == pytest.approx(np.mean(d == 0))
        assert r["ci_low"] <= r["effect"] <= r["ci_high"]
    assert t.loc[t["fold"] == 1, "ties"].item() == 4 and t.loc[t["fold"] == 1, "seeds"].item() == 8
    # the pooled columns are the verdict's
    for c in ("pooled_effect", "pooled_ci_low", "pooled_ci_high", "pooled_ci_level"):
        assert (t[c] == v.at["g12", c]).all(), c
    assert (t["verdict"] == v.at["g12", "verdict"]).all()


def test_the_forest_plot_draws_the_table_and_the_verdicts_pooled_interval(folded):
    from test_plots_drawn import by_gid

    _, res = folded
    t, v = res.fold_effects, res.verdicts.set_index("gem")
    fig = analysis_figures(res, plot_tables(res))[("Effect per fold", "fold_forest.png")]
    span = fig.axes[0].get_xlim()[1]
    for _, r in t.iterrows():
        line = by_gid(fig, f"fold:g12:{r['fold']}")[f"fold:g12:{r['fold']}"]
        want = [float(np.clip(r["ci_low"], -span, span)), float(np.clip(r["ci_high"], -span, span))]
        assert list(line.get_xdata()) == pytest.approx(want)
    lo, e, hi = (v.at["g12", c] for c in ("pooled_ci_low", "pooled_effect", "pooled_ci_high"))
    assert np.isfinite([lo, e, hi]).all() and lo < e < hi
    diamond = by_gid(fig, "pooled:g12")["pooled:g12"].get_xy()[:4]
    np.testing.assert_allclose(diamond[:, 0], [lo, e, hi, e])  # the interval the verdict used
    rope = fig.findobj(lambda a: a.get_label() == f"ROPE +-{res.settings['rope']:g}")
    assert rope  # the ROPE band


def test_one_fold_gives_an_empty_table_and_no_forest(tmp_path):
    res = analyze(fr.fold_scenario(tmp_path / "one", [0.5], n=8), n_boot=50)
    assert not len(res.fold_effects) and list(res.fold_effects.columns) == FOLD_EFFECT_COLUMNS
    assert analysis_figures(res, plot_tables(res))[("Effect per fold", "fold_forest.png")] is None


def test_analyze_writes_the_table_and_leads_the_report_with_the_forest(folded, tmp_path):
    folder, res = folded
    out = tmp_path / "a"
    run = cli_in_process("analyze", str(folder), "--n-boot", "50", "--out", str(out))
    assert run.returncode == 0, run.stderr[-2000:]
    table = pd.read_csv(out / "fold_effects.csv", keep_default_na=False, na_values=[""])
    assert (out / "fold_forest.png").read_bytes()[:4] == b"\x89PNG"
    np.testing.assert_allclose(table["effect"].to_numpy(float), res.fold_effects["effect"].to_numpy(float))
    verdicts = pd.read_csv(out / "verdicts.csv").set_index("gem")
    assert table["pooled_ci_low"].iloc[0] == pytest.approx(verdicts.at["g12", "pooled_ci_low"])
    assert table["pooled_ci_high"].iloc[0] == pytest.approx(verdicts.at["g12", "pooled_ci_high"])
    report = (out / "report.md").read_text()
    lead = report[report.index("## Plots first"):report.index("## Experiments read")]
    assert lead.index("](fold_forest.png)") < lead.index("](paired_seeds.png)")  # the first plot
    section = report[report.index("### Over periods and out of sample"):]
    assert "| gem | fold | start | end | effect |" in section and f"| g12 | 3 | {DATES[3][0]} | {DATES[3][1]} |" in section
