"""A confirmation with power (issue 30, item 7).

- `tune-gems confirm` chooses each gem's seeds so that the confirmation's MDE is at most the
  discovery's (`search_choice.confirmation_power`, both through `rules.power.mde`: the same
  rule, the same units), and refuses before anything is trained or claimed (one line, exit 2,
  nothing written, `confirmed.json` not consumed) when the seeds given cannot give a finite
  interval or reach that MDE, or when no seed count can;
- on one price history the final verdict needs the selection-adjusted gate (the rule's last
  stage, `rules.decision.decide` with the search's selection: `rules.decision`); the simulated
  search through the same functions (`one_history_calibration.one_history_search_rates`) shows the
  family-wise false rate above alpha with fresh seeds alone and with the confirmation's own
  gates, and <= alpha with the final gate, at K = 1 and over periods; a true effect survives it.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fake_results as fr  # noqa: E402

from sweep_fixtures import SMOKE, store_spec  # noqa: E402
from tune_gems.analysis.calibrate.calibration import SearchShape, mc_tolerance, search_confirm_rates  # noqa: E402
from tune_gems.analysis.rules.power import PowerInputs, fewest_seeds, finite_interval, floor, mde  # noqa: E402
from tune_gems.analysis.rules.decision import final_on_one_history  # noqa: E402
from tune_gems.analysis.rules.settings import EQUIVALENT, HARMFUL, INCONCLUSIVE, KEEP  # noqa: E402
from tune_gems.analysis.calibrate.one_history_calibration import OneHistoryShape, one_history_search_rates  # noqa: E402
from tune_gems.analysis.verdicts.search_choice import confirmation_power, one_history_final  # noqa: E402
from tune_gems.contracts.errors import ConfigError  # noqa: E402

ALPHA, N_SEARCH = 0.05, 2000
TOL = mc_tolerance(ALPHA, N_SEARCH)


# -- the MDE of the rule that decides ---------------------------------------------------------------


def test_the_mde_falls_with_seeds_to_the_floor_of_periods_and_market_noise():
    one = PowerInputs(16, 1.0)
    assert mde(one, ALPHA / 3, 0.8) > mde(one.with_seeds(64), ALPHA / 3, 0.8)
    folds = PowerInputs(16, 1.0, folds=4, fold_sd=1.0, tau2=0.04)
    bottom = floor(folds, ALPHA / 3, 0.8)
    assert mde(folds.with_seeds(4096), ALPHA / 3, 0.8) == pytest.approx(bottom, rel=0.05)
    assert fewest_seeds(folds, 0.9 * bottom, ALPHA / 3, 0.8) == math.inf  # more periods, not more seeds
    market = PowerInputs(16, 1.0, market_se=0.2)
    assert mde(market.with_seeds(4096), ALPHA, 0.8) > 2.8 * 0.2  # (z + z) x market se
    assert mde(market.with_seeds(4096), ALPHA, 0.8) == pytest.approx(floor(market, ALPHA, 0.8), rel=0.05)
    assert mde(market, ALPHA, 0.8, history_level=ALPHA / 8) > mde(market, ALPHA, 0.8)
    assert not finite_interval(4, ALPHA / 3) and finite_interval(7, ALPHA / 3)


def _discovery(n=16, sd=0.3, **extra) -> pd.DataFrame:
    row = dict(gem="g12", n_seeds=n, sd_diff=sd, divergence_rate=0.0, folds=1, p_value=0.2, market_noise="not needed")
    row.update(extra)
    return pd.DataFrame([row, dict(gem="g6", n_seeds=0, p_value=np.nan)])


def _trials(k=4) -> pd.DataFrame:
    return pd.DataFrame({"trial_id": [f"t{i}" for i in range(k)], "status": "TERMINATED",
                         "gems.g12.mode": "wire", "verdict_gain_g12": np.linspace(0.1, 0.4, k)})


def test_the_seeds_are_the_fewest_whose_mde_is_at_most_the_discoverys():
    (plan,) = confirmation_power(_discovery(), _trials(), ["g12"], one_history=False, alpha=ALPHA, power=0.8,
                                 seeds=None, default_seeds=4)
    assert plan.confirmation_mde <= plan.discovery_mde < mde(PowerInputs(plan.seeds - 1, 0.3), ALPHA, 0.8)
    assert plan.seeds == 16 and "MDE" in plan.note and "<= the discovery's" in plan.note  # one gem both times
    # the discovery could decide nothing (4 seeds at alpha / 3): the fewest seeds with a finite interval
    (plan,) = confirmation_power(_discovery(n=4), _trials(), ["g12"], one_history=False, alpha=ALPHA, power=0.8,
                                 seeds=None, default_seeds=4)
    assert plan.seeds == 6 and math.isinf(plan.discovery_mde)  # 2 / 2^6 <= 0.05 < 2 / 2^5: the confirmation's one gem


def test_the_seeds_allow_for_the_discoverys_ties():
    """A discovery whose pairs tied (smoke: g12, 8 seeds, 1 tied) gets a confirmation whose
    expected informative pairs, not its raw seeds, reach the MDE and a finite interval: 7 seeds
    with 1 tie left 6 informative, whose smallest exact p 2/64 missed the level 0.025, and the
    one confirmation read [-inf, +inf]."""
    disc = _discovery(n=8, n_informative=7, tied_share=1 / 7)
    gems = ["g12", "g6"]
    (plan, _) = confirmation_power(disc, _trials(), gems, one_history=False, alpha=ALPHA, power=0.8, seeds=None,
                                   default_seeds=4)
    untied = confirmation_power(_discovery(n=7), _trials(), gems, one_history=False, alpha=ALPHA, power=0.8,
                                seeds=None, default_seeds=4)[0]
    informative = int(plan.seeds * (1 - 1 / 7) + 1e-9)
    assert informative >= untied.seeds and finite_interval(informative, ALPHA / 2)
    assert plan.seeds > untied.seeds and "expected to tie" in plan.note
    with pytest.raises(ConfigError, match=r"^--seeds 7: g12's confirmation cannot give a finite interval .* about 6 of"):
        confirmation_power(disc, _trials(), gems, one_history=False, alpha=ALPHA, power=0.8, seeds=7, default_seeds=4)


def test_the_discoverys_mde_is_the_one_analyze_stated():
    """A discovery whose pairs mostly tied: its verdict row states the MDE analyze printed (1.67, from
    its seeds and tie share); one informative pair leaves no spread to plan the seeds from, and the
    plan shows analyze's MDE beside its default seeds and says why, never `-`."""
    disc = _discovery(n=12, n_informative=1, sd_diff=np.nan, tied_share=11 / 12, mde=1.67)
    (plan, _) = confirmation_power(disc, _trials(), ["g12", "g6"], one_history=False, alpha=ALPHA, power=0.8,
                                   seeds=None, default_seeds=8)
    assert plan.discovery_mde == 1.67 and plan.seeds >= 8
    assert "the discovery's MDE is 1.67 (on 1 informative pair: too few to plan the seeds from)" in plan.note


