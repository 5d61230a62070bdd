"""Verdicts from designed comparisons (issue 13): synthetic experiments with known answers.

Each scenario is written by tests/fake_results.py as real result files (arms table, members with
`arm` / `seed_index`, gem nulls) and analysed through `tune_gems.analysis.analyze`.
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fake_results as fr  # noqa: E402

from tune_gems.analysis.analyze import analyze  # noqa: E402

FAST = dict(n_boot=50)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("verdicts")


def run(folder, **kw):
    return analyze(folder, **{**FAST, **kw})


def row(res, gem="g12"):
    return res.verdicts.set_index("gem").loc[gem]


def test_planted_gain_keeps_wired_with_evidence(root):
    res = run(fr.wire_scenario(root / "gain", effect=0.5, n=16))
    g = row(res)
    assert g["verdict"] == "keep wired"
    assert g["design"].startswith("arms within trials") and g["n_seeds"] == 16 and g["n_pairs"] == 16
    assert g["effect"] == pytest.approx(0.5) and g["ci_low"] > 0.4 and g["ci_high"] < 0.6
    assert g["outcome"] == "val_alpha_sharpe" and g["p_adjusted"] < 1e-3
    assert g["test_effect"] == pytest.approx(0.5)
    # g6 / g10 are only measured: no effect can be estimated, and the report says what to add
    assert row(res, "g6")["verdict"] == "insufficient data"
    assert "add an arm with this gem wired" in row(res, "g6")["reason"]


def test_significantly_harmful_wiring_reads_harmful(root):
    g = row(run(fr.wire_scenario(root / "harm", effect=-0.5, n=16)))
    assert g["verdict"] == "harmful" and g["effect"] == pytest.approx(-0.5) and g["ci_high"] < 0
    assert "wiring hurts" in g["reason"]


def test_null_within_rope_is_equivalent(root):
    g = row(run(fr.wire_scenario(root / "null", effect=0.0, n=16, noise=0.05)))
    assert g["verdict"] == "equivalent"
    assert abs(g["effect"]) < 1e-9 and g["tost_p_adjusted"] <= 0.05 and g["p_adjusted"] > 0.05


def test_noisy_null_is_inconclusive_with_mde_and_seeds_needed(root):
    g = row(run(fr.wire_scenario(root / "noisy_null", effect=0.0, n=8, noise=0.5)))
    assert g["verdict"] == "inconclusive"
    # sd of +-0.5 differences is ~0.53; MDE = (z(0.975) + z(0.8)) sd sqrt(pi/3) / sqrt(8) ~ 0.54
    assert 0.4 < g["mde"] < 0.7
    assert g["seeds_needed"] > 100 and "detectable at 80% power" in g["reason"]


def test_divergence_counts_as_the_worst_outcome(root):
    """The wired arm diverges in 12 of 16 seeds; where it survives it is slightly better. Dropping
    the diverged members (the old rule) would call it a gain; as the worst outcome it is harmful."""
    res = run(fr.wire_scenario(root / "diverge", effect=0.2, n=16, diverged_wired=list(range(12))))
    g = row(res)
    assert g["discovery_verdict"] == "harmful"  # the test segment's diverged arm: the second stage's to confirm
    assert g["wired_diverged"] == 12 and g["measured_diverged"] == 0 and g["n_seeds"] == 16
    assert g["effect"] == -math.inf and "diverged (counted as worst): wired 12" in g["reason"]
    assert res.trial_outcomes.set_index("trial_id").loc["t0", "outcome"] == "diverged"


def test_confounded_arms_give_no_verdict_and_a_fix(root):
    """Wired arm also changes the learning rate: no arm differs in g12 alone."""
    res = run(fr.wire_scenario(root / "confounded", effect=0.5, wired_extra={"trainer.lr": 3e-4}))
    g = row(res)
    assert g["verdict"] == "insufficient: confounded"
    assert g["n_seeds"] == 0 and math.isnan(g["effect"]) and math.isnan(g["p_adjusted"])
    assert "trainer.lr" in g["fix"] and "add an arm to trial t0 equal to 'wired' with gems.g12.mode=measure" in g["fix"]
    assert g["fix"] in g["reason"]


def test_factorial_main_effect_pairs_within_each_level(root):
    """g12 mode x spectral norm in one trial: the g12 effect pairs wire/measure at each sn level
    and averages them per seed (main effect); sn itself differs between the pairs' contexts."""
    arms = fr.factorial_arms({"gems.g12.mode": ["measure", "wire"], "model.spectral_norm": [True, False]})
    base = fr.seed_values(16, seed=2)
    noise = fr.paired_noise(16, seed=3, sd=0.05)
    values = {}
    for name, a in arms.items():
        gain = {("wire", True): 0.4, ("wire", False): 0.2}.get((a["gems.g12.mode"], a["model.spectral_norm"]), 0.0)
        values[name] = list(base + gain + (noise if a["gems.g12.mode"] == "wire" else 0))
    f = fr.write_arms_experiment(root / "factorial", [fr.ArmTrial("t0", arms, values, seed=4)])
    g = row(run(f))
    assert g["verdict"] == "keep wired" and g["n_seeds"] == 16 and g["n_pairs"] == 32
    assert "2 context(s)" in g["design"] and g["effect"] == pytest.approx(0.3, abs=0.03)
    # the same without an arms table: settings come from the factorial arm names
    (f / "arms.parquet").unlink()
    g2 = row(run(f))
    assert g2["verdict"] == "keep wired" and g2["n_pairs"] == 32


