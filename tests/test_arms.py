"""Arms configuration: expansion of factors and lists, validation, member layout."""

from __future__ import annotations

import pytest

from tune_gems.design.arms import DEFAULT_ARM, ArmsConfig, MemberLayout, expand_arms, per_member_keys, resolved_settings
from tune_gems.config.schema import Config
from tune_gems.contracts.errors import ConfigError
from tune_gems.rng import member_seeds


def arms(**kw) -> ArmsConfig:
    return ArmsConfig.model_validate(kw)


def test_no_arms_is_one_default_arm_equal_to_the_run():
    cfg = Config()
    (arm,) = expand_arms(cfg, None)
    assert arm.name == DEFAULT_ARM and arm.settings == {}
    assert arm.config.to_dict() == {k: v for k, v in cfg.to_dict().items() if k != "arms"}


def test_factors_are_a_full_factorial_in_key_order_named_by_key_level():
    out = expand_arms(Config(), arms(factors={"gems.g10.mode": ["measure", "wire"], "model.spectral_norm": [True, False]}))
    assert [a.name for a in out] == [
        "gems.g10.mode=measure,model.spectral_norm=true",
        "gems.g10.mode=measure,model.spectral_norm=false",
        "gems.g10.mode=wire,model.spectral_norm=true",
        "gems.g10.mode=wire,model.spectral_norm=false",
    ]
    assert [a.config.gems.g10.mode for a in out] == ["measure", "measure", "wire", "wire"]
    assert [a.config.model.spectral_norm for a in out] == [True, False, True, False]
    # nothing but the arm's keys differs from the base config
    base = Config().to_dict()
    for a in out:
        d = a.config.to_dict()
        assert d["trainer"] == base["trainer"] and d["data"] == base["data"] and d["env"] == base["env"]


def test_yaml_off_level_is_named_off_not_false():
    out = expand_arms(Config(), arms(factors={"gems.g6.mode": [False, "wire"]}))
    assert [a.name for a in out] == ["gems.g6.mode=off", "gems.g6.mode=wire"]


def test_nested_factor_keys_from_overrides_are_flattened():
    a = arms(factors={"gems": {"g12": {"mode": ["measure", "wire"]}}})
    assert list(a.factors) == ["gems.g12.mode"]


def test_list_of_named_arms():
    out = expand_arms(
        Config(),
        arms(list=[{"name": "control"}, {"name": "g10-wired", "gems.g10.mode": "wire", "gems.g10.weight": 0.1}]),
    )
    assert [a.name for a in out] == ["control", "g10-wired"]
    assert out[0].config.gems.g10.mode == "measure" and out[1].config.gems.g10.weight == 0.1


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"factors": {"trainer.batch_size": [16, 32]}}, "arms.factors.trainer.batch_size: cannot vary per member"),
        ({"factors": {"gems.g99.mode": ["wire"]}}, "arms.factors.gems.g99.mode: unknown key"),
        ({"list": [{"name": "a", "model.hidden": 8}]}, "arms.list.0.model.hidden: cannot vary per member"),
        ({"list": [{"name": "a"}, {"name": "a"}]}, "duplicate arm 'a'"),
        ({"list": [{"gems.g6.mode": "wire"}]}, "arms.list.0.name"),
        ({"factors": {"gems.g6.weight": [0.1, -1.0]}}, "gems.g6.weight"),
        ({"factors": {"trainer.lr": [float("inf")]}}, "trainer.lr"),
        ({"factors": {"gems.g6.mode": ["sometimes"]}}, "gems.g6.mode"),
    ],
)
def test_bad_arms_are_one_line_config_errors(spec, message):
    with pytest.raises(ConfigError) as e:
        expand_arms(Config(), arms(**spec))
    assert message in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(
    "spec",
    [
        {"factors": {"gems.g6.mode": ["wire"]}, "list": [{"name": "x"}]},
        {},
        {"factors": {}},
        {"factors": {"gems.g6.mode": []}},
        {"list": []},
        {"factors": {"gems.g6.mode": ["wire"]}, "extra": 1},
    ],
)
def test_malformed_arms_sections_are_refused(spec):
    with pytest.raises(ValueError):
        ArmsConfig.model_validate(spec)


def test_too_many_arms_refused_naming_the_count():
    levels = [0.1 * i for i in range(1, 18)]
    with pytest.raises(ConfigError, match="289 arms"):
        expand_arms(Config(), arms(factors={"gems.g6.weight": levels, "gems.g10.weight": levels}))


def test_per_member_keys_cover_every_gem_and_the_model_switches():
    keys = per_member_keys(Config())
    for g in ("g6", "g10", "g12"):
        assert f"gems.{g}.mode" in keys and f"gems.{g}.weight" in keys
    assert {"model.spectral_norm", "model.noisy", "trainer.lr"} <= set(keys)
    row = resolved_settings(Config())
    assert row["gems.g6.mode"] == "measure" and row["model.noisy"] is True and set(row) == set(keys)


def test_layout_is_arm_major_and_shares_seeds_across_arms():
    lay = MemberLayout(("a", "b", "c"), 4)
    assert lay.members == 12
    assert [lay.arm_of(m) for m in range(12)] == ["a"] * 4 + ["b"] * 4 + ["c"] * 4
    assert [lay.seed_index(m) for m in range(12)] == [0, 1, 2, 3] * 3
    seeds = lay.member_seeds(5)
    assert seeds == member_seeds(5, 4) * 3
    assert lay.per_member([1, 2, 3]) == [1] * 4 + [2] * 4 + [3] * 4
    with pytest.raises(ValueError):
        lay.per_member([1, 2])
