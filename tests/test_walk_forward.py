"""Verdicts over walk-forward periods (issue 20 deliver 2-5): the pooled statistic, its
calibration as the rule is used (seed noise, one market history per period, fold-level effects,
a seed's share common to every fold), a planted regime flip, the held-out test check and the
learner's skill in context. The simulations run the functions the verdicts use, vectorised."""

from __future__ import annotations

import math

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fake_results as fr  # noqa: E402

from tune_gems.analysis.calibrate.calibration import Shape, mc_tolerance  # noqa: E402
from tune_gems.analysis.render.report import evidence_line, render_report  # noqa: E402
from tune_gems.analysis.analyze import analyze  # noqa: E402
from tune_gems.analysis.rules.decision import combined_bounds  # noqa: E402
from tune_gems.analysis.rules.periods import (  # noqa: E402
    FoldData, Pooling, hksj, pool_family, seed_anova, shared_seed_variance,
)
from tune_gems.analysis.rules.settings import (  # noqa: E402
    INCONSISTENT, INSUFFICIENT, INSUFFICIENT_CODE, NOT_CONFIRMED, EQUIVALENT_CODE as EQUIVALENT,
    HETEROGENEOUS_CODE as HETEROGENEOUS, INCONSISTENT_CODE as CODE_INCONSISTENT,
)
from tune_gems.analysis.calibrate.walk_forward_calibration import Scenario, period_run  # noqa: E402
from tune_gems.contracts.errors import DataError  # noqa: E402

N_SIM = 2000
ALPHA = 0.05
TOL = mc_tolerance(ALPHA, N_SIM)
SHAPES = [Shape(g, 16, 1.0, 0.0) for g in ("g6", "g10", "g12")]


# ---- the statistic ---------------------------------------------------------------------------


def period_codes(shapes, n_sim: int, folds: int, *, thresholds=None, **scenario) -> np.ndarray:
    """Codes [n_sim, gems] of the rule as used on simulated families (`period_run`)."""
    return period_run(shapes, n_sim, folds, Scenario(**scenario), thresholds=thresholds).codes


def test_hksj_with_equal_fold_variances_is_the_t_test_of_the_fold_effects():
    rng = np.random.default_rng(0)
    theta = rng.normal(0.3, 1.0, (200, 5))
    r = hksj(theta, np.full_like(theta, 1e-6))
    ref = sps.ttest_1samp(theta, 0.0, axis=1)
    np.testing.assert_allclose(r["p"], ref.pvalue, rtol=1e-6)
    np.testing.assert_allclose(r["mu"], theta.mean(1), rtol=1e-9)
    assert (r["i2"] > 0.99).all() and (r["tau2"] > 0).all()


def test_hksj_interval_is_never_narrower_than_the_fixed_effect_one():
    """Identical folds (dispersion 0): the HKSJ scale is 0, and the interval is the
    DerSimonian-Laird one (tau^2 = 0: the fixed-effect interval, normal quantile). Issue 30: the
    older floor kept the t quantile on that known variance, 14x below its level at K = 4."""
    theta = np.array([[0.50, 0.50, 0.50, 0.50]])
    r = hksj(theta, np.full_like(theta, 0.01), tail=0.025)
    fe_se = np.sqrt(0.01 / 4)
    assert r["se_fixed"][0] == pytest.approx(fe_se) and r["tau2"][0] == 0.0 and r["i2"][0] == 0.0
    assert r["high"][0] - 0.5 == pytest.approx(sps.norm.ppf(0.975) * fe_se)


def test_the_seeds_share_common_to_every_fold_is_estimated():
    rng = np.random.default_rng(1)
    n, k = 400, 4
    c = rng.normal(0, 1.0, (50, 1, n))  # sigma_c^2 = 1
    d = c + rng.normal(0, 1.0, (50, k, n))
    est = shared_seed_variance(d) * n
    assert np.median(est) == pytest.approx(1.0, rel=0.15)
    assert np.median(seed_anova(d)["share"]) == pytest.approx(0.5, abs=0.06)  # sigma_c^2 / (sigma_c^2 + sigma_e^2)
    assert np.median(shared_seed_variance(rng.normal(0, 1, (50, k, n))) * n) < 0.05


