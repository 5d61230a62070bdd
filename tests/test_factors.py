"""Every factor judged (issue 30, item 4): `tune_gems.analysis.verdicts.factors` on synthetic factorials
with known answers, the factor table in the written analysis and on the terminal, and its
calibration through `rules.decision.decide` (the function the table runs): the family of gems
and factors keeps its family-wise false rate <= alpha, and a planted factor effect is found."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fake_results as fr  # noqa: E402
from sweep_fixtures import cli_in_process as cli  # noqa: E402 (tune-gems through its main, in-process)

from tune_gems.analysis.analyze import analyze, run_analysis  # noqa: E402
from tune_gems.analysis.calibrate.calibration import mc_tolerance  # noqa: E402
from tune_gems.analysis.calibrate.factor_calibration import factor_calibration_table, family_codes  # noqa: E402
from tune_gems.analysis.calibrate.walk_forward_calibration import Scenario  # noqa: E402
from tune_gems.analysis.verdicts.factors import FACTOR, GEM, INTERACTION, SHOWN, format_factor_table  # noqa: E402
from tune_gems.analysis.rules.settings import (  # noqa: E402
    CONFOUNDED, EQUIVALENT, HARMFUL, INCONSISTENT, INSUFFICIENT, KEEP_CODE, Thresholds,
)

ALPHA, N_SIM = 0.05, 2000
TOL = mc_tolerance(ALPHA, N_SIM)
LEVELS = {"gems.g12.mode": ["measure", "wire"], "model.noisy": [True, False], "model.spectral_norm": [True, False]}


def _noisy_hurts(a, k=0):
    """NoisyNets on costs 0.6 alpha Sharpe; wiring g12 nothing; spectral norm nothing."""
    return -0.6 * bool(a["model.noisy"])


def _rows(table: pd.DataFrame) -> dict[str, pd.Series]:
    return {r["factor"]: r for _, r in table.iterrows()}


def test_a_factorial_judges_every_factor_with_the_gems_as_one_family(tmp_path):
    res = analyze(fr.factorial_scenario(tmp_path / "e", LEVELS, _noisy_hurts))
    f = res.factors
    rows = _rows(f)
    noisy = rows["model.noisy"]
    assert noisy["kind"] == FACTOR and noisy["contrast"] == "true vs false"
    assert noisy["verdict"] == HARMFUL and noisy["effect"] == pytest.approx(-0.6, abs=0.02)
    assert "model.noisy=true is worse than false" == noisy["reading"]
    assert rows["model.spectral_norm"]["verdict"] == EQUIVALENT
    g12 = rows["gems.g12.mode"]
    assert g12["kind"] == GEM and g12["verdict"] == EQUIVALENT
    judged = f[f["kind"] != INTERACTION]
    assert (judged["family_size"] == 3).all()  # g12 and the two model factors; g6 and g10 have no design
    assert list(judged["factor"])[0] == "model.noisy"  # the largest effect leads the table
    # one family, one word: the gem's row is its verdict (the same seeds, word, interval, Holm p, MDE)
    v = res.verdicts.set_index("gem").loc["g12"]
    assert v["family_size"] == 3 and v["verdict"] == EQUIVALENT
    for col in ("n_seeds", "effect", "ci_low", "ci_high", "p_value", "p_adjusted", "tost_p_adjusted", "mde"):
        assert g12[col] == pytest.approx(v[col]), col
    inter = f[f["kind"] == INTERACTION]
    assert len(inter) == 3 and (inter["verdict"] != SHOWN).all()


def test_a_planted_interaction_is_shown_and_adjusted(tmp_path):
    def effect(a, k=0):  # wiring g12 helps only without spectral norm
        return 0.5 * (a["gems.g12.mode"] == "wire") * (not a["model.spectral_norm"])

    f = analyze(fr.factorial_scenario(tmp_path / "e", LEVELS, effect)).factors
    inter = _rows(f[f["kind"] == INTERACTION])
    x = inter["gems.g12.mode x model.spectral_norm"]
    assert x["verdict"] == SHOWN and x["effect"] == pytest.approx(-0.5, abs=0.02)
    assert x["family_size"] == 3 and x["ci_level"] == pytest.approx(1 - ALPHA / 3)  # Holm's first step
    assert inter["gems.g12.mode x model.noisy"]["verdict"] != SHOWN
    assert _rows(f)["gems.g12.mode"]["effect"] == pytest.approx(0.25, abs=0.02)  # the main effect: the average


def test_list_entries_that_differ_in_one_key_pair_and_in_two_keys_are_confounded(tmp_path):
    arms = {"control": {}, "fast": {"trainer.lr": 3e-4}, "both": {"trainer.lr": 1e-3, "model.noisy": False}}

    def effect(a, k=0):
        return 0.4 * (a.get("trainer.lr") == 3e-4)

    f = _rows(analyze(fr.factorial_scenario(tmp_path / "e", {}, effect, arms=arms)).factors)
    lr = f["trainer.lr"]  # three levels: each against the most common (ties: the first), 1e-4
    table = analyze(tmp_path / "e").factors
    lrs = table[table["factor"] == "trainer.lr"].set_index("contrast")
    assert set(lrs.index) == {"0.0003 vs 0.0001", "0.001 vs 0.0001"}
    assert lrs.loc["0.0003 vs 0.0001", "effect"] == pytest.approx(0.4, abs=0.02)
    assert lrs.loc["0.001 vs 0.0001", "verdict"] == CONFOUNDED and "model.noisy" in lrs.loc["0.001 vs 0.0001", "fix"]
    assert f["model.noisy"]["verdict"] == CONFOUNDED and lr["kind"] == FACTOR


def test_over_folds_a_factor_gets_the_period_rule(tmp_path):
    levels = {"gems.g12.mode": ["measure", "wire"], "model.noisy": [True, False]}

    def flip(a, k):  # NoisyNets helps in the first two periods and hurts in the last two
        return (0.5 if k < 2 else -0.5) * bool(a["model.noisy"])

    f = _rows(analyze(fr.factorial_scenario(tmp_path / "e", levels, flip, folds=4)).factors)
    noisy = f["model.noisy"]
    assert noisy["folds"] == 4 and noisy["verdict"] == INCONSISTENT
    assert noisy["fold_effects"].count("fold ") == 4 and "fold 3: -0.5" in noisy["fold_effects"]
    assert np.isfinite(noisy["pooled_effect"]) and noisy["seed_verdict"] == EQUIVALENT

    def steady(a, k):
        return 0.5 * bool(a["model.noisy"])

    f = _rows(analyze(fr.factorial_scenario(tmp_path / "f", levels, steady, folds=4)).factors)
    assert f["model.noisy"]["verdict"] == "keep wired" and f["model.noisy"]["pooled_ci_low"] > 0


def _same_contrast_everywhere(res, console: str = "", report: str = ""):
    """verdicts.csv and factors.csv carry the same word, interval and Holm p for every gem (the
    console's and report.md's lines too, where given)."""
    gem = res.factors[res.factors["kind"] == GEM].set_index("factor")
    for _, v in res.verdicts.iterrows():
        f = gem.loc[f"gems.{v['gem']}.mode"]
        assert f["verdict"] == v["verdict"] and f["family_size"] == v["family_size"], v["gem"]
        for col in ("effect", "ci_low", "ci_high", "p_adjusted", "pooled_effect", "pooled_ci_low", "pooled_ci_high",
                    "mde"):
            assert f[col] == pytest.approx(v[col], nan_ok=True), (v["gem"], col)
        for text in (console, report):
            if text:
                assert f"{v['gem']}: {v['verdict']}" in text


def test_without_factors_the_gem_rows_read_as_the_verdicts(tmp_path):
    """Gems alone: the family is the verdicts' family, the rule the same, so the same words."""
    for folder in (fr.wire_scenario(tmp_path / "a", effect=0.5), fr.wire_scenario(tmp_path / "b", effect=0.0),
                   fr.fold_scenario(tmp_path / "c", [0.5, 0.4, 0.6, 0.5]), fr.fold_scenario(tmp_path / "d", [0.5, -0.5])):
        _same_contrast_everywhere(analyze(folder))


