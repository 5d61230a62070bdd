"""Issue 21: what `tune-gems confirm` trains, checked without training (fast; the end-to-end run
is in tests/test_sweep.py): fresh trial seeds, seed indices and paths for every gem, and a
confirmation trial that compares its own gem only, so no gem's final verdict pools another
gem's confirmation trial."""

from __future__ import annotations

import pandas as pd
import pytest

from sweep_fixtures import SMOKE
from tune_gems.design.arm_sets import arm_aliases, confirmation_arms
from tune_gems.design.arms import expand_arms
from tune_gems.commands.confirm_plan import plan_confirmation
from tune_gems.data.series import path_seeds
from tune_gems.contracts.errors import ConfigError
from tune_gems.sweep.spec_load import load_spec, trial_config

GEMS = ["g6", "g10", "g12"]


def _discovery():
    """Three finished trials of the smoke search (per_trial seeds: indices 0-3, 4-7, 8-11)."""
    trials = pd.DataFrame({
        "trial_id": ["t0", "t1", "t2"], "status": ["TERMINATED"] * 3, "config_label": ["a", "b", "c"],
        "seed": [0, 1, 2], "data.synthetic.seed": [7, 7, 7], "first_seed_index": [0, 4, 8],
        "gems.g6.mode": ["wire", "wire", "measure"], "gems.g6.weight": [0.1, 0.2, 0.3],
        "gems.g10.mode": ["measure"] * 3, "gems.g10.weight": [0.1] * 3,
        "gems.g12.mode": ["wire", "measure", "wire"], "gems.g12.weight": [0.4, 0.5, 0.6],
        "verdict_gain_g6": [0.9, 0.1, float("nan")], "verdict_gain_g12": [0.2, float("nan"), 0.7],
    })
    members = pd.DataFrame({"trial_id": [t for t in ("t0", "t1", "t2") for _ in range(4)], "seed_index": list(range(12))})
    return trials, members


def _paths(cfg) -> set[int]:
    return set(path_seeds(cfg.data.synthetic, cfg.trainer.population, cfg.first_seed_index))


def test_every_gem_gets_fresh_seeds_seed_indices_and_paths():
    spec = load_spec(SMOKE)
    trials, members = _discovery()
    plans, notes, build = plan_confirmation(spec, trials, members, GEMS)
    assert [p.gem for p in plans] == ["g6", "g12"] and any(n.startswith("g10:") for n in notes)
    used_paths = {7 + i for i in range(12)}
    seen_indices: set[int] = set()
    seen_paths: set[int] = set()
    for p in plans:
        cfg = build(p)
        indices = set(range(cfg.first_seed_index, cfg.first_seed_index + cfg.trainer.population))
        assert cfg.seed > trials["seed"].max()
        assert not indices & set(members["seed_index"]) and not indices & seen_indices
        assert not _paths(cfg) & used_paths and not _paths(cfg) & seen_paths
        assert min(_paths(cfg)) == p.path_seed
        seen_indices |= indices
        seen_paths |= _paths(cfg)
    assert len({p.seed for p in plans}) == len(plans)


def test_a_confirmation_trial_holds_a_pair_for_its_own_gem_only():
    """t0 wires g6 and g12 and is chosen for g6: its confirmation keeps g12 wired on both sides,
    so it gives g12 no pair (the final g12 verdict rests on confirm-g12 alone)."""
    spec = load_spec(SMOKE)
    trials, members = _discovery()
    plans, _, build = plan_confirmation(spec, trials, members, GEMS)
    g6 = build(next(p for p in plans if p.gem == "g6"))
    arms = {a.name: a.config for a in expand_arms(g6)}
    assert list(arms) == ["proposal", "control"]
    assert arms["proposal"].gem("g6").mode == "wire" and arms["control"].gem("g6").mode == "measure"
    assert arms["proposal"].gem("g12").mode == arms["control"].gem("g12").mode == "wire"
    assert arms["proposal"].gem("g6").weight == arms["control"].gem("g6").weight == 0.1
    assert arm_aliases(g6) == {"without-g6": "control"}


def test_a_gem_the_configuration_does_not_wire_cannot_be_confirmed():
    spec = load_spec(SMOKE)
    cfg = trial_config(spec.config, {"gems.g6.mode": "measure"})
    with pytest.raises(ConfigError, match="does not wire it"):
        confirmation_arms(cfg, "g6")


def test_the_report_says_when_the_objective_compared_another_thing_than_a_verdict(tmp_path):
    from tune_gems.analysis.describe.objective import objective_notes

    trials, _ = _discovery()
    trials["experiment"] = "s"
    searched = "search: {gems: {g6: {}, g12: {}}}\n"  # a search that chose among its trials
    (tmp_path / "spec.yaml").write_text("objective: {metric: verdict_gain, mode: max}\n" + searched)
    note = objective_notes([tmp_path], ["s"], trials)
    assert len(note) == 1 and note[0].startswith("s: 1 trial(s) wired several gems")  # t0 wires g6 and g12
    assert objective_notes([tmp_path], ["s"], trials[trials["trial_id"] != "t0"]) == []
    (tmp_path / "spec.yaml").write_text("objective: {metric: val_sharpe_gain, mode: max}\n" + searched)
    assert "is not the verdict's metric" in objective_notes([tmp_path], ["s"], trials)[0]
    # a run that searched nothing, or ran one trial, chose nothing on its objective: no note (issue 31)
    (tmp_path / "spec.yaml").write_text("objective: {metric: val_sharpe_gain, mode: max}\nsearch: {gems: {}, params: {}}\n")
    assert objective_notes([tmp_path], ["s"], trials) == []
    (tmp_path / "spec.yaml").write_text("objective: {metric: val_sharpe_gain, mode: max}\n" + searched)
    assert objective_notes([tmp_path], ["s"], trials.iloc[:1]) == []


@pytest.mark.parametrize("wired", [["g6"], ["g6", "g12"]])
def test_the_aa_design_adds_the_control_with_an_independent_replay_stream(wired):
    """design: wire_search_aa (sweeps/wire_search.yaml): the A/A arm is the control but for
    trainer.replay_stream, so it pairs with the control only (the learner's own null spread);
    the proposal's gains and the without-<gem> alias are those of wire_search."""
    from tune_gems.design.arm_sets import AA_ARM, apply_design

    spec = load_spec(SMOKE)
    cfg = trial_config(spec.config, {f"gems.{g}.mode": "wire" for g in wired})
    plain, aa = apply_design(cfg, "wire_search"), apply_design(cfg, "wire_search_aa")
    arms = {a.name: a.config for a in expand_arms(aa)}
    assert list(arms) == [a.name for a in expand_arms(plain)] + [AA_ARM]
    control, twin = arms["control"].to_dict(), arms[AA_ARM].to_dict()
    assert twin["trainer"].pop("replay_stream") == 1 and control["trainer"].pop("replay_stream") == 0
    assert twin == control
    assert arm_aliases(aa) == arm_aliases(plain) == ({"without-g6": "control"} if wired == ["g6"] else {})
    nothing = trial_config(spec.config, {"gems.g6.mode": "measure", "gems.g12.mode": "measure"})
    assert [a.name for a in expand_arms(apply_design(nothing, "wire_search_aa"))] == ["control"]