def test_combined_bounds_add_the_two_variances_per_side():
    lo, hi = combined_bounds(1.0, 0.7, 1.4, -0.4, 0.4)
    assert lo == pytest.approx(1 - np.hypot(0.3, 0.4)) and hi == pytest.approx(1 + np.hypot(0.4, 0.4))


# ---- calibration of the rule as it is used --------------------------------------------------


@pytest.mark.parametrize("folds,tau,rho", [(1, 1.0, 0.0), (1, 3.0, 0.0), (4, 0.0, 0.0), (4, 3.0, 0.0), (4, 1.0, 0.5),
                                           (6, 3.0, 0.0), (6, 1.0, 0.5), (8, 3.0, 0.0)])
def test_family_wise_false_keep_or_harmful_is_at_most_alpha(folds, tau, rho):
    codes = period_codes(SHAPES, N_SIM, folds, tau=tau, rho=rho)
    fwer = (np.abs(codes) == 1).any(1).mean()
    assert fwer <= ALPHA + TOL, (folds, tau, rho, fwer)


def test_the_rule_is_near_its_level_where_periods_differ():
    """Issue 30: the AND of the seed test and the pooled test, the HKSJ floor and t(K - 1) put the
    rule at 0.000-0.02 against a 0.05 promise at K = 3-4. Deciding with the pooled test alone,
    the spread shared across the family and the DL-bounded HKSJ brings it near alpha where the
    periods differ (tau 3 SE), still below it."""
    for folds in (4, 6):
        fwer = (np.abs(period_codes(SHAPES, N_SIM, folds, tau=3.0)) == 1).any(1).mean()
        assert 0.02 < fwer <= ALPHA + TOL, (folds, fwer)


@pytest.mark.parametrize("tau,tau_first", [(0.0, 3.0), (3.0, 0.0), (1.0, 3.0)])
def test_a_tau_shared_across_the_family_when_it_differs_between_gems(tau, tau_first):
    """tau estimated once across the family's contrasts, checked where it differs between them:
    a contrast whose scale exceeds the others' (one-sided F test) is pooled on its own, so the
    family-wise rate stays within the promise."""
    codes = period_codes(SHAPES, N_SIM, 4, tau=tau, tau_first=tau_first)
    assert (np.abs(codes) == 1).any(1).mean() <= ALPHA + TOL


def test_contrasts_that_share_arms_and_periods_cut_the_shared_degrees_of_freedom():
    """Correlated contrasts (gem_corr 1: the same period luck and seed noise in every gem) carry
    one contrast's information about the scale: the df fall back towards K - 1 and the rate
    stays within the promise."""
    codes = period_codes(SHAPES, N_SIM, 4, tau=3.0, gem_corr=1.0)
    assert (np.abs(codes) == 1).any(1).mean() <= ALPHA + TOL


def test_pool_family_shares_the_spread_unless_a_contrast_exceeds_it():
    rng = np.random.default_rng(3)
    theta = rng.normal(0.0, 1.0, (400, 3, 4))
    same = pool_family(FoldData(theta, np.full_like(theta, 0.5)))
    assert np.median(same["df"]) > 3 and same["shared"].mean() > 0.8
    theta[:, 0] *= 6.0  # the first contrast spreads far more than the others
    apart = pool_family(FoldData(theta, np.full_like(theta, 0.5)))
    assert (~apart["shared"][:, 0]).mean() > 0.8 and np.median(apart["df"][:, 0]) == 3
    alone = pool_family(FoldData(theta, np.full_like(theta, 0.5)), Pooling(share=False))
    assert (alone["df"] == 3).all() and not alone["shared"].any()


@pytest.mark.parametrize("folds", [4, 6])
def test_inconsistent_or_heterogeneous_false_alarm_in_pure_noise_is_at_most_alpha(folds):
    """Issue 30: the old label (signs of point estimates plus Q p <= 0.05, no Holm) fired on 11-14%
    of 3-gem families of pure noise. Both labels now need the Holm-adjusted heterogeneity test."""
    codes = period_codes(SHAPES, N_SIM, folds, tau=0.0)
    assert np.isin(codes, (CODE_INCONSISTENT, HETEROGENEOUS)).any(1).mean() <= ALPHA + TOL