@pytest.mark.parametrize("folds", [1, 4])
def test_one_family_one_word_on_a_factorial(tmp_path, folds):
    """issue 37 item 1: the family of a design is every main effect it varies (gems and factors
    alike); verdicts.csv, factors.csv, the console and report.md carry the same word, interval
    and Holm p for each gem's contrast (G12 helps by 0.1 in every period, NoisyNets by 0.4 in
    every other one; before, verdicts.csv judged G12 among the gems alone: Holm p 0.0005 there,
    0.0015 in factors.csv)."""
    levels = {"gems.g12.mode": ["measure", "wire"], "model.noisy": [True, False], "model.spectral_norm": [True, False]}

    def effect(a, k):
        return 0.1 * (a["gems.g12.mode"] == "wire") + (0.4 if a["model.noisy"] else 0.0) * (k % 2)

    folder = fr.factorial_scenario(tmp_path / "e", levels, effect, n=12, folds=folds)
    out = tmp_path / "out"
    run = cli("analyze", str(folder), "--out", str(out), "--no-plots", "--verbose")
    assert run.returncode == 0, run.stderr[-2000:]
    res = analyze(folder)
    assert (res.verdicts["family_size"] == 3).all()  # g12, model.noisy, model.spectral_norm
    _same_contrast_everywhere(res, run.stdout, (out / "report.md").read_text())
    written = pd.read_csv(out / "verdicts.csv").set_index("gem").loc["g12"]
    factor = pd.read_csv(out / "factors.csv").set_index("factor").loc["gems.g12.mode"]
    assert written["verdict"] == factor["verdict"] and written["p_adjusted"] == pytest.approx(factor["p_adjusted"])