def test_seeds_that_cannot_decide_are_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"^--seeds 4: g12's confirmation cannot give a finite interval"):
        confirmation_power(_discovery(), _trials(), ["g12"], one_history=False, alpha=ALPHA, power=0.8, seeds=4,
                           default_seeds=4)
    with pytest.raises(ConfigError, match=r"^--seeds 8: g12's confirmation MDE .* exceeds the discovery's .* at least 16"):
        confirmation_power(_discovery(), _trials(), ["g12"], one_history=False, alpha=ALPHA, power=0.8, seeds=8,
                           default_seeds=4)


def test_on_one_history_the_market_floor_can_make_any_seed_count_too_few():
    """The discovery's market-noise half-width at its level is 0.2 at 95%; the confirmation takes
    it at level / 16 (sixteen configurations chosen among): no seed count reaches the discovery's MDE."""
    disc = _discovery(market_noise="ok", market_ci_low=-0.2, market_ci_high=0.2, market_ci_level=0.95)
    with pytest.raises(ConfigError, match=r"cannot reach the discovery's MDE .* floor is .* data\.folds"):
        confirmation_power(disc, _trials(16), ["g12"], one_history=True, alpha=ALPHA, power=0.8, seeds=None,
                           default_seeds=4)
    (plan,) = confirmation_power(disc, _trials(16), ["g12"], one_history=False, alpha=ALPHA, power=0.8, seeds=None,
                                 default_seeds=4)
    assert plan.seeds <= 16 and plan.candidates == 1