def test_a_consistent_effect_with_some_period_spread_is_not_called_inconsistent():
    """A consistent 1 sd effect with a period spread of 1 SE got `inconsistent` 13-58% of the time
    (issue 30): no sign change is shown, so it is not claimed."""
    c = period_codes(SHAPES, N_SIM, 6, effect=1.0, tau=1.0)
    assert (c[:, 0] == CODE_INCONSISTENT).mean() <= ALPHA and (c[:, 0] == 1).mean() > 0.9


def test_the_stated_pooled_mde_has_its_power():
    """The MDE a verdict states with folds is the pooled test's, drawn through the rule's own
    pooling (`power.pooled_mde`): a planted effect of that size reads keep wired with at least the
    stated 80% power, within the simulation's error (the closed form read 0.69-0.85)."""

    for folds, tau, rho in ((6, 1.0, 0.0), (4, 3.0, 0.0), (6, 0.0, 0.5)):
        mde = period_run(SHAPES, N_SIM, folds, Scenario(tau=tau, rho=rho)).mde
        power = (period_run(SHAPES, N_SIM, folds, Scenario(tau=tau, rho=rho, effect=mde), seed=4).codes[:, 0] == 1).mean()
        assert 0.8 - 3 * math.sqrt(0.16 / N_SIM) <= power <= 0.95, (folds, tau, rho, mde, power)


def test_below_four_periods_the_pooled_verdict_is_refused():
    """K = 2 has power 0 and K = 3 almost none with t(K - 1) on one contrast: `insufficient data:
    too few periods`, with the per-fold effects still shown."""
    for folds in (2, 3):
        c = period_codes(SHAPES, 500, folds, effect=1.0)
        assert (c == INSUFFICIENT_CODE).all()


def test_three_periods_are_calibrated_when_allowed():
    """Why K = 3 may decide only on request (`--min-periods 3`): the rule is within its level
    there, but a single contrast has 2 df (power at 1 sd with a period spread of 1 SE: ~0.6)."""
    from tune_gems.analysis.rules.settings import Thresholds

    th = Thresholds(min_periods=3)
    for tau in (0.0, 3.0):
        assert (np.abs(period_codes(SHAPES, N_SIM, 3, tau=tau, thresholds=th)) == 1).any(1).mean() <= ALPHA + TOL


def test_one_sided_keep_is_calibrated_and_never_harmful():
    from tune_gems.analysis.rules.settings import Thresholds

    th = Thresholds(one_sided_keep=True)
    null = period_codes(SHAPES, N_SIM, 4, tau=3.0, thresholds=th)
    assert (null == 1).any(1).mean() <= ALPHA + TOL and not (null == -1).any()
    two = (period_codes(SHAPES, N_SIM, 6, effect=0.5, tau=1.0)[:, 0] == 1).mean()
    one = (period_codes(SHAPES, N_SIM, 6, effect=0.5, tau=1.0, thresholds=th)[:, 0] == 1).mean()
    assert one > two
    assert (period_codes(SHAPES, 500, 4, effect=-1.0, thresholds=th)[:, 0] == -1).sum() == 0


def test_pairs_that_tie_carry_no_weight():
    """Ties (both members never traded) are left out of every fold and pooled estimate: with half
    the pairs tying the rule keeps its level, and the power of the informative half."""
    assert (np.abs(period_codes(SHAPES, N_SIM, 4, tau=3.0, ties=0.5)) == 1).any(1).mean() <= ALPHA + TOL
    assert (period_codes(SHAPES, N_SIM, 6, effect=1.0, ties=0.5)[:, 0] == 1).mean() > 0.8


def test_the_one_history_gate_includes_equivalent():
    """A true effect at the ROPE must not read `equivalent` when the history's luck is large."""
    shapes = [Shape(g, 32, 0.15, 0.0) for g in ("g6", "g10", "g12")]
    for folds in (1, 4):
        c = period_codes(shapes, N_SIM, folds, effect=0.1, tau=3.0)
        assert (c[:, 0] == EQUIVALENT).mean() <= ALPHA + TOL
    # and it can be reached: no effect, small spread, no luck
    c = period_codes(shapes, N_SIM, 1, tau=0.0)
    assert (c[:, 0] == EQUIVALENT).mean() > 0.8


