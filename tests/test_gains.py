"""Paired gains inside a trial (issue 12, the wire_search design; tune_gems.design.arm_sets).

The design's arms (proposal, control, without-<gem>), the gain arithmetic on hand-made member
columns (pairing by seed index, divergence -> NaN, a proposal that wires nothing -> 0), and an
end-to-end CPU run of `tune-gems train` whose history gains equal an independent computation
from its members.csv.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from learner_fixtures import TINY, tiny_config
from sweep_fixtures import cli_in_process
from tune_gems.design.arm_sets import (
    CONTROL, PROPOSAL, also_named, apply_design, arm_aliases, has_gains, paired_gains, verdict_gains, wire_search_arms,
    wired_gems,
)
from tune_gems.design.arms import expand_arms
from tune_gems.contracts.errors import ConfigError
from tune_gems.stats.metrics import VERDICT_GAIN, GAIN_METRICS, GAIN_OBJECTIVES, epoch_metrics, gain_metrics, has_gain_arms

GEMS = ("g6", "g10", "g12")


# -- the design --------------------------------------------------------------------------------


def test_wire_search_arms_are_proposal_control_and_one_without_per_wired_gem():
    cfg = tiny_config("gems.g6.mode=wire", "gems.g6.weight=0.3", "gems.g10.mode=off", "gems.g12.mode=wire")
    assert wired_gems(cfg) == ("g6", "g12")
    arms = {a.name: a.config for a in expand_arms(cfg, wire_search_arms(cfg))}
    assert list(arms) == [PROPOSAL, CONTROL, "without-g6", "without-g12"]
    modes = {name: tuple(c.gem(g).mode for g in GEMS) for name, c in arms.items()}
    assert modes == {
        PROPOSAL: ("wire", "off", "wire"),
        CONTROL: ("measure", "off", "measure"),  # wire -> measure, off stays off
        "without-g6": ("measure", "off", "wire"),
        "without-g12": ("wire", "off", "measure"),
    }
    assert all(c.gem("g6").weight == 0.3 for c in arms.values())  # weights as proposed
    designed = apply_design(cfg, "wire_search")
    assert [a.name for a in expand_arms(designed)] == list(arms)
    assert designed.trainer.population == cfg.trainer.population  # seeds per arm unchanged


def test_a_proposal_that_wires_nothing_is_its_own_control():
    cfg = tiny_config("gems.g6.mode=measure", "gems.g10.mode=off")
    assert [a.name for a in expand_arms(apply_design(cfg, "wire_search"))] == [CONTROL]
    g = paired_gains(GEMS, [CONTROL] * 3, [0, 1, 2], [0.5, -0.2, 1.0], [0.1, 0.2, 0.3])
    assert g["val_sharpe_gain"] == 0.0 and g["val_alpha_sharpe_gain"] == 0.0
    assert all(math.isnan(g[f"gain_{n}"]) for n in GEMS)


def test_one_wired_gem_trains_control_once_and_names_it_both_ways():
    """control (every wired gem measured) and without-g6 (only g6 measured) are one configuration
    when g6 is the only wired gem: trained once, as control, which also answers to without-g6."""
    cfg = apply_design(tiny_config("gems.g6.mode=wire", "gems.g12.mode=measure"), "wire_search")
    arms = expand_arms(cfg)
    assert [a.name for a in arms] == [PROPOSAL, CONTROL]
    settings = [tuple(sorted(a.settings.items())) for a in arms]
    assert len(set(settings)) == len(settings)  # no two arms alike
    assert arm_aliases(cfg) == {"without-g6": CONTROL} and also_named(arm_aliases(cfg), CONTROL) == "without-g6"
    g = paired_gains(GEMS, [PROPOSAL, PROPOSAL, CONTROL, CONTROL], [0, 1, 0, 1], [1.0, 2.0, 0.0, 0.5], [0.3, 0.7, 0.1, 0.2],
                     aliases=arm_aliases(cfg))
    assert g["gain_g6"] == pytest.approx(g["val_alpha_sharpe_gain"]) == pytest.approx(((0.3 - 0.1) + (0.7 - 0.2)) / 2)
    assert math.isnan(g["gain_g12"])
    two = apply_design(tiny_config("gems.g6.mode=wire", "gems.g12.mode=wire"), "wire_search")
    assert arm_aliases(two) == {} and len(expand_arms(two)) == 4  # two wired gems: four distinct arms


def test_apply_design_refuses_a_config_with_arms_and_unknown_designs():
    cfg = tiny_config("gems.g6.mode=wire")
    with pytest.raises(ConfigError, match="design: unknown design 'nope'"):
        apply_design(cfg, "nope")
    with pytest.raises(ConfigError, match="remove config.arms"):
        apply_design(apply_design(cfg, "wire_search"), "wire_search")


def test_gain_columns_exist_only_for_designed_arms_and_follow_the_registry():
    assert gain_metrics((), ("default",)) == () and gain_metrics((), ("a", "control")) == ()
    cols = gain_metrics((), (PROPOSAL, CONTROL, "without-g6"))
    assert cols == (*GAIN_METRICS, *GAIN_OBJECTIVES, "gain_g6", "gain_g10", "gain_g12",
                    VERDICT_GAIN, "verdict_gain_g6", "verdict_gain_g10", "verdict_gain_g12")
    assert gain_metrics((), (CONTROL,)) == cols  # the one-arm design reports gains (all 0) too
    assert epoch_metrics((), (PROPOSAL, CONTROL))[-len(cols):] == cols
    for arms in [("default",), (CONTROL,), (PROPOSAL, CONTROL), (PROPOSAL,), (CONTROL, "x"), (PROPOSAL, CONTROL, "without-g6")]:
        assert has_gains(arms) == has_gain_arms(arms) == bool(gain_metrics((), arms))


# -- the arithmetic ------------------------------------------------------------------------------


def test_paired_gains_pair_by_seed_index_not_by_member_order():
    # members listed out of order: the pairs are (arm, seed index), whatever the row order
    arm = [PROPOSAL, PROPOSAL, CONTROL, CONTROL, "without-g10", "without-g10"]
    seed = [0, 1, 1, 0, 1, 0]
    vs = [1.0, 2.0, 0.5, 0.0, 9.0, 9.0]
    va = [0.3, 0.7, 0.2, 0.1, 0.0, 1.0]
    g = paired_gains(GEMS, arm, seed, vs, va)
    assert g["val_sharpe_gain"] == pytest.approx(((1.0 - 0.0) + (2.0 - 0.5)) / 2)
    assert g["val_alpha_sharpe_gain"] == pytest.approx(((0.3 - 0.1) + (0.7 - 0.2)) / 2)
    assert g["gain_g10"] == pytest.approx(((0.3 - 1.0) + (0.7 - 0.0)) / 2)
    assert math.isnan(g["gain_g6"]) and math.isnan(g["gain_g12"])  # not wired: no without arm


def test_a_diverged_member_makes_its_pairs_gains_nan():
    arm = [PROPOSAL, PROPOSAL, CONTROL, CONTROL, "without-g6", "without-g6"]
    seed = [0, 1, 0, 1, 0, 1]
    vs = [1.0, 2.0, 0.5, 0.0, 0.0, 0.0]
    va = [0.3, 0.7, 0.2, np.nan, 0.0, 0.0]  # control at seed 1 diverged (its columns are NaN)
    vs[3] = np.nan
    g = paired_gains(GEMS, arm, seed, vs, va)
    assert math.isnan(g["val_sharpe_gain"]) and math.isnan(g["val_alpha_sharpe_gain"])
    assert g["gain_g6"] == pytest.approx(0.5)  # its pairs are intact
    va[0] = np.nan  # now the proposal diverged too: every gain is NaN
    assert math.isnan(paired_gains(GEMS, arm, seed, vs, va)["gain_g6"])
    g = paired_gains(GEMS, [CONTROL, CONTROL], [0, 1], [0.1, np.nan], [0.1, np.nan])
    assert math.isnan(g["val_sharpe_gain"])


def _hodges_lehmann(d) -> float:
    """Median of the Walsh averages (d_i + d_j) / 2, i <= j, by a plain loop (not the code under test)."""
    d = list(d)
    return float(np.median([(d[i] + d[j]) / 2 for i in range(len(d)) for j in range(i, len(d))]))


def test_verdict_gain_is_the_hodges_lehmann_of_last_k_window_means_by_seed_index():
    arm = [PROPOSAL, PROPOSAL, PROPOSAL, CONTROL, CONTROL, CONTROL, "without-g6", "without-g6", "without-g6"]
    seed = [0, 1, 2, 2, 1, 0, 0, 1, 2]
    window = np.array([[1.0, 2.0, 0.0, 0.5, 0.0, 0.1, 3.0, 0.0, 0.0],
                       [3.0, 0.0, 1.0, 0.5, 1.0, 0.3, 1.0, 0.0, 2.0]])  # 2 epochs x 9 members
    g = verdict_gains(GEMS, arm, seed, window, np.zeros_like(window, bool))
    mean = window.mean(0)
    assert g[VERDICT_GAIN] == pytest.approx(_hodges_lehmann([mean[0] - mean[5], mean[1] - mean[4], mean[2] - mean[3]]))
    assert g["verdict_gain_g6"] == pytest.approx(_hodges_lehmann(mean[:3] - mean[6:]))
    assert math.isnan(g["verdict_gain_g10"])  # no without-g10 arm


def test_verdict_gain_scores_a_diverged_member_as_the_worst_outcome_not_as_missing():
    arm = [PROPOSAL] * 4 + [CONTROL] * 4
    seed = [0, 1, 2, 3] * 2
    window = np.array([[0.5, 0.3, 0.7, 0.9, 0.0, 0.0, 0.0, 0.0]])
    div = np.zeros_like(window, bool)
    full = verdict_gains((), arm, seed, window, div)[VERDICT_GAIN]
    assert full == pytest.approx(_hodges_lehmann([0.5, 0.3, 0.7, 0.9]))
    div[0, 0] = True  # one proposal seed diverged: its difference is -inf, the pseudo-median drops
    one = verdict_gains((), arm, seed, window, div)[VERDICT_GAIN]
    assert np.isfinite(one) and one < full
    div[0, 1:3] = True  # most proposal seeds diverged: the worst outcome wins
    assert verdict_gains((), arm, seed, window, div)[VERDICT_GAIN] == -math.inf
    window[0, 4:7] = np.nan  # control members with no finite value count as diverged: both sides, ties
    assert verdict_gains((), arm, seed, window, div)[VERDICT_GAIN] == pytest.approx(_hodges_lehmann([0, 0, 0, 0.9]))
    assert verdict_gains((), [CONTROL, CONTROL], [0, 1], window[:, :2], div[:, :2])[VERDICT_GAIN] == 0.0


# -- end to end: `tune-gems train` with the design's arms ------------------------------------------

RUN = [
    *TINY,
    "trainer.population=2",
    "trainer.epochs=2",
    "trainer.iterations_per_epoch=12",
    "trainer.lr=0.005",
    "trainer.objective_last_k=2",
    "gems.g6.mode=wire",
    "gems.g6.weight=20.0",
    "gems.g10.mode=measure",
    "gems.g12.mode=wire",
    "gems.g12.weight=20.0",
]
"""Large weights and a high learning rate, so the arms' greedy policies part within two short
epochs (with the defaults the tiny networks all hold the same position and every gain is 0)."""


def _independent_gains(members: pd.DataFrame, plus: str, minus: str, column: str) -> pd.Series:
    """Per epoch: mean over seed indices of members[plus] - members[minus] (pandas, not the code
    under test)."""
    wide = members.pivot_table(index=["epoch", "seed_index"], columns="arm", values=column, dropna=False)
    return (wide[plus] - wide[minus]).groupby(level="epoch").mean()


def test_train_history_gains_equal_an_independent_computation_from_members_csv(tmp_path: Path):
    cfg = apply_design(tiny_config(*RUN[len(TINY):]), "wire_search")
    cfg_file = tmp_path / "wire.yaml"
    cfg_file.write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    out = tmp_path / "run"
    res = cli_in_process("train", str(cfg_file), "--out", str(out))
    assert res.returncode == 0, res.stderr[-2000:]
    members = pd.read_csv(out / "members.csv")
    history = pd.read_csv(out / "history.csv").set_index("epoch")
    assert set(members["arm"]) == {PROPOSAL, CONTROL, "without-g6", "without-g12"}
    assert not members["diverged"].any()
    expect = {
        "val_sharpe_gain": _independent_gains(members, PROPOSAL, CONTROL, "val_sharpe"),
        "val_alpha_sharpe_gain": _independent_gains(members, PROPOSAL, CONTROL, "val_alpha_sharpe"),
        "gain_g6": _independent_gains(members, PROPOSAL, "without-g6", "val_alpha_sharpe"),
        "gain_g12": _independent_gains(members, PROPOSAL, "without-g12", "val_alpha_sharpe"),
    }
    for col, series in expect.items():
        np.testing.assert_allclose(history[col].to_numpy(), series.loc[history.index].to_numpy(), rtol=0, atol=1e-9, err_msg=col)
    assert history["gain_g10"].isna().all()  # measured in the proposal: no without-g10 arm
    for gain, lastk in zip(GAIN_METRICS, GAIN_OBJECTIVES):  # k = 2: the mean of epochs 1 and 2
        np.testing.assert_allclose(history[lastk].to_numpy(), history[gain].expanding().mean().to_numpy(), atol=1e-12)
    # the arms really differ (else every gain is 0 and this test could not tell a wrong pairing)
    assert (history[["val_sharpe_gain", "val_alpha_sharpe_gain", "gain_g6", "gain_g12"]].abs() > 1e-6).any().any()
    assert "gain [sharpe=" in res.stdout + res.stderr  # the HEALTH_DIAG line shows the gains
    # the verdict's statistic: per seed index the last-k (k = 2) window mean, then the pseudo-median
    wide = members.pivot_table(index=["epoch", "seed_index"], columns="arm", values="val_alpha_sharpe")
    for col, minus in ((VERDICT_GAIN, CONTROL), ("verdict_gain_g6", "without-g6"), ("verdict_gain_g12", "without-g12")):
        for e in history.index:
            win = wide.loc[(slice(e - 1, e), slice(None)), :].groupby(level="seed_index").mean()
            expect = _hodges_lehmann((win[PROPOSAL] - win[minus]).to_numpy())
            assert history.loc[e, col] == pytest.approx(expect, abs=1e-9), (col, e)


def test_a_diverged_trial_tells_optuna_the_verdict_gain_but_nan_for_a_mean_objective():
    from tune_gems.sweep.trainable import trial_objective

    m = {VERDICT_GAIN: -math.inf, "val_sharpe_gain": 0.4}
    assert trial_objective(m, VERDICT_GAIN, diverged=True) == -math.inf  # the worst outcome, scored
    assert math.isnan(trial_objective(m, "val_sharpe_gain", diverged=True))  # Optuna: FAIL
    assert trial_objective(m, "val_sharpe_gain", diverged=False) == 0.4