# -- refused before training, nothing written, confirmed.json not consumed --------------------------------


def _search_folder(tmp_path: Path, shared: bool) -> Path:
    """A finished wire_search as `tune-gems confirm` reads it: the smoke spec (recorded in the
    marker) and a one-trial experiment whose proposal wires g12 beside its control (16 seeds)."""
    folder = fr.wire_scenario(tmp_path / "search", effect=0.3, noise=0.2)
    t = pd.read_parquet(folder / "trials.parquet")
    t["gems.g12.mode"], t["verdict_gain_g12"] = "wire", 0.3
    if shared:
        t["data.synthetic.paths"] = "shared"
    t.to_parquet(folder / "trials.parquet", index=False)
    spec = SMOKE.read_text()
    if shared:
        spec = spec.replace("      n: 3000\n", "      n: 3000\n      paths: shared\n")
    store_spec(folder, spec.encode())
    return folder


@pytest.mark.parametrize("seeds, fragment", [("4", "cannot give a finite interval"), ("8", "exceeds the discovery's")])
def test_confirm_refuses_seeds_that_cannot_reach_the_discoverys_mde_before_training(tmp_path, seeds, fragment):
    from sweep_fixtures import cli_in_process

    folder = _search_folder(tmp_path, shared=False)
    before = sorted(p.name for p in folder.iterdir())
    res = cli_in_process("confirm", str(folder), "--seeds", seeds)
    assert res.returncode == 2 and fragment in res.stderr and res.stderr.count("\n") == 1, res.stderr
    assert "nothing was trained" in res.stderr or "finite interval" in res.stderr
    assert sorted(p.name for p in folder.iterdir()) == before  # no confirmed.json, no confirmation, no lock left


def test_the_plan_is_said_before_training(tmp_path, monkeypatch):
    """Without --seeds the confirmation trains the seeds its plan chose, and says so first."""
    import tune_gems.commands.confirm as confirm_mod

    folder = _search_folder(tmp_path, shared=True)
    lines = []

    def stop(*args, **kwargs):
        raise KeyboardInterrupt  # stands in for training: the plan is all this test reads

    monkeypatch.setattr(confirm_mod, "run_plans", stop)
    with pytest.raises(KeyboardInterrupt):
        confirm_mod.confirm(folder, log=lines.append)
    said = [line for line in lines if "trains" in line and "seeds per arm" in line]
    assert len(said) == 1 and said[0].startswith("tune-gems confirm: g12: the confirmation (1 period(s), one price history")
    assert not (folder / "confirmed.json").exists()  # withdrawn: the confirmation did not happen


# -- on one price history: the final verdict survives the selection ------------------------------------


def test_the_final_gate_keeps_only_what_the_adjusted_interval_confirms():
    v = final_on_one_history([KEEP, KEEP, HARMFUL, EQUIVALENT, EQUIVALENT], [0.1, -0.1, -0.5, -0.05, np.nan],
                             [0.9, 0.5, -0.1, 0.05, np.nan], [True, True, True, True, False])
    assert list(v) == [KEEP, INCONCLUSIVE, HARMFUL, EQUIVALENT, INCONCLUSIVE]
    assert final_on_one_history([KEEP], [0.1], [0.9], [False])[0] == INCONCLUSIVE  # no market-noise interval


def test_the_final_gate_is_the_rules_last_stage_on_one_history():
    """`rules.decision.decide` with the search's selection: a keep whose combined interval still
    excludes 0 with the market part at level / 8 survives; one whose history luck is too large for
    that, or without a market-noise interval, is not final; one candidate is no selection."""
    from tune_gems.analysis.rules.decision import Evidence, decide
    from tune_gems.analysis.rules.settings import Thresholds

    d = 0.5 + np.linspace(-0.1, 0.1, 16)[None, :]  # every seed gains: keep wired on the seeds
    half = np.array([[0.15, 0.4, np.nan]])

    def market(tail):
        return 0.5 - half, 0.5 + half, np.isfinite(half)

    def final(selection):
        return decide(Evidence([d, d, d], market=market, selection=selection), Thresholds())

    dec = final([8, 8, 8])
    assert list(dec.discovery_verdict[0]) == [KEEP, KEEP, KEEP]  # (c: no market-noise interval, no gate)
    assert list(dec.final_verdict[0]) == [KEEP, INCONCLUSIVE, INCONCLUSIVE]
    assert list(final([1, 1, 1]).final_verdict[0]) == [KEEP, KEEP, INCONCLUSIVE]  # c is never final on one history