def test_cross_trial_pairs_need_identical_configs_and_common_seeds(root):
    """Old-style: one arm per trial. Same seed: pairs; different seed: confounded (no verdict)."""
    def trials(seed_w):
        base = fr.seed_values(12, seed=8)
        w = base + 0.5 + fr.paired_noise(12, seed=1)
        return [fr.ArmTrial("m", {"default": {}}, {"default": list(base)}, seed=1),
                fr.ArmTrial("w", {"default": {}}, {"default": list(w)}, seed=seed_w,
                            config={"gems.g12.mode": "wire"})]

    g = row(run(fr.write_arms_experiment(root / "cross_same", trials(1))))
    assert g["verdict"] == "keep wired" and g["design"].startswith("across trials") and g["n_seeds"] == 12
    g = row(run(fr.write_arms_experiment(root / "cross_diff", trials(2))))
    assert g["verdict"] == "insufficient: confounded" and "same `seed`" in g["fix"]


def test_a_seed_shared_by_two_trials_is_one_unit(root):
    """Two trials with the same seed repeat the same members: 16 units, not 32. Different seeds
    with their own market paths are independent: 32 units. Different seeds on the same per-seed
    market paths share the path at each seed index: merged into 16 units."""
    same = row(run(fr.wire_scenario(root / "seed_same", trials=2, seeds=[0, 0], n=16)))
    assert same["n_seeds"] == 16 and "in 2 trial(s)" in same["design"]
    indep = row(run(fr.wire_scenario(root / "seed_indep", trials=2, seeds=[0, 1], n=16, path_seeds=[7, 1007])))
    assert indep["n_seeds"] == 32
    shared_path = row(run(fr.wire_scenario(root / "seed_path", trials=2, seeds=[0, 1], n=16)))
    assert shared_path["n_seeds"] == 16 and shared_path["n_pairs"] == 32
    assert shared_path["market_path"] == "per-seed paths"


def test_placebo_arm_is_reported_and_not_a_wiring(root):
    res = run(fr.wire_scenario(root / "placebo", effect=0.5, placebo=True, noise=0.05))
    g = row(res)
    assert g["verdict"] == "keep wired" and g["n_pairs"] == 16  # placebo members not pooled in
    p = res.placebo.set_index("gem").loc["g12"]
    assert p["verdict"] in ("equivalent", "inconclusive") and p["n_seeds"] == 16
    assert abs(p["effect"]) < 0.05 and p["sd_diff"] == pytest.approx(0.0516, abs=0.01)
    assert p["iqr_diff"] >= 0 and p["min_diff"] <= 0 <= p["max_diff"]