def test_power_at_a_planted_consistent_effect():
    assert (period_codes(SHAPES, N_SIM, 6, effect=1.0, tau=1.0)[:, 0] == 1).mean() >= 0.9
    assert (period_codes(SHAPES, N_SIM, 4, effect=1.0, tau=0.0)[:, 0] == 1).mean() >= 0.8
    assert (period_codes(SHAPES, N_SIM, 1, effect=1.0, tau=0.0)[:, 0] == 1).mean() >= 0.8


@pytest.mark.parametrize("folds", [4, 6])
def test_a_planted_regime_flip_never_reads_keep_or_harmful(folds):
    """Issue 30: `inconsistent` now needs fold intervals on both sides of 0 (Holm over the
    family's gem x fold tests), so a +-4 SE flip is *shown* in about half the datasets; the rest
    read `heterogeneous` (the periods differ, no sign change shown). Together > 80%, and never a
    keep / harmful."""
    c = period_codes(SHAPES, N_SIM, folds, flip=4.0, tau=0.0)
    assert (np.abs(c[:, 0]) == 1).mean() <= ALPHA + TOL
    assert (c[:, 0] == CODE_INCONSISTENT).mean() > 0.35
    assert np.isin(c[:, 0], (CODE_INCONSISTENT, HETEROGENEOUS)).mean() > 0.8


# ---- the analysis on fold-shaped results ----------------------------------------------------


def _g12(folder) -> pd.Series:
    return analyze(folder).verdicts.set_index("gem").loc["g12"]


def test_a_consistent_effect_over_four_folds_keeps_wired_with_per_fold_effects(tmp_path):
    v = _g12(fr.fold_scenario(tmp_path / "e", [0.5, 0.4, 0.6, 0.5]))
    assert v["verdict"] == "keep wired" and v["folds"] == 4
    assert v["pooled_ci_low"] > 0 and v["pooled_effect"] == pytest.approx(0.5, abs=0.02)
    assert v["fold_effects"].count("fold ") == 4 and "wiring helps across periods" in v["reason"]
    assert v["held_out"] == "confirmed" and v["test_effect"] == pytest.approx(0.5, abs=0.02)
    assert "several validation periods" in v["market_noise"] and "spread over validation periods" in v["reason"]
    assert v["fold_sd_diff"] == pytest.approx(0.05 * np.sqrt(16 / 15))  # one fold's +-0.05 noise


def test_a_regime_flip_reads_inconsistent_across_periods_with_the_fold_effects(tmp_path):
    v = _g12(fr.fold_scenario(tmp_path / "e", [0.5, 0.5, -0.5, -0.5]))
    assert v["verdict"] == INCONSISTENT
    assert v["seed_verdict"] == "equivalent"  # what the seeds alone would have said
    assert "fold 0: +0.5" in v["reason"] and "fold 3: -0.5" in v["reason"]


def test_three_folds_read_too_few_periods_with_the_fold_effects(tmp_path):
    v = _g12(fr.fold_scenario(tmp_path / "e", [0.5, 0.4, 0.6]))
    assert v["verdict"] == INSUFFICIENT and v["seed_verdict"] == "keep wired"
    assert v["reason"].startswith("too few periods (K=3, need >= 4; add folds: data.folds.k or the purged scheme)")
    assert v["fold_effects"].count("fold ") == 3 and "fold 2: +0.6" in v["reason"]


def test_the_power_statement_is_the_pooled_tests_with_its_floor(tmp_path):
    """With folds the printed MDE and seeds needed are the pooled test's (issue 30: the seed
    rule's 0.173 and '68 seeds' were printed where no seed count reached 0.1): here the periods
    spread (+0.4..+0.6), so no seed count reaches the ROPE and the line says so."""
    from tune_gems.analysis.rules.power import PowerInputs, floor, mde

    v = _g12(fr.fold_scenario(tmp_path / "e", [0.5, 0.4, 0.6, 0.5]))
    d = PowerInputs(16, folds=4, tau2=v["tau2"], within=v["var_within"], seed=v["var_seed"])
    assert v["mde"] == pytest.approx(mde(d, 0.05, 0.8)) and v["mde_floor"] == pytest.approx(floor(d, 0.05, 0.8))
    assert v["mde_floor"] > v["rope"] and v["seeds_needed"] == np.inf
    assert "more periods, not more seeds" in v["power_note"]
    line = evidence_line(pd.Series({**v.to_dict(), "gem": "g12"}))
    assert "floor" in line and "more periods, not more seeds" in line


