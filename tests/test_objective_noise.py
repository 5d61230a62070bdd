"""Each trial reports its objective's standard error and degrees of freedom beside it
(tune_gems.sweep.objective_noise: `objective_se`, `objective_df` in every Tune result,
trials.parquet and the Optuna trial's user attributes).

The units behind each number are checked against the objective itself: on a designed CPU run
(`tune-gems train`, proposal / control / without-<gem> arms, 4 seeds) the members, pairs or
informative pairs the standard error is taken over reproduce the objective the history reports
(their mean, or their Hodges-Lehmann pseudo-median), and the standard error is their sd / sqrt(n)
(times sqrt(pi / 3) for the pseudo-median) on n - 1 df. The sweep's own columns are checked in
tests/test_sweep.py (the smoke sweep)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import yaml

from learner_fixtures import TINY, tiny_config
from sweep_fixtures import cli_in_process
from tune_gems.design.arm_sets import CONTROL, PROPOSAL, apply_design
from tune_gems.stats.inference import ARE_WILCOXON, hodges_lehmann
from tune_gems.sweep.objective_noise import objective_noise

RUN = [*TINY, "trainer.population=4", "trainer.epochs=3", "trainer.iterations_per_epoch=12", "trainer.lr=0.005",
       "trainer.objective_last_k=2", "gems.g6.mode=wire", "gems.g6.weight=20.0", "gems.g10.mode=measure",
       "gems.g12.mode=wire", "gems.g12.weight=20.0"]
"""test_gains' designed run with 4 seeds and 3 epochs (large weights, a high learning rate: the arms part)."""
K = 2


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("noise")
    cfg_file = folder / "wire.yaml"
    cfg_file.write_text(yaml.safe_dump(apply_design(tiny_config(*RUN[len(TINY):]), "wire_search").to_dict(), sort_keys=False))
    res = cli_in_process("train", str(cfg_file), "--out", str(folder / "run"))
    assert res.returncode == 0, res.stderr[-2000:]
    members = pd.read_csv(folder / "run" / "members.csv")
    assert not members["diverged"].any()
    return members, pd.read_csv(folder / "run" / "history.csv").set_index("epoch")


def _window(members: pd.DataFrame, epoch: int, column: str, k: int) -> pd.DataFrame:
    """Per member its column's mean over epochs epoch - k + 1 .. epoch, with arm and seed index."""
    w = members[(members["epoch"] > epoch - k) & (members["epoch"] <= epoch)]
    return w.groupby("member").agg(arm=("arm", "first"), seed_index=("seed_index", "first"), value=(column, "mean"))


def _se(x: np.ndarray, factor: float = 1.0) -> tuple[float, float]:
    return factor * float(np.std(x, ddof=1)) / math.sqrt(x.size), float(x.size - 1)


@pytest.mark.parametrize("objective,column,arm,k", [
    ("val_sharpe_mean", "val_sharpe", None, 1),
    ("val_alpha_sharpe_mean_lastk", "val_alpha_sharpe", None, K),
    ("val_alpha_sharpe_mean@control", "val_alpha_sharpe", CONTROL, 1),
    ("g6_branch_indep@proposal", "g6_branch_indep", PROPOSAL, 1),
    ("loss", "loss", None, 1)])
def test_a_mean_over_members_has_the_members_standard_error(run, objective, column, arm, k):
    members, history = run
    rows = members.to_dict("records")
    for epoch in history.index:
        per = _window(members, epoch, column, k)
        x = (per[per["arm"] == arm] if arm else per)["value"].to_numpy()
        if objective != "loss":  # the history's own mean (loss: over members too, its history value a float32 mean)
            assert x.mean() == pytest.approx(history.loc[epoch, objective], abs=1e-9), (objective, epoch)
        se, df = objective_noise(objective, rows, epoch, K)
        assert (se, df) == pytest.approx(_se(x)) and df == len(x) - 1 > 0


