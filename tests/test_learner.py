"""The learner's guarantees on CPU: members never mix, runs are bit-reproducible, checkpoints
resume exactly, gem modes do what they say."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from learner_fixtures import all_wired, canon, member_slice, tiny_config
from tune_gems.errors import CheckpointError
from tune_gems.gems.reference import g6_branch_indep
from tune_gems.metrics import EPOCH_METRICS, MEMBER_METRICS
from tune_gems.ops import resolve_backend
from tune_gems.rng import member_seeds
from tune_gems.trainer import Trainer, prepare_market
from tune_gems.trainer.learner import Learner


def _learner(cfg, seeds=None) -> Learner:
    dev = torch.device("cpu")
    learner = Learner(cfg, prepare_market(cfg, dev), dev, resolve_backend("reference", dev), seeds=seeds)
    learner.reset_envs()
    for _ in range(20):
        learner.collect()
    return learner


def _params(learner: Learner) -> list[torch.Tensor]:
    return [p.detach().clone() for p in learner.online.parameters()]


# -- members never mix ---------------------------------------------------------------------------


@pytest.mark.parametrize("wired", [False, True])
def test_changing_one_members_seed_leaves_the_others_bit_identical(wired):
    cfg = tiny_config(*(all_wired() if wired else []))
    seeds = member_seeds(11, 3)
    a = _learner(cfg, seeds)
    b = _learner(cfg, [seeds[0], 987654, seeds[2]])
    for _ in range(8):
        a.iteration()
        b.iteration()
    P = 3
    for pa, pb in zip(_params(a), _params(b)):
        for p in (0, 2):
            assert torch.equal(member_slice(pa, P, p), member_slice(pb, P, p))
        assert not torch.equal(member_slice(pa, P, 1), member_slice(pb, P, 1)) or pa[0].numel() == 1
    acc_a, acc_b = a.acc, b.acc
    assert torch.equal(acc_a[:, [0, 2]], acc_b[:, [0, 2]])
    assert not torch.equal(acc_a[:, 1], acc_b[:, 1])


def test_changing_one_members_data_leaves_the_others_bit_identical():
    cfg = tiny_config(*all_wired())
    a, b = _learner(cfg), _learner(cfg)
    with torch.no_grad():  # member 1 sees different rewards and observations
        b.replay.reward[1].mul_(-3.0).add_(0.5)
        b.replay.obs[1].add_(1.0)
    for _ in range(8):
        a.iteration()
        b.iteration()
    for pa, pb in zip(_params(a), _params(b)):
        for p in (0, 2):
            assert torch.equal(member_slice(pa, 3, p), member_slice(pb, 3, p))
    assert torch.equal(a.acc[:, [0, 2]], b.acc[:, [0, 2]])
    assert not torch.equal(a.acc[:, 1], b.acc[:, 1])


# -- reproducibility and exact resume ------------------------------------------------------------


def test_same_seed_twice_gives_bit_identical_metrics():
    cfg = tiny_config(*all_wired())
    r1, r2 = Trainer(cfg, log=None), Trainer(cfg, log=None)
    r1.fit()
    r2.fit()
    assert canon(r1.history) == canon(r2.history)
    assert canon(r1.member_history) == canon(r2.member_history)
    for x, y in zip(_params(r1.learner), _params(r2.learner)):
        assert torch.equal(x, y)


def test_resume_from_checkpoint_ends_bit_identical(tmp_path):
    cfg = tiny_config("gems.g10.mode=wire", "trainer.epochs=3")
    full = Trainer(cfg, log=None)
    full.fit()

    first = Trainer(cfg, log=None)
    first.run_epoch()
    first.save_checkpoint(tmp_path / "ck.pt")
    del first
    resumed = Trainer(cfg, log=None)
    resumed.load_checkpoint(tmp_path / "ck.pt")
    assert resumed.epoch == 1
    resumed.fit()

    assert canon(resumed.history) == canon(full.history)
    assert canon(resumed.member_history) == canon(full.member_history)
    for k, v in full.learner.state_tensors().items():
        assert torch.equal(v, resumed.learner.state_tensors()[k]), k


def test_checkpoint_from_another_config_is_refused(tmp_path):
    t = Trainer(tiny_config(), log=None)
    t.run_epoch()
    t.save_checkpoint(tmp_path / "ck.pt")
    other = Trainer(tiny_config("trainer.lr=0.01"), log=None)
    with pytest.raises(CheckpointError, match="trainer.lr"):
        other.load_checkpoint(tmp_path / "ck.pt")
    (tmp_path / "bad.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="corrupt"):
        other.load_checkpoint(tmp_path / "bad.pt")


# -- gem modes ----------------------------------------------------------------------------------


def test_measure_mode_never_changes_training():
    """A measured gem is computed and logged, and training is bit-identical to it being off."""
    off = _learner(tiny_config(*(f"gems.{g}.mode=off" for g in ("g6", "g10", "g12"))))
    measured = _learner(tiny_config(*(f"gems.{g}.mode=measure" for g in ("g6", "g10", "g12"))))
    for _ in range(6):
        off.iteration()
        measured.iteration()
    for x, y in zip(_params(off), _params(measured)):
        assert torch.equal(x, y)
    gem_rows = measured.acc[3:6]
    assert torch.isfinite(gem_rows).all() and (gem_rows > 0).all()
    assert torch.isnan(off.acc[3:6]).all()


@pytest.mark.parametrize("gem", ["g6", "g10", "g12"])
def test_wire_mode_changes_training(gem):
    measured = _learner(tiny_config(f"gems.{gem}.mode=measure"))
    wired = _learner(tiny_config(f"gems.{gem}.mode=wire", f"gems.{gem}.weight=0.5"))
    for _ in range(4):
        measured.iteration()
        wired.iteration()
    assert any(not torch.equal(x, y) for x, y in zip(_params(measured), _params(wired)))


def test_wired_gradient_is_the_gem_gradient_times_its_weight():
    from tune_gems.config import GemsConfig
    from tune_gems.gems import GemSet

    f = torch.randn(2, 2, 9, 4, dtype=torch.float64, requires_grad=True)
    measured = GemSet(GemsConfig.model_validate({"g6": {"mode": "measure"}}))
    value = measured.evaluate("g6", g6_branch_indep, f)
    assert not value.requires_grad and value.grad_fn is None
    assert measured.loss_term({"g6": value}) is None

    w = 0.37
    wired = GemSet(GemsConfig.model_validate({"g6": {"mode": "wire", "weight": w}}))
    term = wired.loss_term({"g6": wired.evaluate("g6", g6_branch_indep, f)})
    (g_wired,) = torch.autograd.grad(term.sum(), f)
    (g_plain,) = torch.autograd.grad(g6_branch_indep(f)[1].sum(), f)
    torch.testing.assert_close(g_wired, w * g_plain, rtol=1e-12, atol=0)


# -- reporting ----------------------------------------------------------------------------------


def test_epoch_reports_every_metric_and_member():
    t = Trainer(tiny_config("gems.g6.mode=off"), log=None)
    r = t.run_epoch()
    assert tuple(r.metrics) == EPOCH_METRICS
    assert len(r.members) == 3 and all(set(MEMBER_METRICS) <= set(m) for m in r.members)
    assert math.isnan(r.metrics["g6_branch_indep"]) and math.isnan(r.metrics["test_sharpe_mean"])
    assert r.metrics["g10_temporal"] > 0 and not r.metrics["diverged"]
    assert [m["seed"] for m in r.members] == member_seeds(0, 3)
    t.fit()
    assert not math.isnan(t.history[-1]["test_sharpe_mean"])


def test_health_line_has_the_design_shape(capsys):
    lines: list[str] = []
    t = Trainer(tiny_config("gems.g12.mode=off"), log=lines.append)
    t.run_epoch()
    (line,) = lines
    assert line.startswith("HEALTH_DIAG epoch=1 loss=")
    for key in ("q_mean=", "grad_norm=", "noisy_sigma=", "val_sharpe=", "±", "sps=", "gems [g6_branch_indep="):
        assert key in line
    assert "g12_predictive=off" in line and line.endswith("]")


def test_divergence_ends_the_run_cleanly():
    t = Trainer(tiny_config("trainer.epochs=5"), log=None)
    t.run_epoch()
    with torch.no_grad():
        next(t.learner.online.parameters())[1].fill_(float("nan"))  # member 1 blows up
    r = t.run_epoch()
    assert r.metrics["diverged"] and t.done and t.epoch == 2
    flags = [m["diverged"] for m in r.members]
    assert flags == [False, True, False]
    assert np.isnan(r.members[1]["val_sharpe"]) and not np.isnan(r.members[0]["val_sharpe"])


@pytest.mark.parametrize("switches", [["model.noisy=false"], ["model.spectral_norm=false"], ["model.noisy=false", "model.spectral_norm=false"]])
def test_model_switches_train(switches):
    """The redundancy hypotheses need runs without NoisyNets (epsilon-greedy) or spectral norm."""
    t = Trainer(tiny_config(*switches, *all_wired()), log=None)
    r = t.run_epoch()
    assert not r.metrics["diverged"] and math.isfinite(r.metrics["loss"])
    assert (r.metrics["noisy_sigma"] == 0.0) == ("model.noisy=false" in switches)
    if "model.noisy=false" in switches:
        eps = t.learner._epsilon().item()
        assert t.cfg.trainer.epsilon_end <= eps < t.cfg.trainer.epsilon_start
    assert t.cfg.label().endswith(
        f"sn={'off' if 'model.spectral_norm=false' in switches else 'on'} noisy={'off' if 'model.noisy=false' in switches else 'on'}"
    )


@pytest.mark.parametrize("mode", ["hard", "polyak"])
def test_target_network_follows_the_online_network(mode):
    extra = ["trainer.tau=0.1"] if mode == "polyak" else ["trainer.target_update=4"]
    learner = _learner(tiny_config(*extra))
    start = learner.target_flat.data.clone()
    for _ in range(4):
        learner.iteration()
    online, target = learner.online_flat.data, learner.target_flat.data
    if mode == "hard":  # the 4th update copied the online weights exactly
        assert torch.equal(target, online)
    else:  # Polyak: moved towards online, never all the way
        assert not torch.equal(target, start) and not torch.equal(target, online)
        assert (target - online).abs().sum() < (start - online).abs().sum()
    for name, t in learner.target.named_buffers():  # spectral-norm state is copied, not blended
        if name.endswith(("sn_u", "sn_v")):
            assert torch.equal(t, dict(learner.online.named_buffers())[name])