def test_the_power_is_stated_when_no_fold_interval_is_finite(tmp_path):
    """Five seeds per fold give no finite 95% rank interval (the smallest exact p is 0.0625), so
    the fold variances are unknown and the pooled test uses equal weights; the power statement
    still reads each fold's spread, pi / 3 x the sample variance of its informative differences
    (`rules.periods.components`' fallback), where it printed nothing before."""
    from tune_gems.analysis.rules.periods import RANK_EFFICIENCY

    v = _g12(fr.fold_scenario(tmp_path / "e", [0.5, 0.3, 0.6, 0.4], n=5))
    assert np.isfinite(v["pooled_effect"]) and np.isfinite(v["mde"]) and v["mde"] > 0
    assert v["var_within"] == pytest.approx(RANK_EFFICIENCY * v["fold_sd_diff"] ** 2, rel=0.5)


def test_one_fold_says_its_verdict_is_conditional_on_one_period(tmp_path):
    v = _g12(fr.fold_scenario(tmp_path / "e", [0.5]))
    assert v["verdict"] == "keep wired" and v["folds"] == 1
    assert "conditional on one validation period" in v["reason"] and not np.isfinite(v["pooled_effect"])


def test_results_without_a_fold_column_are_one_fold(tmp_path):
    folder = fr.wire_scenario(tmp_path / "e", effect=0.5)
    v = _g12(folder)
    assert v["folds"] == 1 and v["verdict"] == "keep wired" and "conditional on one validation period" in v["reason"]


def test_the_held_out_test_segment_is_the_confirmation_of_a_discovery(tmp_path):
    """Issue 37 item 4: a discovery keep wired / harmful is final only where the test segment
    agrees (`rules.decision.confirm_on_held_out`, through `rules.decision.decide`), else
    `not confirmed on held-out data` with both intervals; the same word in factors.csv; the test
    segment changes no other word."""
    res = analyze(fr.fold_scenario(tmp_path / "e", [0.5, 0.5, 0.5, 0.5], test_effect=-0.3))
    v = res.verdicts.set_index("gem").loc["g12"]
    assert v["discovery_verdict"] == "keep wired" and v["verdict"] == NOT_CONFIRMED
    assert v["held_out"] == "not confirmed: the opposite sign" and v["test_ci_high"] < 0
    assert v["pooled_ci_low"] > 0  # the discovery's interval, kept
    assert v["reason"].startswith(f"{NOT_CONFIRMED} (the discovery read keep wired): held-out test segment")
    assert f"[{v['pooled_ci_low']:.3g}, " in v["reason"] or "pooled over periods" in v["reason"]
    assert v["test_level"] == pytest.approx(0.05 / v["family_size"])
    f = res.factors.set_index("factor").loc["gems.g12.mode"]
    assert f["verdict"] == NOT_CONFIRMED and f["discovery_verdict"] == "keep wired"
    v = _g12(fr.fold_scenario(tmp_path / "f", [0.5, 0.5, 0.5, 0.5], test_effect=0.0))
    assert v["verdict"] == NOT_CONFIRMED and v["held_out"] == "not confirmed: the test interval includes 0"
    v = _g12(fr.fold_scenario(tmp_path / "g", [0.0, 0.0, 0.0, 0.0], test_effect=0.5))
    assert v["verdict"] == v["discovery_verdict"] != "keep wired"  # nothing else is chosen on the test segment
    assert not isinstance(v["held_out"], str) or v["held_out"] == ""


def test_skill_in_context_when_every_arm_lies_below_flat(tmp_path):
    """Issue 30 item 8: one metric with an interval against flat (0), not the best baseline's
    alpha Sharpe without one."""
    base = pd.DataFrame({"segment": ["val", "test"] * 3, "baseline": np.repeat(["flat", "buy_and_hold", "momentum"], 2),
                         "path": 0, "sharpe": 0.0, "alpha_sharpe": [0, 0, 0, 0, 0.5, 3.0]})
    folder = fr.fold_scenario(tmp_path / "e", [0.5, 0.5, 0.5, 0.5], baselines=base)
    m = pd.read_parquet(folder / "members.parquet")
    m["test_alpha_sharpe"] -= 3.0  # every arm's test alpha Sharpe below 0
    m.to_parquet(folder / "members.parquet", index=False)
    res = analyze(folder)
    g = res.verdicts[res.verdicts["gem"] == "g12"].iloc[0]
    assert "every arm lies below flat (test_alpha_sharpe" in g["skill"] and "conditional on one test period" in g["skill"]
    assert "not that the learner has skill" in evidence_line(g)
    report = render_report(res, {}, res.settings)
    assert "Skill in context" in report and "Over periods and out of sample" in report and "held_out" in report
    res = analyze(fr.fold_scenario(tmp_path / "f", [0.5, 0.5, 0.5, 0.5], baselines=base))  # arms above 0: nothing said
    assert (res.verdicts["skill"] == "").all()