def test_delete_when_measured_excess_is_at_its_null(root):
    zero = {a: {"g6": 0.0, "g12": 0.0} for a in ("control", "wired")}
    res = run(fr.wire_scenario(root / "at_null", effect=0.0, noise=0.05, excess=zero))
    g6, g12, g10 = row(res, "g6"), row(res, "g12"), row(res, "g10")
    # g6 is never wired: its magnitude at the null alone is no evidence about wiring (issue 21)
    assert g6["verdict"] == "insufficient data" and "excess over its null ~0" in g6["reason"]
    assert "delete needs both" in g6["reason"]
    assert g12["verdict"] == "delete" and "wiring is equivalent to none" in g12["reason"]
    assert g10["verdict"] == "insufficient data"  # excess 0.05 (default): not at its null
    assert g10["excess_median"] == pytest.approx(0.05)


def test_a_gem_at_its_null_whose_wiring_may_help_is_not_deleted(root):
    """Issue 21: magnitude at the null but wiring's effect unsettled (0.15 +- 0.3 over 16 seeds):
    `inconclusive`, saying why it is not `delete`."""
    zero = {a: {"g6": 0.0, "g12": 0.0} for a in ("control", "wired")}
    g12 = row(run(fr.wire_scenario(root / "null_but_helps", effect=0.15, noise=0.3, excess=zero)), "g12")
    assert g12["excess_tost_p_adjusted"] <= 0.05  # the magnitude half holds
    assert g12["verdict"] == "inconclusive" and "delete needs both" in g12["reason"]
    assert g12["estimand"].startswith("pseudo-median") and np.isfinite(g12["mean_effect"])


def test_redundancy_factorial(root):
    res = run(fr.redundancy_scenario(root / "redundancy"))
    red = res.redundancy.set_index("gem")
    assert red.loc["g10", "feature"] == "model.spectral_norm" and red.loc["g10", "finding"] == "removes"
    assert red.loc["g10", "change"] == pytest.approx(-0.05, abs=0.01) and red.loc["g10", "n_seeds"] == 16
    assert red.loc["g6", "feature"] == "model.noisy" and red.loc["g6", "finding"] == "reduces"
    g10 = row(res, "g10")  # removed by spectral norm, but wiring it was never compared: no delete
    assert g10["verdict"] == "insufficient data" and "model.spectral_norm removes it" in g10["reason"]
    assert "delete needs both" in g10["reason"]
    assert row(res, "g6")["verdict"] == "insufficient data"
    # without spectral norm doing anything, nothing is removed
    res = run(fr.redundancy_scenario(root / "not_redundant", g10_on=0.05, g10_off=0.05))
    assert res.redundancy.set_index("gem").loc["g10", "finding"] == "does not remove"


def test_older_results_fall_back_to_val_sharpe_and_last_k(root):
    f = fr.wire_scenario(root / "no_alpha", effect=0.5, alpha=False)
    res = run(f)
    g = row(res)
    assert g["outcome"] == "val_sharpe" and "val_alpha_sharpe absent" in g["reason"]
    assert g["effect"] == pytest.approx(0.5)
    assert any("val_sharpe used instead" in n for n in res.notes)
    # the fakes' earlier epochs read 100 in every arm: a 4-epoch window shrinks the effect to 3/4
    assert row(run(f, last_k=4))["effect"] == pytest.approx(0.375)


def test_holm_across_gems(root):
    """Three gems each wired in its own arm with the same moderate effect: the Holm-adjusted p
    of the smallest raw p is 3x it, and every interval is at its Holm step's level."""
    n = 10
    base = fr.seed_values(n, seed=11)
    arms = {"control": {}}
    values = {"control": list(base)}
    rng = np.random.default_rng(0)
    for g in fr.GEMS:
        arms[f"{g}-wired"] = {f"gems.{g}.mode": "wire"}
        values[f"{g}-wired"] = list(base + 0.3 + rng.normal(0, 0.3, n))
    res = run(fr.write_arms_experiment(root / "holm", [fr.ArmTrial("t0", arms, values, seed=6)]))
    v = res.verdicts.set_index("gem")
    p = v["p_value"].to_numpy()
    order = np.argsort(p)
    assert v["p_adjusted"].iloc[order[0]] == pytest.approx(min(1, 3 * p[order[0]]))
    assert (v["p_adjusted"] >= v["p_value"]).all()
    for _, r in v.iterrows():  # the interval agrees with the Holm decision
        excludes_zero = r["ci_low"] > 0 or r["ci_high"] < 0
        assert excludes_zero == (r["p_adjusted"] <= 0.05)