@pytest.mark.parametrize("folds", [1, 4])
def test_every_table_pairs_over_the_verdicts_epoch_window(tmp_path, folds):
    """issue 36 item 4: under a window other than the default, verdicts.csv, factors.csv and the
    paired-seed plot's table give the same effect of a gem (the fakes read 100 outside the last
    three epochs, on both sides: a wider window dilutes the effect, so a table read on another
    window would differ)."""
    from tune_gems.analysis.render.figures import plot_tables
    from tune_gems.analysis.rules.periods import fold_estimates

    levels = {"gems.g12.mode": ["measure", "wire"], "model.noisy": [True, False]}
    folder = fr.factorial_scenario(tmp_path / "e", levels, lambda a, k: 0.3 * (a["gems.g12.mode"] == "wire") + 0.1 * k,
                                   n=12, folds=folds)
    default = analyze(folder, n_boot=50).verdicts.set_index("gem").loc["g12", "effect"]
    for window in ("last-half", "from-epoch"):
        res = analyze(folder, n_boot=50, window=window, **({"first_epoch": 1} if window == "from-epoch" else {}))
        v, f = res.verdicts.set_index("gem").loc["g12"], res.factors.set_index("factor").loc["gems.g12.mode"]
        assert f["effect"] == pytest.approx(v["effect"]) and f["ci_low"] == pytest.approx(v["ci_low"])
        assert f["pooled_effect"] == pytest.approx(v["pooled_effect"], nan_ok=True)
        pairs = plot_tables(res)["paired_seeds.csv"]
        per_seed = pairs[pairs["gem"] == "g12"].groupby("seed")["difference"].mean().to_numpy(float)
        assert fold_estimates(per_seed[None, :])["theta"][0] == pytest.approx(v["effect"])  # the plot's pairs too
    assert v["effect"] == pytest.approx(0.75 * default, rel=0.05)  # from-epoch 1: epoch 1 of 4 dilutes it


def test_the_analysis_writes_factors_csv_the_report_section_and_prints_the_table(tmp_path, capsys):
    folder = fr.factorial_scenario(tmp_path / "e", LEVELS, _noisy_hurts)
    res = run_analysis(folder, tmp_path / "out", plot=False)
    written = pd.read_csv(tmp_path / "out" / "factors.csv")
    assert list(written["factor"]) == list(res.factors["factor"]) and "factors.csv" in res.files
    report = (tmp_path / "out" / "report.md").read_text()
    assert "## Every factor judged" in report and "### Interactions of the factorial" in report
    assert "model.noisy" in report.split("## Every factor judged")[1]
    text = format_factor_table(res.factors)
    assert text.splitlines()[4].startswith("model.noisy")  # under the heading line, the header and its rule and "not judged (no design): gems.g6.mode" in text
    from tune_gems.commands.cli import main

    assert main(["analyze", str(folder), "--out", str(tmp_path / "out2"), "--no-plots"]) == 0
    out = capsys.readouterr().out
    assert "factors (gems and factors one family, Holm over 3" in out and "model.spectral_norm" in out


# -- calibration through rules.decision.decide -------------------------------------------------------


