"""The learner's guarantees on CPU: members never mix, runs are bit-reproducible, checkpoints
resume exactly, gem modes do what they say."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from learner_fixtures import all_wired, assert_same_run, bits_equal, canon, member_slice, tiny_config
from tune_gems.contracts.errors import CheckpointError
from tune_gems.ops.reference import g6_branch_indep
from tune_gems.stats.metrics import EPOCH_METRICS, MEMBER_METRICS
from tune_gems.ops import resolve_backend
from tune_gems.rng import member_seeds
from tune_gems.trainer.run_setup import prepare_market
from tune_gems.trainer.epoch_loop import train_epochs
from tune_gems.trainer.trainer import Trainer
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
    assert bits_equal(acc_a[:, [0, 2]], acc_b[:, [0, 2]])
    assert not bits_equal(acc_a[:, 1], acc_b[:, 1])


def test_changing_one_members_data_leaves_the_others_bit_identical():
    cfg = tiny_config(*all_wired())
    a, b = _learner(cfg), _learner(cfg)
    with torch.no_grad():  # member 1 sees different rewards and observations
        b.replay.reward[1].mul_(-3.0).add_(0.5)
        b.replay.pos[1].add_(0.5)  # the position held is part of the rebuilt observation
    for _ in range(8):
        a.iteration()
        b.iteration()
    for pa, pb in zip(_params(a), _params(b)):
        for p in (0, 2):
            assert torch.equal(member_slice(pa, 3, p), member_slice(pb, 3, p))
    assert bits_equal(a.acc[:, [0, 2]], b.acc[:, [0, 2]])
    assert not bits_equal(a.acc[:, 1], b.acc[:, 1])


# -- reproducibility and exact resume ------------------------------------------------------------


def test_same_seed_twice_gives_bit_identical_metrics():
    cfg = tiny_config(*all_wired())
    r1, r2 = Trainer(cfg, log=None), Trainer(cfg, log=None)
    train_epochs(r1)
    train_epochs(r2)
    assert canon(r1.history) == canon(r2.history)
    assert canon(r1.member_history) == canon(r2.member_history)
    for x, y in zip(_params(r1.learner), _params(r2.learner)):
        assert torch.equal(x, y)


def test_resume_from_checkpoint_ends_bit_identical(tmp_path):
    cfg = tiny_config("gems.g10.mode=wire", "trainer.epochs=3")
    full = Trainer(cfg, log=None)
    train_epochs(full)

    first = Trainer(cfg, log=None)
    first.run_epoch()
    first.save_checkpoint(tmp_path / "ck.pt")
    del first
    resumed = Trainer(cfg, log=None)
    resumed.load_checkpoint(tmp_path / "ck.pt")
    assert resumed.epoch == 1
    train_epochs(resumed)

    assert_same_run(resumed, full)


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


def _shared(learner: Learner) -> torch.Tensor:
    """The shared network's columns of the flat parameters (everything but the gem heads)."""
    return learner.online_flat.data[:, learner.optim.clip_groups[0]]


def _head(learner: Learner, gem: str) -> torch.Tensor:
    return learner.online_flat.data[:, learner.online_flat.columns(learner.online.heads[gem])]


def test_measure_mode_never_changes_the_shared_network():
    """A measured gem is computed and logged, and the shared network trains bit-identically to
    the gem being off; G12's predictor (a head the gem owns) trains in measure mode."""
    off = _learner(tiny_config(*(f"gems.{g}.mode=off" for g in ("g6", "g10", "g12"))))
    measured = _learner(tiny_config(*(f"gems.{g}.mode=measure" for g in ("g6", "g10", "g12"))))
    head_before = _head(measured, "g12").clone()
    for _ in range(6):
        off.iteration()
        measured.iteration()
    assert torch.equal(_shared(off), _shared(measured))
    assert torch.equal(_head(off, "g12"), head_before)  # off: the predictor gets no gradient
    assert not torch.equal(_head(measured, "g12"), head_before)  # measure: it trains
    rows = dict(zip(measured.acc_rows, measured.acc))
    for g in ("g6", "g10", "g12"):
        assert torch.isfinite(rows[g]).all() and (rows[g] > 0).all()
    assert all(torch.isfinite(rows[f"{g}_null"]).all() for g in ("g6", "g10", "g12"))  # G10's: permuted successors
    off_rows = dict(zip(off.acc_rows, off.acc))
    assert all(torch.isnan(off_rows[g]).all() and torch.isnan(off_rows[f"{g}_null"]).all() for g in ("g6", "g10", "g12"))