def test_nothing_finished_is_no_data(root):
    trials = [fr.FakeTrial("a", {"g12": "measure"}, [1.0, 2.0], status="ERROR"),
              fr.FakeTrial("b", {"g12": "wire"}, [1.0, 2.0], status="ERROR")]
    res = run(fr.write_experiment(root / "all_failed", trials, journal=False))
    assert set(res.verdicts["verdict"]) == {"no data"} and res.placebo.empty


def test_corrupt_arms_table_is_one_line(root, capsys):
    from tune_gems.commands.cli import main

    f = fr.wire_scenario(root / "bad_arms", n=4)
    (f / "arms.parquet").write_bytes(b"garbage")
    assert main(["analyze", str(f), "--out", str(root / "bad_arms_out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "arms.parquet: not a readable table" in err[0]
    assert not (root / "bad_arms_out").exists()


def test_market_noise_is_not_needed_on_per_seed_paths_and_unavailable_without_saved_returns(root):
    """Per-seed paths: the seed interval already holds the market's variance, so no market-noise
    interval. One shared history without eval_returns (older results): said unavailable, the
    verdict stands and says it is conditional on that history (tests/test_market_noise_verdict.py
    has the interval itself)."""
    g = row(run(fr.wire_scenario(root / "mn_per_seed", effect=0.5, n=16)))
    assert g["market_noise"].startswith("not needed") and g["seed_verdict"] == g["verdict"] == "keep wired"
    assert np.isnan(g["market_ci_low"]) and "market noise: in the seed interval" in g["reason"]
    old = row(run(fr.paired_scenario(root / "mn_shared", journal=False)))
    assert old["market_path"] == "conditional on one shared path"
    assert old["market_noise"].startswith("unavailable:") and old["discovery_verdict"] == old["seed_verdict"]
    assert "conditional on this one price history" in old["reason"]
    # no market-noise interval: nothing measures the test period's spread, so nothing is confirmed
    assert old["verdict"] == "not confirmed on held-out data" and "test period's spread" in old["held_out"]


def _aa_experiment(folder, noise: float):
    base = fr.seed_values(16, seed=100)
    aa = base + (fr.paired_noise(16, seed=1, sd=noise) if noise else 0.0)
    trial = fr.ArmTrial("t0", {"control": {}, "aa": {"trainer.replay_stream": 1}},
                        {"control": list(base), "aa": list(aa)}, config={"trainer.replay_stream": 0})
    return fr.write_arms_experiment(folder, [trial])


def test_an_aa_arm_gives_the_learners_null_spread(root):
    """Issue 21: the control with an independent replay stream, paired with its stream-0 twin."""
    res = run(_aa_experiment(root / "aa", noise=0.3))
    a = res.placebo[res.placebo["kind"].str.startswith("a/a")].iloc[0]
    assert a["kind"] == "a/a (replay stream 1)" and a["n_seeds"] == 16 and a["gem"] == "-"
    assert a["verdict"] in ("equivalent", "inconclusive") and bool(a["informative"]) and a["tied_share"] == 0
    assert a["sd_diff"] == pytest.approx(0.3, rel=0.5)
    assert set(res.verdicts["verdict"]) <= {"insufficient data", "no data"}  # not a gem comparison


def test_a_null_arm_whose_pairs_tie_is_flagged_uninformative(root):
    """The weight-1e-9 placebo was bit-identical to control for 8/8 seeds: 'equivalent, CI [0, 0]'
    read as a passed check. Identical outcomes now read `informative` False, in words."""
    from tune_gems.analysis.render.report import format_verdict_table

    res = run(_aa_experiment(root / "aa_tied", noise=0.0))
    a = res.placebo.iloc[0]
    assert a["tied_share"] == 1.0 and not bool(a["informative"])
    assert "uninformative: 100% of the pairs tie" in format_verdict_table(res.verdicts, res.placebo, res.redundancy)


# ---- ties, never-traded members, the epoch window, the one-sided keep test (issue 30) ----------


def _tied_experiment(folder, n: int, informative: list[float], turnover: bool = True):
    """One trial, control and wired on n seeds; wired = control at every seed but the last
    len(informative), where it adds those differences. With `turnover`, members of the tied
    seeds never traded (validation turnover 0), the others did."""
    import pandas as pd

    base = fr.seed_values(n, seed=21)
    diff = np.zeros(n)
    diff[n - len(informative):] = informative
    f = fr.write_arms_experiment(folder, [fr.ArmTrial("t0", {"control": {}, "wired": {"gems.g12.mode": "wire"}},
                                                      {"control": list(base), "wired": list(base + diff)})])
    if turnover:
        m = pd.read_parquet(f / "members.parquet")
        m["val_turnover"] = np.where(m["seed_index"] < n - len(informative), 0.0, 0.3)
        m.to_parquet(f / "members.parquet", index=False)
    return f


def test_a_verdict_resting_on_ties_reads_insufficient_data(root):
    """Issue 30: on NASDAQ closes 14 of 18 pairs tied (members that never traded) and g12 read
    `equivalent` on 2 informative seeds. Ties carry no weight; too few informative pairs for the
    rule read `insufficient data`, with the tied share and the members that never traded."""
    g = row(run(_tied_experiment(root / "ties", 18, [0.05, -0.04, 0.03, -0.02])))
    assert g["verdict"] == "insufficient data" and g["seed_verdict"] == "insufficient data"
    assert g["tied_share"] == pytest.approx(14 / 18) and g["n_informative"] == 4 and g["n_seeds"] == 18
    assert g["zero_turnover_share"] == pytest.approx(14 / 18)
    assert "too few informative pairs" in g["reason"] and "never traded" in g["reason"]
    from tune_gems.analysis.render.report import evidence_line

    assert "78% of the pairs tie exactly (4 of 18 informative" in evidence_line(g.rename({"gem": "g"}).to_dict() | {"gem": "g12"})


def test_ties_carry_no_weight_in_the_effect(root):
    """8 tied pairs and 8 informative ones near +0.5: the effect is the informative pairs' (the
    old rule's half-counted ties pulled it to ~+0.25 and its interval towards 0)."""
    g = row(run(_tied_experiment(root / "ties_effect", 16, list(0.5 + fr.paired_noise(8, seed=2, sd=0.05)))))
    assert g["effect"] == pytest.approx(0.5, abs=0.03) and g["n_informative"] == 8 and g["tied_share"] == 0.5
    assert g["verdict"] == "keep wired" and g["ci_low"] > 0.4  # the one gem with a design: Holm of one


def test_the_epoch_window_is_a_setting(root):
    """The fakes' earlier epochs read 100 in every arm (a difference of 0): over an 8-epoch run the
    last half (4 epochs) holds one of them, so the effect is 3/4 of the last-3 window's."""
    f = fr.write_arms_experiment(root / "window", [fr.ArmTrial(
        "t0", {"control": {}, "wired": {"gems.g12.mode": "wire"}},
        {"control": list(fr.seed_values(16, seed=4)),
         "wired": list(fr.seed_values(16, seed=4) + 0.5 + fr.paired_noise(16, seed=5))}, epochs=8)])
    assert row(run(f))["effect"] == pytest.approx(0.5)
    half = row(run(f, window="last-half"))
    assert half["effect"] == pytest.approx(0.375) and "last half" in half["window"]
    assert row(run(f, window="from-epoch", first_epoch=7))["effect"] == pytest.approx(0.5)


def test_the_one_sided_keep_test_never_claims_harm(root, capsys):
    from tune_gems.commands.cli import main

    f = fr.wire_scenario(root / "one_sided_harm", effect=-0.5, n=16)
    g = row(run(f, one_sided_keep=True))
    assert g["verdict"] == "inconclusive" and g["seed_verdict"] == "inconclusive"
    keep = row(run(fr.wire_scenario(root / "one_sided_keep", effect=0.5, n=16), one_sided_keep=True))
    assert keep["verdict"] == "keep wired" and keep["ci_high"] == np.inf and "one-sided" in keep["reason"]
    assert main(["analyze", str(f), "--one-sided-keep", "--no-plots", "--out", str(root / "one_sided_out")]) == 0
    assert "one_sided_keep=True" in (root / "one_sided_out" / "report.md").read_text()


# ---- degenerate designs said out loud (issue 38 item 2; issue 39: one seed per arm) -----------------


def test_a_mostly_tied_design_cannot_read_equivalent(tmp_path):
    """The issue's case in small: most pairs tie (wired and measured policies identical), the few
    that differ agree within the ROPE. Ties carry no weight, so the TOST alone would read
    `equivalent` on them; more than `defaults.MAX_TIED_SHARE` tied reads `insufficient data` and
    says why (the same word in factors.csv)."""
    import pandas as pd
    from tune_gems.analysis import defaults

    folder = fr.wire_scenario(tmp_path / "tied", effect=0.0, n=40, noise=0.01)
    m = pd.read_parquet(folder / "members.parquet")
    ctrl = m[m["arm"] == "control"].set_index(["epoch", "seed_index"])["val_alpha_sharpe"]
    tie = (m["arm"] == "wired") & (m["seed_index"] < 30)  # 75% of the pairs tie
    m.loc[tie, "val_alpha_sharpe"] = [ctrl[(e, s)] for e, s in zip(m.loc[tie, "epoch"], m.loc[tie, "seed_index"])]
    m.to_parquet(folder / "members.parquet", index=False)
    res = run(folder)
    g = row(res)
    assert g["tied_share"] > defaults.MAX_TIED_SHARE and g["tost_p_adjusted"] <= 0.05  # the TOST alone passes
    assert g["verdict"] == "insufficient data" and g["reason"].startswith("mostly tied: 75% of the pairs tie")
    assert res.factors.set_index("factor").loc["gems.g12.mode", "verdict"] == "insufficient data"
    untied = row(run(fr.wire_scenario(tmp_path / "untied", effect=0.0, n=40, noise=0.01)))
    assert untied["verdict"] == "equivalent"  # the same effect without the ties


def test_a_null_arm_of_one_seed_tests_nothing_and_says_so(tmp_path):
    """One seed per arm: no informative pair can reach alpha, so the null arm reads `insufficient
    data`, is flagged uninformative, and the console says it passes nothing."""
    from tune_gems.analysis.render.report import format_verdict_table

    res = run(fr.wire_scenario(tmp_path / "one", effect=0.5, n=1, placebo=True))
    p = res.placebo.set_index("gem").loc["g12"]
    assert p["verdict"] == "insufficient data" and not p["informative"]
    text = format_verdict_table(res.verdicts, res.placebo)
    assert "placebo g12 (wired at ~0 weight): insufficient data" in text and "it passes nothing" in text


def test_no_nan_reaches_the_verdict_lines_of_a_degenerate_fold(tmp_path):
    """A fold whose pairs mostly tie has no rank interval, the pooled rule no tau^2: the reason,
    the why line and the console say `-` where a number is missing, never `nan` (issue 38 item 2)."""
    from tune_gems.analysis.render.report import format_verdict_table

    res = run(fr.fold_scenario(tmp_path / "e", [0.3, 0.1, 0.2, 0.15, 0.25, 0.05]))
    g = row(res)
    assert not np.isfinite(g["tau2"])  # the case: pooled with equal weights
    for text in (g["reason"], g["why"], format_verdict_table(res.verdicts, res.placebo, verbose=True)):
        assert not re.search(r"\bnan\b", text), text  # a word: the test's own folder name holds "no_nan"