@pytest.mark.parametrize("folds,tau", [(1, 1.0), (1, 3.0), (4, 3.0), (6, 1.0)])
def test_the_family_of_gems_and_factors_keeps_its_family_wise_rate(folds, tau):
    codes = family_codes(3, 3, 16, N_SIM, folds, Scenario(tau=tau))
    assert (np.abs(codes) == 1).any(1).mean() <= ALPHA + TOL, (folds, tau)


def test_a_planted_factor_effect_is_found():
    assert (family_codes(3, 3, 16, N_SIM, 6, Scenario(effect=1.0, tau=1.0))[:, 3] == KEEP_CODE).mean() >= 0.85
    assert (family_codes(3, 3, 32, N_SIM, 1, Scenario(effect=1.0))[:, 3] == KEEP_CODE).mean() >= 0.9


def test_the_calibration_table_and_command(capsys):
    t = factor_calibration_table(2, 2, 12, Thresholds(n_sim=200), folds=(1, 4), taus=(0.0,))
    assert list(t["folds"]) == [1, 4] and (t["fwer"] <= 0.2).all()
    from tune_gems.analysis.cli import calibrate_factors_main as main

    assert main(["--factors", "0"]) == 2 and "--factors: must be at least 1" in capsys.readouterr().err


@pytest.mark.slow
def test_a_real_train_with_an_arms_factorial_gets_its_factor_table(tmp_path):
    """End to end on the CPU: `tune-gems train` with arms.factors over NoisyNets and G12's mode
    (every other gem measured), then `tune-gems analyze`: factors.csv judges model.noisy and the
    gem in one family, with their interaction, and the console prints the table."""
    from sweep_fixtures import cli_in_process as cli

    out = tmp_path / "run"
    tiny = ["trainer.population=6", "trainer.epochs=2", "trainer.iterations_per_epoch=8", "trainer.batch_size=16",
            "trainer.n_envs=2", "trainer.replay_capacity=512", "trainer.learning_starts=32", "env.window=8",
            "env.episode_length=32", "model.hidden=16", "model.stream_hidden=8", "model.atoms=11",
            "model.predictor_hidden=16", "data.synthetic.n=900", "device=cpu"]
    res = cli("train", *tiny, "arms.factors={model.noisy: [true, false], gems.g12.mode: [measure, wire]}", "--out", str(out),
              env={"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
    assert res.returncode == 0, res.stderr[-2000:]
    ana = cli("analyze", str(out), "--no-plots")
    assert ana.returncode == 0, ana.stderr[-2000:]
    f = pd.read_csv(out / "analysis" / "factors.csv").set_index("factor")
    assert f.loc["model.noisy", "kind"] == FACTOR and f.loc["model.noisy", "n_seeds"] == 6
    assert f.loc["gems.g12.mode", "n_seeds"] == 6
    # the family: the contrasts with informative pairs (a tiny train's pairs can all tie: they carry
    # no weight, and that row reads insufficient data, as its verdicts.csv row does)
    informative = [k for k in ("model.noisy", "gems.g12.mode") if np.isfinite(f.loc[k, "p_value"])]
    assert f.loc["model.noisy", "family_size"] == len(informative)
    g12 = f.loc["gems.g12.mode"]
    if not np.isfinite(g12["p_value"]):  # every pair tied: no test, in both tables
        assert g12["verdict"] == INSUFFICIENT and g12["tied_share"] == 1
    assert f.loc["gems.g12.mode x model.noisy", "kind"] == INTERACTION
    assert f"factors (gems and factors one family, Holm over {len(informative)}" in ana.stdout
    assert "model.noisy" in ana.stdout


def test_a_key_with_many_levels_that_never_pairs_is_one_row(tmp_path):
    """Three trials on common seeds at three G12 weights, each also differing in the learning
    rate: the weight never pairs alone, and reads one confounded row, not one per level."""
    trials = [fr.ArmTrial(f"t{j}", {"wired": {"gems.g12.mode": "wire", "gems.g12.weight": w, "trainer.lr": lr}},
                          {"wired": list(fr.seed_values(8))}, seed=1)
              for j, (w, lr) in enumerate([(0.1, 1e-4), (0.2, 2e-4), (0.3, 3e-4)])]
    f = analyze(fr.write_arms_experiment(tmp_path / "e", trials)).factors
    weight = f[f["factor"] == "gems.g12.weight"]
    assert len(weight) == 1 and weight.iloc[0]["verdict"] == CONFOUNDED
