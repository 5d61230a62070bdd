"""Each plot of the analysis is drawn from the table it claims (issue 31 item 4): the plotted
data is read back from the matplotlib artists (tagged with a gid naming their table rows) and
compared with the table; the tables themselves with the verdict's own comparison; every figure
has a title, a legend and labelled axes; the report leads with the plots; through the CLI's `main`."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_hex

import fake_results as fr
from sweep_fixtures import cli_in_process
from tune_gems.analysis.analyze import analyze
from tune_gems.analysis.render.figures import (
    CONFIRMATION_TABLE, FINAL_VERDICTS_CSV, IMPROVEMENT_CSV, LEARNING_CURVES_CSV, PAIRED_SEEDS_CSV, PROFILES_CSV,
    analysis_figures, confirmation_data, plot_tables,
)
from tune_gems.analysis.pairs.pairing import build_cells, paired
from tune_gems.analysis.render.plot_tables import final_verdict_table, learning_curve_table, probability_of_improvement
from tune_gems.analysis.render.plots import (
    FRESH_SEEDS, FRESH_SEEDS_AND_PATHS, IMPORTANCE_FEW_TRIALS, confirmation_shrinkage, final_verdicts, fold_color,
    fold_forest, importance_bars, learning_curves, paired_seeds, sharpe_distributions,
)
from tune_gems.analysis.describe.variance import final_members

FAST = dict(n_boot=100)


def by_gid(fig, prefix: str) -> dict[str, object]:
    """{gid: artist} of every artist in `fig` whose gid starts with `prefix`."""
    found = {}
    for artist in fig.findobj(lambda a: isinstance(a.get_gid(), str) and a.get_gid().startswith(prefix)):
        found[artist.get_gid()] = artist
    return found


@pytest.fixture(scope="module")
def folded(tmp_path_factory):
    """One trial: 3 walk-forward folds x control / wired (g12) x 6 seeds; two wired seeds diverge."""
    folder = fr.fold_scenario(tmp_path_factory.mktemp("plots") / "folds", [0.3, -0.1, 0.2], n=6)
    m = pd.read_parquet(folder / "members.parquet")
    last = m["epoch"] == m["epoch"].max()
    div = last & (m["arm"] == "wired") & (m["seed_index"] == 1) & (m["fold"].isin([0, 2]))
    m.loc[div, ["diverged", "val_alpha_sharpe"]] = [True, np.nan]
    m.to_parquet(folder / "members.parquet", index=False)
    res = analyze(folder, **FAST)
    return res, plot_tables(res)


def test_the_seed_pair_table_is_the_verdicts_own_comparison(folded):
    res, tables = folded
    pairs = tables[PAIRED_SEEDS_CSV]
    assert len(pairs) == 3 * 6 and set(pairs["gem"]) == {"g12"} and set(pairs["fold"]) == {0, 1, 2}
    assert pairs["wired_diverged"].sum() == 2 and pairs.loc[pairs["wired_diverged"], "wired"].isna().all()
    exp = res.experiment
    pr = paired(build_cells(exp.trials, exp.members, exp.arms), "gems.g12.mode", "wire", "measure",
                column="val_alpha_sharpe", k=3, ignore=("gems.g12.weight",))
    assert pr.n_pairs == len(pairs)  # the pairs the verdict counted
    verdict = res.verdicts.set_index("gem").loc["g12"]
    assert int(verdict["n_pairs"]) == len(pairs) and int(verdict["wired_diverged"]) == 2
    fin = pairs.dropna(subset=["difference"])
    # per fold, wired - measured is the planted fold effect plus exactly symmetric noise
    np.testing.assert_allclose(fin.groupby("fold")["difference"].mean().to_numpy(), [0.3, -0.1, 0.2], atol=0.06)


def test_the_paired_seed_plot_draws_each_pair_coloured_by_fold(folded):
    res, tables = folded
    pairs = tables[PAIRED_SEEDS_CSV].reset_index(drop=True)
    fig = analysis_figures(res, tables)[("Seed pairs", "paired_seeds.png")]
    lines = by_gid(fig, "pair:")
    assert len(lines) == len(pairs)
    ax = fig.axes[0]
    floor = ax.get_ylim()[0]
    for i, r in pairs.iterrows():
        line = lines[f"pair:g12:{i}"]
        x, y = line.get_xdata(), np.asarray(line.get_ydata(), float)
        assert list(x) == [0, 1] and to_hex(line.get_color()) == to_hex(fold_color(r["fold"]))
        assert y[0] == pytest.approx(r["measured"])
        assert (y[1] < r["measured"] and y[1] > floor) if r["wired_diverged"] else y[1] == pytest.approx(r["wired"])
        assert (line.get_linestyle() == "--") == bool(r["wired_diverged"])
    assert [t.get_text() for t in fig.legends[0].get_texts()][:3] == ["fold 0", "fold 1", "fold 2"]  # one, under the panels


def test_learning_curves_draw_each_arms_median_and_band(folded):
    res, tables = folded
    curves = tables[LEARNING_CURVES_CSV]
    m = res.experiment.members
    one = m[(m["arm"] == "control") & (m["fold"] == 1) & (m["epoch"] == 4)]["val_alpha_sharpe"]
    row = curves[(curves["arm"] == "control") & (curves["fold"] == 1) & (curves["epoch"] == 4)].iloc[0]
    assert (row["median"], row["q25"], row["q75"], row["n_seeds"]) == pytest.approx(
        (one.median(), one.quantile(0.25), one.quantile(0.75), 6))
    fig = analysis_figures(res, tables)[("Learning curves", "learning_curves.png")]
    drawn = by_gid(fig, "curve:")
    assert len(drawn) == 3 * 2 and len(fig.axes) == 3  # (fold, arm) per trial; a panel per fold
    for (arm, fold), c in curves.groupby(["arm", "fold"]):
        c = c.sort_values("epoch")
        line = drawn[f"curve:t0:{arm}:{fold}"]
        np.testing.assert_array_equal(line.get_xdata(), c["epoch"].to_numpy())
        np.testing.assert_allclose(line.get_ydata(), c["median"].to_numpy())
        band = by_gid(fig, f"band:t0:{arm}:{fold}")[f"band:t0:{arm}:{fold}"]
        ys = band.get_paths()[0].vertices[:, 1]
        assert ys.min() == pytest.approx(np.nanmin(c["q25"])) and ys.max() == pytest.approx(np.nanmax(c["q75"]))


def test_profiles_and_the_probability_of_improvement_are_the_pairs(folded):
    res, tables = folded
    pairs, profile, imp = tables[PAIRED_SEEDS_CSV], tables[PROFILES_CSV], tables[IMPROVEMENT_CSV]
    wired = np.where(pairs["wired_diverged"], -np.inf, pairs["wired"])
    for _, r in profile[profile["side"] == "wired"].iloc[::25].iterrows():
        assert r["share_above"] == pytest.approx(np.mean(wired > r["tau"]))  # a diverged seed is below every tau
    fig = analysis_figures(res, tables)[("Performance profiles", "performance_profiles.png")]
    for side in ("measured", "wired"):
        line = by_gid(fig, f"profile:g12:{side}")[f"profile:g12:{side}"]
        s = profile[profile["side"] == side]
        np.testing.assert_allclose(line.get_xdata(), s["tau"]) and np.testing.assert_allclose(line.get_ydata(), s["share_above"])
    # P(X > Y): ties count half, -inf (diverged) is below everything
    assert probability_of_improvement(np.array([1.0, 2.0]), np.array([1.0, 0.0])) == pytest.approx(0.875)
    assert probability_of_improvement(np.array([-np.inf]), np.array([-np.inf])) == 0.5
    r = imp.iloc[0]
    per_fold = [np.mean((w > mm) + 0.5 * (w == mm)) for _, f in pairs.groupby("fold")
                for w, mm in [(np.where(f["wired_diverged"], -np.inf, f["wired"]), f["measured"].to_numpy())]]
    assert r["paired_probability"] == pytest.approx(np.mean(per_fold)) and r["n_pairs"] == len(pairs)
    fig = analysis_figures(res, tables)[("Probability of improvement", "probability_of_improvement.png")]
    for col in ("probability", "paired_probability"):
        bar = by_gid(fig, f"poi:{col}:g12")[f"poi:{col}:g12"]
        assert bar.get_x() == 0.5 and bar.get_width() == pytest.approx(r[col] - 0.5)


def test_the_sharpe_distributions_are_the_final_members_folds_apart_and_paired(tmp_path):
    from tune_gems.analysis.read.load import load_experiment

    exp = load_experiment(fr.fold_scenario(tmp_path / "f", [0.3, -0.1, 0.2], n=6))  # nobody diverged: all included
    final = final_members(exp.members, exp.trials)
    final = final[final["included"]]
    fig = sharpe_distributions(final)
    assert len(fig.axes) == 3 * 2  # a row per fold: validation, test
    wired = "g6=measure g10=measure g12=wire sn=on noisy=on | arm wired"
    for fold in (0, 1, 2):
        pts = by_gid(fig, f"members:{fold}:val_sharpe:{wired}")[f"members:{fold}:val_sharpe:{wired}"]
        want = final[(final["fold"] == fold) & (final["arm"] == "wired")]["val_sharpe"].dropna()
        np.testing.assert_allclose(np.sort(pts.get_offsets()[:, 0]), np.sort(want.to_numpy()))
    ticks = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert ticks == ["g12=measure [control]", "g12=wire [wired]"]  # short labels: what tells them apart
    assert [t.get_text() for t in fig.legends[0].get_texts()][2].startswith("one seed across its trial's arms")
    joined = by_gid(fig, "seed:0:val_sharpe:")
    assert len(joined) == 6  # a line per seed of fold 0 joins its two arms
    for s in range(6):
        seed = final[(final["fold"] == 0) & (final["seed_index"] == s)].sort_values("arm")
        np.testing.assert_allclose(sorted(joined[f"seed:0:val_sharpe:f:t0:{s}"].get_xdata()), sorted(seed["val_sharpe"]))


def test_importances_carry_a_caveat_when_the_trials_are_few():
    imp = pd.DataFrame({"study": "s", "param": ["a", "b"], "importance": [0.99, 0.01], "n_complete": 4, "note": ""})
    fig = importance_bars(imp)
    caveat = by_gid(fig, "caveat")
    assert len(caveat) == 1 and "only 4 complete trial(s)" in caveat["caveat"].get_text()
    assert by_gid(fig, "importance:s:a")["importance:s:a"].get_width() == pytest.approx(0.99)
    assert not by_gid(importance_bars(imp.assign(n_complete=IMPORTANCE_FEW_TRIALS)), "caveat")


def test_the_fold_forest_draws_the_intervals_it_is_given():
    per_fold = pd.DataFrame({"gem": "g12", "fold": [0, 1, 2], "effect": [0.3, -0.1, 0.2], "ci_low": [0.1, -0.4, -np.inf],
                             "ci_high": [0.5, 0.2, 0.6], "seeds": [6, 6, 5], "tied_share": [0.0, 0.5, 0.0],
                             "start": ["2001-01-02", "2001-07-02", "2002-01-02"],
                             "end": ["2001-06-29", "2001-12-31", "2002-06-28"]})
    pooled = pd.DataFrame({"gem": ["g12"], "effect": [0.13], "ci_low": [-0.05], "ci_high": [0.31]})
    fig = fold_forest(per_fold, pooled, rope=0.1)
    ax = fig.axes[0]
    span = ax.get_xlim()[1]
    for _, r in per_fold.iterrows():
        line = by_gid(fig, f"fold:g12:{r['fold']}")[f"fold:g12:{r['fold']}"]
        assert list(line.get_xdata()) == pytest.approx([max(r["ci_low"], -span), r["ci_high"]])
    diamond = by_gid(fig, "pooled:g12")["pooled:g12"].get_xy()[:4]
    np.testing.assert_allclose(diamond, [(-0.05, 0), (0.13, 0.3), (0.31, 0), (0.13, -0.3)])
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels[0] == "fold 0 (2001-01-02..2001-06-29): 6 seeds, 0% tie" and labels[-1] == "pooled"
    assert any(a.arrow_patch is not None for a in ax.texts)  # the unbounded interval's arrow
    assert "ROPE +-0.1" in [t.get_text() for t in fig.legends[0].get_texts()]


def test_the_shrinkage_plot_draws_the_confirmation_table():
    table = pd.DataFrame({"gem": ["g6", "g10", "g12"], "discovery_gain": [0.09, np.nan, 0.06],
                          "confirmation_gain": [0.02, np.nan, -0.03], "shrinkage": [0.07, np.nan, 0.09]})
    fig = confirmation_shrinkage(table)
    for _, r in table.dropna().iterrows():
        d = by_gid(fig, f"discovery:{r['gem']}")[f"discovery:{r['gem']}"]
        c = by_gid(fig, f"confirmation:{r['gem']}")[f"confirmation:{r['gem']}"]
        assert d.get_xdata()[0] == r["discovery_gain"] and c.get_xdata()[0] == r["confirmation_gain"]
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["g6", "g12"]  # g10: nothing confirmed


def test_every_figure_has_a_title_a_legend_and_labelled_axes(folded):
    res, tables = folded
    for (title, name), fig in analysis_figures(res, tables).items():
        if fig is None:
            continue
        assert fig.get_suptitle() or all(ax.get_title() for ax in fig.axes), name
        for ax in fig.axes:
            assert ax.get_xlabel() and (ax.get_ylabel() or ax.get_yticklabels()), (name, ax.get_title())
            assert ax.get_legend() is not None or fig.legends, (name, ax.get_title())


def test_analyze_leads_with_the_plots_through_the_cli(tmp_path):
    folder = fr.wire_scenario(tmp_path / "w", n=6)
    pd.DataFrame({"gem": ["g12"], "discovery_gain": [0.4], "confirmation_gain": [0.3]}).to_csv(
        folder / CONFIRMATION_TABLE, index=False)  # as in a confirmation folder
    res = cli_in_process("analyze", str(folder), "--n-boot", "100")
    assert res.returncode == 0, res.stderr[-2000:]
    out = folder / "analysis"
    for name in ("paired_seeds", "learning_curves", "performance_profiles", "probability_of_improvement"):
        assert (out / f"{name}.csv").is_file() and (out / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
    assert (out / "confirmation_shrinkage.png").is_file()
    report = (out / "report.md").read_text()
    lead = report.index("## Plots first")
    assert lead < report.index("## Experiments read") < report.index("## Verdicts")
    first = report.index("![", lead)
    assert report[first:].startswith("![Final verdicts](gem_effects.png)")  # the decisive picture leads
    assert report.count("](gem_effects.png)") == 1 and (out / "final_verdicts.csv").is_file()
    for png in ("paired_seeds.png", "learning_curves.png", "performance_profiles.png",
                "probability_of_improvement.png", "confirmation_shrinkage.png"):
        assert report.index(f"]({png})") < report.index("## Experiments read")
    plain = cli_in_process("analyze", str(folder), "--n-boot", "100", "--no-plots", "--out", str(tmp_path / "np"))
    assert plain.returncode == 0 and (tmp_path / "np" / "paired_seeds.csv").is_file()
    assert "## Plots first" not in (tmp_path / "np" / "report.md").read_text()


def test_the_confirmation_table_name_is_the_confirm_commands():
    from tune_gems.commands.confirm import TABLE_FILE

    assert CONFIRMATION_TABLE == TABLE_FILE


# -- the decisive picture and plots of degenerate data (issue 38 item 4) -------------------------


def test_the_final_verdicts_plot_draws_the_interval_that_decided(folded, tmp_path):
    res, tables = folded
    table = tables[FINAL_VERDICTS_CSV]
    v = res.verdicts.set_index("gem")
    for _, r in table[table["kind"] == "gem"].iterrows():
        g = v.loc[r["contrast"]]
        want = [g[c] for c in ("decided_effect", "decided_ci_low", "decided_ci_high")]
        np.testing.assert_allclose([r["effect"], r["ci_low"], r["ci_high"]], want)  # the interval the rule decided with
        if str(g["decided_by"]).startswith("pooled") and g["verdict"] not in ("equivalent", "delete"):
            np.testing.assert_allclose(want, [g[c] for c in ("pooled_effect", "pooled_ci_low", "pooled_ci_high")])
        assert r["verdict"] == g["verdict"] and r["held_out_effect"] == pytest.approx(g["test_effect"], nan_ok=True)
    # a walk-forward run with enough periods: the pooled interval decides, not the seeds alone
    five = analyze(fr.fold_scenario(tmp_path / "five", [0.3, 0.1, 0.2, 0.25, 0.15], n=6), **FAST)
    t5 = final_verdict_table(five.verdicts, five.placebo)
    g12 = t5.set_index("contrast").loc["g12"]
    v12 = five.verdicts.set_index("gem").loc["g12"]
    assert g12["decided_by"] == "pooled over 5 periods" and g12["ci_low"] == pytest.approx(v12["pooled_ci_low"])
    assert g12["ci_low"] != pytest.approx(v12["ci_low"])
    fig = final_verdicts(t5)
    ax = fig.axes[0]
    line = by_gid(fig, "decided:g12")["decided:g12"]
    assert list(line.get_xdata()) == pytest.approx([g12["ci_low"], g12["ci_high"]])
    assert by_gid(fig, "decided_effect:g12")["decided_effect:g12"].get_xdata()[0] == pytest.approx(g12["effect"])
    held = by_gid(fig, "held_out_effect:g12")["held_out_effect:g12"]
    assert held.get_xdata()[0] == pytest.approx(g12["held_out_effect"])
    assert held.get_ydata()[0] < by_gid(fig, "decided_effect:g12")["decided_effect:g12"].get_ydata()[0]  # beside, below
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert f"g12: {g12['verdict']}\n(pooled over 5 periods)" in labels  # its word and what decided it
    assert "g6: insufficient data\n(no design: no estimate)" in labels  # every contrast, drawn or not


def test_a_learning_curve_panel_flat_at_zero_says_why():
    curves = pd.DataFrame({"experiment": "e", "trial_id": "t", "arm": ["a", "a", "b", "b"], "config_label": "x",
                           "fold": 0, "epoch": [1, 2, 1, 2], "metric": "val_alpha_sharpe", "n_seeds": 4,
                           "median": 0.0, "q25": 0.0, "q75": [0.0, 0.1, 0.0, 0.0], "never_traded": [0.75, 1.0, 0.5, 1.0]})
    fig = learning_curves(curves)
    assert "flat at 0: the median seed never traded\n(81% of seed-epochs with turnover 0)" in fig.axes[0].get_title()
    assert "1 of 1 panel(s) flat at 0" in fig.get_suptitle()
    moving = learning_curves(curves.assign(median=[0.0, 0.2, 0.0, 0.1]))
    assert "flat" not in moving.axes[0].get_title() and "flat" not in moving.get_suptitle()
    no_turnover = learning_curves(curves.assign(never_traded=np.nan))
    assert "Sharpe is exactly 0\nat every epoch" in no_turnover.axes[0].get_title()


def test_the_learning_curve_table_counts_members_that_never_traded(tmp_path):
    folder = fr.wire_scenario(tmp_path / "w", n=4)
    m = pd.read_parquet(folder / "members.parquet")
    m["val_turnover"] = np.where(m["seed_index"] < 3, 0.0, 1.5)
    curves = learning_curve_table(m)
    assert (curves["never_traded"] == 0.75).all()
    assert learning_curve_table(m.drop(columns="val_turnover"))["never_traded"].isna().all()


def test_seed_pairs_that_overlap_are_counted_in_the_title():
    pairs = pd.DataFrame({"gem": "g12", "metric": "val_alpha_sharpe", "fold": 0, "measured": [0.0, 0.0, 0.0, 0.5],
                          "wired": [0.0, 0.0, 0.0, 0.7], "measured_diverged": False, "wired_diverged": False,
                          "tied": [True, True, True, False]})
    title = paired_seeds(pairs).axes[0].get_title()
    assert title == "g12: 4 seed pair(s), 75% tie\n2 distinct line(s): equal pairs overlap"
    assert "\n" not in paired_seeds(pairs.assign(measured=[0.0, 0.1, 0.2, 0.5])).axes[0].get_title()


def test_the_shrinkage_plot_says_what_was_fresh_and_hides_no_marker():
    table = pd.DataFrame({"gem": ["g12"], "discovery_gain": [0.0], "confirmation_gain": [0.0]})
    fig = confirmation_shrinkage(table, FRESH_SEEDS)
    assert "(fresh seeds, the search's price history)" in fig.axes[0].get_title()
    d, c = by_gid(fig, "discovery:g12")["discovery:g12"], by_gid(fig, "confirmation:g12")["confirmation:g12"]
    assert d.get_xdata()[0] == c.get_xdata()[0] == 0.0 and d.get_ydata()[0] > c.get_ydata()[0]  # both visible
    file_data = pd.DataFrame({"data.source": ["file"], "data.synthetic.paths": ["per_seed"]})
    per_seed = pd.DataFrame({"data.source": ["synthetic"] * 2, "data.synthetic.paths": ["per_seed"] * 2})
    shared = pd.DataFrame({"data.source": ["synthetic"], "data.synthetic.paths": ["shared"]})
    assert confirmation_data(file_data) == confirmation_data(shared) == FRESH_SEEDS
    assert confirmation_data(per_seed) == FRESH_SEEDS_AND_PATHS
