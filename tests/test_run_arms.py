"""A run's arms are expanded once, where it starts, and the record is passed down (issue 29:
the memory estimate, the trainer and the learner each expanded and validated the same config)."""

from __future__ import annotations

import pytest

from learner_fixtures import tiny_config
from tune_gems.design import arms as arms_mod
from tune_gems.design.arms import run_arms
from tune_gems.design.resources import default_members

TWO_ARMS = ("trainer.population=2", "arms.factors.gems.g10.mode=[measure,wire]")


def test_the_record_counts_the_members_the_estimate_counts():
    cfg = tiny_config(*TWO_ARMS, "data.folds.k=2")
    record = run_arms(cfg)
    assert record.names == ("gems.g10.mode=measure", "gems.g10.mode=wire")
    assert record.members == default_members(cfg) == 2 * 2 * 2
    assert run_arms(cfg, record) is record
    assert record.with_folds(1).members == 4 and record.with_folds(1).arms == record.arms


def test_a_record_of_another_population_is_refused():
    record = run_arms(tiny_config(*TWO_ARMS))
    with pytest.raises(ValueError, match="2 seeds"):
        run_arms(tiny_config(*TWO_ARMS, "trainer.population=3"), record)


def test_tune_gems_train_expands_the_arms_once(tmp_path, monkeypatch):
    from tune_gems.trainer.train_command import run_training

    calls = []
    expand = arms_mod.expand_arms
    monkeypatch.setattr(arms_mod, "expand_arms", lambda *a, **k: calls.append(1) or expand(*a, **k))
    final = run_training(tiny_config(*TWO_ARMS, "trainer.epochs=1"), tmp_path / "run", progress=False)
    assert final["epoch"] == 1 and len(calls) == 1