def test_one_history_final_reads_what_the_rule_wrote(tmp_path):
    """Over periods the final verdict is the pooled interval at the selection-adjusted level: the
    verdict table the rule wrote (`analyze(selection=...)`) carries it, `one_history_final` reads it."""
    from tune_gems.analysis.analyze import analyze
    from tune_gems.analysis.rules.decision import pooled_adjusted_bounds

    res = analyze(fr.fold_scenario(tmp_path / "e", [0.5, 0.1, 0.6, 0.5], test_effect=1.5), n_boot=50,
                  selection={"g12": 8})  # a test segment that confirms the discovery
    f = one_history_final(res.verdicts, {"g12": 8}).set_index("gem").loc["g12"]
    r = res.verdicts.set_index("gem").loc["g12"]
    lo, hi = pooled_adjusted_bounds(r["pooled_effect"], r["pooled_ci_low"], r["pooled_ci_high"], 1 - r["pooled_ci_level"],
                                    r["pooled_df"], 8)
    assert f["final_ci_low"] == pytest.approx(lo) and f["final_ci_high"] == pytest.approx(hi)
    assert r["verdict"] == KEEP and f["final_verdict"] == (KEEP if lo > 0 else INCONCLUSIVE)
    assert "selection-adjusted level (/8)" in f["final_rule"]
    assert list(one_history_final(res.verdicts, {"g12": 8})["gem"]) == ["g12"]  # only the gems confirmed


@pytest.mark.parametrize("folds, luck", [(1, 1.0), (1, 3.0), (4, 3.0)])
def test_on_one_history_the_confirmation_keeps_the_family_wise_rate_with_the_final_gate(folds, luck):
    r = one_history_search_rates(OneHistoryShape(luck=luck, folds=folds), 0.0, N_SEARCH)
    assert r["final_fwer"] <= ALPHA + TOL, r
    assert r["seeds_fwer"] > 3 * ALPHA  # fresh seeds alone inherit the history's luck: the test could fail
    if folds == 1 and luck == 3.0:
        assert r["gated_fwer"] > ALPHA + TOL  # the gates at the verdict's level do not see the selection


def test_on_one_history_a_true_effect_survives_the_final_gate():
    shape = OneHistoryShape(luck=1.0, confirm_seeds=32)
    assert one_history_search_rates(shape, 1.0, 1000)["power"] >= 0.8


def test_with_fresh_paths_a_true_effect_at_the_discoverys_mde_survives_the_chosen_confirmation():
    """The discovery's MDE (16 seeds, 3 gems) and the seeds `confirmation_power` chooses for it:
    the simulated confirmation (`calibration.search_confirm_rates`) finds the effect with the
    stated power."""
    shape = SearchShape()
    disc = pd.DataFrame([dict(gem=g, n_seeds=16, sd_diff=shape.sd, divergence_rate=0.0, folds=1, p_value=0.5,
                              market_noise="not needed") for g in ("g6", "g10", "g12")])
    trials = pd.DataFrame({"status": ["TERMINATED"] * 2, **{f"gems.{g}.mode": "wire" for g in ("g6", "g10", "g12")},
                           **{f"verdict_gain_{g}": [0.1, 0.2] for g in ("g6", "g10", "g12")}})
    plans = confirmation_power(disc, trials, ["g6", "g10", "g12"], one_history=False, alpha=ALPHA, power=0.8,
                               seeds=None, default_seeds=4)
    n = plans[0].seeds
    r = search_confirm_rates(SearchShape(confirm_seeds=n), plans[0].discovery_mde, 1000)
    assert r["power"] >= 0.8 - mc_tolerance(0.8, 1000) and r["confirmed_fwer"] <= ALPHA + mc_tolerance(ALPHA, 1000)