@pytest.mark.parametrize("objective,column,minus,k", [
    ("val_sharpe_gain", "val_sharpe", CONTROL, 1),
    ("val_alpha_sharpe_gain_lastk", "val_alpha_sharpe", CONTROL, K),
    ("gain_g12", "val_alpha_sharpe", "without-g12", 1)])
def test_a_paired_gain_has_the_standard_error_of_its_seed_pairs(run, objective, column, minus, k):
    members, history = run
    for epoch in history.index:
        per = _window(members, epoch, column, k)
        wide = per.pivot(index="seed_index", columns="arm", values="value")
        d = (wide[PROPOSAL] - wide[minus]).to_numpy()
        assert d.mean() == pytest.approx(history.loc[epoch, objective], abs=1e-9)
        assert objective_noise(objective, members.to_dict("records"), epoch, K) == pytest.approx(_se(d))


@pytest.mark.parametrize("objective,minus", [("verdict_gain", CONTROL), ("verdict_gain_g6", "without-g6")])
def test_the_verdict_gain_has_the_pseudo_medians_standard_error_over_its_informative_pairs(run, objective, minus):
    members, history = run
    seen = 0
    for epoch in history.index:
        wide = _window(members, epoch, "val_alpha_sharpe", K).pivot(index="seed_index", columns="arm", values="value")
        d = (wide[PROPOSAL] - wide[minus]).to_numpy()
        assert hodges_lehmann(d) == pytest.approx(history.loc[epoch, objective], abs=1e-9)
        informative = d[d != 0]
        se, df = objective_noise(objective, members.to_dict("records"), epoch, K)
        if informative.size >= 2:
            assert (se, df) == pytest.approx(_se(informative, ARE_WILCOXON))
            seen += 1
    assert seen  # the arms parted: the check above ran


def _rows(values: dict[str, list[float]], diverged: dict[str, list[bool]] | None = None) -> list[dict]:
    """One epoch's member rows of arms `values` (one seed index per value), one history and fold."""
    out = []
    for arm, vals in values.items():
        for s, v in enumerate(vals):
            out.append({"epoch": 1, "member": len(out), "arm": arm, "seed_index": s, "fold": 0, "history": 0,
                        "val_alpha_sharpe": v, "val_sharpe": v, "diverged": bool((diverged or {}).get(arm, [False] * 9)[s])})
    return out


def test_a_diverged_member_makes_a_mean_gains_error_undefined_and_the_verdict_gains_infinite():
    rows = _rows({PROPOSAL: [1.0, 2.0, 0.5, 0.7], CONTROL: [0.0, 0.5, 0.5, 0.1]}, {PROPOSAL: [False, True, False, False]})
    assert all(math.isnan(x) for x in objective_noise("val_alpha_sharpe_gain", rows, 1, 2))  # the gain is NaN too
    se, df = objective_noise("verdict_gain", rows, 1, 2)  # the worst outcome: -inf for that pair
    assert se == math.inf and df == 2.0  # 3 informative pairs (one tie)
    # the aliases: a without-<g> arm trained as the control
    plain = _rows({PROPOSAL: [1.0, 2.0, 0.5, 0.7], CONTROL: [0.0, 0.5, 0.4, 0.1]})
    assert objective_noise("gain_g6", plain, 1, 2, {"without-g6": CONTROL}) == objective_noise(
        "val_alpha_sharpe_gain", plain, 1, 2)
    assert objective_noise("gain_g6", plain, 1, 2) == (pytest.approx(math.nan, nan_ok=True),) * 2


@pytest.mark.parametrize("objective", ["val_sharpe_std", "sps", "epoch", "val_breakeven_cost_bps_median"])
def test_an_objective_that_averages_no_units_has_no_standard_error(objective):
    rows = _rows({PROPOSAL: [1.0, 2.0], CONTROL: [0.0, 0.5]})
    assert all(math.isnan(x) for x in objective_noise(objective, rows, 1, 2))