def test_a_fold_column_that_is_not_an_integer_is_refused_in_one_line(tmp_path):
    folder = fr.fold_scenario(tmp_path / "e", [0.5, 0.5])
    m = pd.read_parquet(folder / "members.parquet")
    m["fold"] = m["fold"].astype(float) + 0.5
    m.to_parquet(folder / "members.parquet", index=False)
    with pytest.raises(DataError, match="column fold must hold integers"):
        analyze(folder)


def test_each_interval_alone_is_liberal_on_one_history(monkeypatch):
    """Why the combined interval: the seed rule with the market-noise interval each required alone
    (the gate before issue 20) reads ~3x alpha when the history's luck is one seed SE."""
    import tune_gems.analysis.rules.decision as decision

    fixed = (np.abs(period_codes(SHAPES, N_SIM, 1, tau=1.0)) == 1).any(1).mean()
    monkeypatch.setattr(decision, "combined_bounds", lambda effect, lo, hi, mlo, mhi: (lo, hi))
    alone = (np.abs(period_codes(SHAPES, N_SIM, 1, tau=1.0)) == 1).any(1).mean()
    assert fixed <= ALPHA + TOL < 2 * ALPHA < alone


def test_period_calibration_command_prints_the_table_and_refuses_bad_input(capsys):
    from tune_gems.analysis.cli import calibrate_periods_main as period_calibration_main

    assert period_calibration_main(["--seeds", "1"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "error: --seeds: must be at least 2, got 1"
    assert period_calibration_main(["--seeds", "6", "--n-sim", "100", "--gems", "2"]) == 0
    out = capsys.readouterr().out
    assert "Calibration of the rule over periods" in out and "worst false rate" in out


def test_an_unknown_heterogeneity_share_reads_a_dash_not_a_dash_percent():
    """I^2 is NaN where no fold's rank interval gives a variance (tau^2 unknown): the verdict's
    text says `I^2 -`, as tau^2 says `-`, not `-%`."""
    from tune_gems.analysis.text import percent

    assert percent(float("nan")) == "-" and percent(None) == "-"
    assert percent(0.0) == "0%" and percent(0.456) == "46%"


def test_the_numbers_a_user_decides_by_lead_every_verdict_table(tmp_path):
    """Issue 37 item 5: verdicts.csv, the terminal table and report.md lead with the final word,
    the estimate and interval of the test that decided it, that rule's MDE, the held-out effect
    and the family; the per-seed detail follows."""
    from tune_gems.analysis.render.report import LEAD_COLUMNS, format_verdict_table, render_report

    res = analyze(fr.fold_scenario(tmp_path / "e", [0.5, 0.4, 0.6, 0.5]))
    v = res.verdicts
    assert list(v.columns[:len(LEAD_COLUMNS)]) == list(LEAD_COLUMNS)
    g = v.set_index("gem").loc["g12"]
    assert g["decided_by"] == "pooled over 4 periods"
    assert (g["decided_effect"], g["decided_ci_low"]) == (g["pooled_effect"], g["pooled_ci_low"])
    group, head = (line.split() for line in format_verdict_table(v, res.placebo).splitlines()[:2])
    assert head[:11] == ["gem", "verdict", "effect", "CI", "Holm", "p", "decided", "by", "MDE", "held-out", "family"]
    assert group == ["the", "test", "that", "decided", "the", "word:", "seeds", "alone:"]  # the seeds' own heading
    report = render_report(res, {}, res.settings)
    assert ("| gem | verdict | decided_by | decided_effect | decided_ci_low | decided_ci_high | decided_ci_level | "
            "decided_p_adjusted | mde | test_effect |") in report
