"""Per-member selections skipped when every member agrees (tune_gems.model.member_select), and the op
census that counts them (benchmarks/train_step.py `op_census`, issue 22 item 3)."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest
import torch

from learner_fixtures import tiny_config
from tune_gems.model.member_select import select, uniform

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "train_step.py"


def _train_step():
    spec = importlib.util.spec_from_file_location("train_step", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_uniform_is_the_common_switch_or_none():
    assert uniform([True, True]) is True and uniform([False]) is False and uniform([True, False]) is None


@pytest.mark.parametrize("flags", [[True] * 3, [False] * 3, [True, False, True]], ids=str)
@pytest.mark.parametrize("other", [0.0, math.nan, "tensor"])
def test_select_equals_where_bit_for_bit(flags, other):
    a = torch.tensor([[-0.0, 1.5], [2.0, -3.0], [math.inf, 0.0]])
    b = -a if other == "tensor" else other
    mask = torch.tensor(flags).view(-1, 1)
    want = torch.where(mask, a, b)
    got = select(uniform(flags), mask, a, b)
    assert got.shape == want.shape and torch.equal(got.view(torch.int32), want.view(torch.int32))


def _census(*overrides: str, arms=None) -> dict[str, float]:
    from tune_gems.design.arms import expand_arms
    from tune_gems.ops import resolve_backend
    from tune_gems.trainer.run_setup import prepare_market
    from tune_gems.trainer.learner import Learner

    cfg = tiny_config(*overrides)
    dev = torch.device("cpu")
    learner = Learner(cfg, prepare_market(cfg, dev), dev, resolve_backend("auto", dev), arms=arms and expand_arms(cfg, arms))
    learner.reset_envs()
    for _ in range(cfg.trainer.learning_starts // cfg.trainer.n_envs):
        learner.collect()
    learner.iteration()
    return _train_step().op_census(learner)


def test_a_single_arm_iteration_runs_no_member_mask_selects():
    """Every member alike: no where of a member mask (gem inputs, loss terms, reports, noise,
    spectral norm, exploration); the environment's episode resets keep theirs."""
    from tune_gems.config.arms_section import ArmsConfig

    single = _census("gems.g10.mode=wire", "gems.g12.mode=measure")
    assert single.get("aten.where.self", 0) == 3, single
    mixed = _census(arms=ArmsConfig.model_validate({"factors": {"gems.g10.mode": ["measure", "wire"], "model.noisy": [True, False]}}))
    assert mixed["aten.where.self"] > 3 + 12  # the same selects (gem inputs, noise) with the masks mixed
    assert sum(mixed.values()) > sum(single.values())