def test_g12_predictor_learns_in_measure_mode():
    """The measured G12 is the error of a trained predictor: it falls as the predictor learns."""
    learner = _learner(tiny_config("gems.g12.mode=measure", "trainer.lr=3e-3"))
    row = learner.acc_rows.index("g12")
    values = []
    for _ in range(60):
        before = learner.acc[row].clone()
        learner.iteration()
        values.append(learner.acc[row] - before)  # this iteration's G12 per member
    v = torch.stack(values)  # [iterations, P]
    assert (v[-10:].mean(0) < 0.5 * v[:10].mean(0)).all(), (v[:10].mean(0), v[-10:].mean(0))


def test_gems_see_the_one_step_successor():
    """q_tp1, h_tp1 and not_done come from s_{t+1} (succ_obs, succ_not_done); the n-step
    bootstrap state (next_obs) feeds the C51 target only."""
    from dataclasses import replace

    def with_third(b, k: int, obs: torch.Tensor):
        """The batch with its k-th stacked observation block (0 s_t, 1 s_{t+1}, 2 s_{t+n}) replaced."""
        stacked, B = b.stacked_obs.clone(), b.reward.shape[1]
        stacked[:, k * B : (k + 1) * B] = obs
        return replace(b, stacked_obs=stacked)

    learner = _learner(tiny_config("trainer.n_step=3"))
    b = learner.replay.sample(learner.rng.draw(learner.plan).uniform("replay"))
    assert not torch.equal(b.succ_obs, b.next_obs)
    w = learner.online.weights("eval")
    with torch.no_grad():
        x, _, logits_n, _ = learner.gem_inputs(b, w)
        x_other_n, _, logits_other_n, _ = learner.gem_inputs(with_third(b, 2, b.obs), w)
        x_other_s, _, _, _ = learner.gem_inputs(with_third(b, 1, b.obs), w)
        q_succ = learner.online.expected_q(learner.online(b.succ_obs, w).logits)
        h_succ = learner.target(b.succ_obs, learner.target.weights("target")).h
    torch.testing.assert_close(x.q_tp1, q_succ, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(x.h_tp1, h_succ, rtol=1e-5, atol=1e-6)
    assert torch.equal(x.not_done, b.succ_not_done)
    # the gems' successor ignores next_obs, and follows succ_obs
    assert torch.equal(x.q_tp1, x_other_n.q_tp1) and torch.equal(x.h_tp1, x_other_n.h_tp1)
    assert not torch.equal(logits_n, logits_other_n)
    assert not torch.equal(x.q_tp1, x_other_s.q_tp1) and not torch.equal(x.h_tp1, x_other_s.h_tp1)


@pytest.mark.parametrize("wired", [False, True])
def test_the_n_step_rows_stay_out_of_autograd(wired):
    """The online net runs with autograd over [s_t, s_{t+1}] and without it over s_{t+n}: the
    values equal one forward over all three blocks (to rounding: the matmuls see fewer rows),
    and the n-step logits carry no gradient, whatever the gem modes (the split must not depend
    on them: the arms invariant)."""
    learner = _learner(tiny_config(*(all_wired() if wired else [])))
    b = learner.replay.sample(learner.rng.draw(learner.plan).uniform("replay"))
    w = learner.online.weights("eval")
    x, log_probs_t, logits_n, _ = learner.gem_inputs(b, w)
    (P, B, K), atoms = b.action.shape, logits_n.shape[-1]
    with torch.no_grad():
        full = learner.online(b.stacked_obs, w).logits.float()
    taken = full[:, :B].gather(3, b.action[..., None, None].expand(P, B, K, 1, atoms)).squeeze(3)
    torch.testing.assert_close(log_probs_t.detach(), torch.log_softmax(taken, -1), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(logits_n, full[:, 2 * B :], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(x.q_tp1.detach(), learner.online.expected_q(full[:, B : 2 * B]), rtol=1e-5, atol=1e-6)
    assert log_probs_t.requires_grad and x.q_tp1.requires_grad and not logits_n.requires_grad


@pytest.mark.parametrize("gem", ["g6", "g10", "g12"])
def test_wire_mode_changes_training(gem):
    measured = _learner(tiny_config(f"gems.{gem}.mode=measure"))
    wired = _learner(tiny_config(f"gems.{gem}.mode=wire", f"gems.{gem}.weight=0.5"))
    for _ in range(4):
        measured.iteration()
        wired.iteration()
    assert any(not torch.equal(x, y) for x, y in zip(_params(measured), _params(wired)))


def test_wired_gradient_is_the_gem_gradient_times_its_weight():
    from tune_gems.config.schema import GemsConfig
    from tune_gems.config.arms_section import DEFAULT_ARM
    from tune_gems.design.arms import MemberLayout
    from tune_gems.gems import GemInputs
    from tune_gems.trainer.member_gems import MemberGems

    one_arm = MemberLayout((DEFAULT_ARM,), 2)  # a run of one arm and two members

    f = torch.randn(2, 2, 9, 4, dtype=torch.float64, requires_grad=True)
    zeros = torch.zeros(2, 9)
    x = GemInputs(q_t=zeros, q_tp1=zeros, h_t=zeros, h_tp1=zeros, adv_features=f, action=zeros, reward=zeros, not_done=zeros)
    measured = MemberGems([GemsConfig.model_validate({"g6": {"mode": "measure"}})], one_arm, "cpu")
    value = measured.evaluate("g6", x)
    assert not value.requires_grad and value.grad_fn is None
    assert measured.loss_term({"g6": value}) is None

    w = 0.37
    wired = MemberGems([GemsConfig.model_validate({"g6": {"mode": "wire", "weight": w}})], one_arm, "cpu")
    term = wired.loss_term({"g6": wired.evaluate("g6", x)})
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
    assert math.isnan(r.metrics["g6_branch_indep_null"]) and r.metrics["g10_temporal_null"] > 0
    for m in r.members:  # excess = value - null, per member
        assert math.isclose(m["g12_predictive_excess"], m["g12_predictive"] - m["g12_predictive_null"], rel_tol=1e-9, abs_tol=1e-12)
        assert 0 < m["g12_predictive_null"] and math.isfinite(m["g10_temporal_excess"])
    assert r.metrics["g10_temporal"] > 0 and not r.metrics["diverged"]
    assert [m["seed"] for m in r.members] == member_seeds(0, 3)
    assert [(m["arm"], m["seed_index"]) for m in r.members] == [("default", p) for p in range(3)]
    assert r.metrics["train_s"] > 0 and r.metrics["eval_s"] > 0
    assert r.metrics["val_sharpe_mean_lastk"] == r.metrics["val_sharpe_mean"]  # one epoch so far
    for m in r.members:  # evaluation columns: val now, test only at the end
        assert all(math.isfinite(m[f"val_{k}"]) for k in ("sharpe", "beta", "alpha_sharpe", "turnover", "max_drawdown", "sharpe_cost0"))
        assert math.isnan(m["test_alpha_sharpe"]) and m["val_sharpe_cost0"] >= m["val_sharpe"] >= m["val_sharpe_cost2"]
    train_epochs(t)
    assert not math.isnan(t.history[-1]["test_sharpe_mean"]) and not math.isnan(t.history[-1]["test_alpha_sharpe_mean"])
    k = t.cfg.trainer.objective_last_k
    assert t.history[-1]["val_sharpe_mean_lastk"] == pytest.approx(np.mean([h["val_sharpe_mean"] for h in t.history[-k:]]))


def test_evaluation_columns_agree_with_the_returns_and_the_baselines_exist():
    """The evaluation statistics come from the policy's own returns and positions: val_sharpe is
    the Sharpe of the net returns; a buy-and-hold baseline is +1 throughout."""
    from tune_gems.stats.metrics import sharpe

    t = Trainer(tiny_config("trainer.epochs=1"), log=None)
    t.run_epoch()
    stats, returns, positions = t.evaluator.evaluate("val")
    np.testing.assert_allclose(stats["sharpe"], sharpe(returns, t.cfg.env.periods_per_year), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(stats["turnover"], np.abs(np.diff(positions.numpy(), prepend=0.0, axis=1)).mean(1), rtol=1e-5)
    table = t.baselines()
    assert set(table["baseline"]) == {"flat", "buy_and_hold", "momentum"} and set(table["segment"]) == {"val", "test"}
    bh = table[(table.baseline == "buy_and_hold") & (table.segment == "val")].iloc[0]  # beta ~1: the entry cost aside
    assert bh["beta"] == pytest.approx(1.0, abs=0.01) and bh["turnover"] == pytest.approx(1.0 / t.market.ranges["val"].length)


def test_health_line_has_the_design_shape(capsys):
    lines: list[str] = []
    t = Trainer(tiny_config("gems.g12.mode=off"), log=lines.append)
    t.run_epoch()
    (line,) = lines
    assert line.startswith("HEALTH_DIAG epoch=1 loss=")
    for key in ("q_mean=", "grad_norm=", "noisy_sigma=", "val_sharpe=", "±", "val_alpha_sharpe=", "sps=", "gems [g6_branch_indep="):
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


@pytest.mark.parametrize("paths", ["shared", "per_seed"])
def test_synthetic_paths_per_seed_index(paths):
    """data.synthetic.paths: per_seed gives member (seed index) s its own path, in training and
    evaluation; shared gives every member path 0."""
    t = Trainer(tiny_config(f"data.synthetic.paths={paths}", "trainer.epochs=1"), log=None)
    per_seed = paths == "per_seed"
    assert t.market.n_paths == (3 if per_seed else 1)
    assert t.learner.path_of_member == ([0, 1, 2] if per_seed else [0, 0, 0])
    assert t.evaluator.runners("val")[0].path_of_member.tolist() == t.learner.path_of_member
    r = t.run_epoch()
    assert not r.metrics["diverged"]


def test_config_momentum_span_default_is_the_evaluation_default():
    """config keeps a copy (it must not import torch); the two must agree."""
    from tune_gems.config.schema import DEFAULT_MOMENTUM_SPAN, EnvConfig
    from tune_gems.market.evaluation import DEFAULT_MOMENTUM_SPAN as EVALUATION_DEFAULT

    assert DEFAULT_MOMENTUM_SPAN == EVALUATION_DEFAULT == EnvConfig().momentum_span


def test_config_arms_round_trip_and_stay_out_of_the_label():
    from tune_gems.config.load import build_config

    cfg = tiny_config("arms.factors.gems.g10.mode=[measure,wire]")
    assert cfg.arms.factors == {"gems.g10.mode": ["measure", "wire"]}
    assert build_config(cfg.to_dict()) == cfg and "arms" not in cfg.label()
    listed = tiny_config("arms={list: [{name: a, gems.g6.mode: wire}, {name: b}]}")
    assert build_config(listed.to_dict()) == listed


def test_trainer_reports_per_arm_columns_and_health_part():
    """A run of 2 arms x 2 seeds: member rows carry their arm and seed index, history gets
    `<metric>@<arm>` means and HEALTH_DIAG a per-arm part (`off` where an arm has a gem off)."""
    from tune_gems.stats.metrics import epoch_metrics

    lines: list[str] = []
    cfg = tiny_config("trainer.population=2", "trainer.epochs=1", "arms.factors.gems.g12.mode=[off,measure]")
    t = Trainer(cfg, log=lines.append)
    arms = t.arms.names
    assert len(arms) == 2 and t.learner.P == 4
    r = t.run_epoch()
    assert [(m["arm"], m["seed_index"]) for m in r.members] == [(arms[0], 0), (arms[0], 1), (arms[1], 0), (arms[1], 1)]
    assert r.members[0]["seed"] == r.members[2]["seed"]  # seed index s: the same seed in every arm
    assert tuple(r.metrics) == epoch_metrics((), arms)
    vs = [m["val_sharpe"] for m in r.members]
    assert r.metrics[f"val_sharpe_mean@{arms[0]}"] == pytest.approx(np.mean(vs[:2]))
    assert r.metrics[f"g6_branch_indep@{arms[1]}"] == pytest.approx(np.mean([m["g6_branch_indep"] for m in r.members[2:]]))
    (line,) = lines
    part = line.split(" arms [")[1]
    assert line.endswith("]") and f"{arms[0]}: vs=" in part and f" | {arms[1]}: vs=" in part
    first, second = part.split(" | ")
    assert "g12_predictive=off" in first and "g12_predictive=off" not in second


def test_a_wired_predictor_trains_at_its_own_rate_whatever_the_gem_weight():
    """Issue 21: G12's head gets the gradient of its own objective in wire mode as in measure
    mode (weight x through the live inputs + (1 - weight) x through cut ones), so at weight 1e-3
    it takes the same first step as measured (before, a 1e-3 gradient sank under Adam's eps);
    the shared network still gets the weighted gradient."""
    def head_step(*overrides):
        learner = _learner(tiny_config("gems.g6.mode=off", "gems.g10.mode=off", *overrides))
        before = _head(learner, "g12").clone()
        learner.iteration()
        return _head(learner, "g12") - before, learner

    measured, m = head_step("gems.g12.mode=measure")
    for weight in ("0.001", "1.0"):
        wired, w = head_step("gems.g12.mode=wire", f"gems.g12.weight={weight}")
        torch.testing.assert_close(wired, measured, rtol=1e-4, atol=1e-7)
        assert (measured.abs() > 0).any()
    assert not torch.equal(_shared(w), _shared(m))  # wiring still reaches the shared network
