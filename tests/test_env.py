"""Features without look-ahead, rewards from t to t+1, the vectorised env, replay n-step
returns, the per-member RNG, the C51 projection, and the population Adam."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch
from gymnasium.utils.env_checker import check_env

from tune_gems.config import EnvConfig
from tune_gems.data import split_bounds, synthetic_prices
from tune_gems.env import Market, Transition, VecTradingEnv, evaluate_segment
from tune_gems.gems.reference import c51_project
from tune_gems.gym_env import TradingEnv
from tune_gems.model.flat import FlatParameters
from tune_gems.optim import PopulationAdam
from tune_gems.replay import ReplayBuffer
from tune_gems.rng import CounterRNG, member_seeds

W = 6


def _market(prices: pd.Series) -> Market:
    return Market(prices, split_bounds(prices, [0.6, 0.2, 0.2], min_len=W + 2), W)


@pytest.fixture
def prices() -> pd.Series:
    return synthetic_prices(400, seed=3)


# -- no look-ahead ------------------------------------------------------------------------------


@pytest.mark.parametrize("segment", ["val", "test"])
def test_observation_at_t_ignores_every_later_price(prices, segment):
    m = _market(prices)
    r = m.ranges[segment]
    t = (r.lo + r.hi) // 2
    changed = prices.copy()
    changed.iloc[t + 1 :] *= np.linspace(0.5, 3.0, len(prices) - t - 1)
    m2 = _market(changed)
    tt, pos = torch.tensor([t]), torch.tensor([0.5])
    assert torch.equal(m.observe(tt, pos), m2.observe(tt, pos))
    assert not torch.equal(m.observe(tt + 1, pos), m2.observe(tt + 1, pos))


def test_observation_is_the_normalised_past_window(prices):
    m = _market(prices)
    p = prices.to_numpy()
    lr = np.log(p[1:] / p[:-1])
    train_lr = lr[: m.ranges["train"].hi]  # log returns inside the train segment
    mu, sd = train_lr.mean(), train_lr.std()
    t = 250
    obs = m.observe(torch.tensor([t]), torch.tensor([-1.0]))[0].double().numpy()
    expect = (np.log(p[t - W + 1 : t + 1] / p[t - W : t]) - mu) / sd
    np.testing.assert_allclose(obs[:W], expect, rtol=1e-4, atol=1e-5)
    assert obs[W] == -1.0


def test_normalisation_uses_the_training_segment_only(prices):
    m = _market(prices)
    changed = prices.copy()
    vs = m.ranges["val"].lo
    changed.iloc[vs:] *= 5.0
    assert _market(changed).norm_mean == m.norm_mean and _market(changed).norm_std == m.norm_std


def test_reward_at_t_is_position_times_return_from_t_to_t_plus_1_minus_cost(prices):
    cfg = EnvConfig(window=W, episode_length=20, cost=1e-3, reward_scale=1.0)
    m = _market(prices)
    rng = CounterRNG([5], "cpu")
    env = VecTradingEnv(m, cfg, 1, n_envs=1)
    env.reset(rng.uniform(1, (1,)))
    t0 = int(env.t[0, 0])
    p = prices.to_numpy()
    u = rng.uniform(2, (1,))
    tr = env.step(torch.tensor([[[2, 2]]]), u)  # long, size 1
    assert tr.net_return.item() == pytest.approx(1.0 * (p[t0 + 1] / p[t0] - 1) - 1e-3 * 1.0, rel=1e-5)
    tr = env.step(torch.tensor([[[0, 0]]]), u)  # short 1/3: change of 4/3
    expect = -(1 / 3) * (p[t0 + 2] / p[t0 + 1] - 1) - 1e-3 * (4 / 3)
    assert tr.net_return.item() == pytest.approx(expect, rel=1e-5)
    assert tr.obs[0, 0, W].item() == 1.0 and tr.next_obs[0, 0, W].item() == pytest.approx(-1 / 3)


def test_episodes_restart_at_member_specific_offsets(prices):
    cfg = EnvConfig(window=W, episode_length=8)
    m = _market(prices)
    rng = CounterRNG(member_seeds(0, 3), "cpu")
    env = VecTradingEnv(m, cfg, 3, n_envs=4)
    env.reset(rng.uniform(1, (4,)))
    starts = env.t.clone()
    assert len(set(starts.flatten().tolist())) > 4
    lo, hi = m.ranges["train"].lo, m.ranges["train"].hi
    ends = 0
    for _ in range(8):
        rng.advance()
        tr = env.step(torch.ones(3, 4, 2, dtype=torch.int64), rng.uniform(1, (4,)))
        ends += int(tr.end.sum())
        assert ((env.t >= lo) & (env.t < hi)).all()
    assert ends == 12 and torch.equal(env.steps, torch.zeros_like(env.steps))
    assert (env.pos == 0).all()


def test_greedy_evaluation_runs_the_whole_segment(prices):
    m = _market(prices)
    cfg = EnvConfig(window=W)
    from tune_gems.env import ActionMap

    acts = ActionMap(cfg, "cpu")
    always_long = lambda obs: torch.full((*obs.shape[:2], 2), 2, dtype=torch.int64)  # noqa: E731
    rets, pos = evaluate_segment(m, acts, cfg.cost, always_long, 2, "val")
    r = m.ranges["val"]
    p = prices.to_numpy()
    expect = p[r.lo + 1 : r.hi + 1] / p[r.lo : r.hi] - 1
    expect[0] -= cfg.cost
    assert rets.shape == (2, r.length) and (pos == 1).all()
    np.testing.assert_allclose(rets[0].double().numpy(), expect, rtol=1e-4, atol=1e-7)


def test_gymnasium_wrapper_passes_the_env_checker(prices):
    env = TradingEnv(prices, split_bounds(prices, [0.6, 0.2, 0.2], min_len=W + 2), EnvConfig(window=W, episode_length=10))
    check_env(env, skip_render_check=True)
    obs, _ = env.reset(seed=1)
    total = 0
    for _ in range(10):
        obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
        total += 1
        if truncated:
            break
    assert total == 10 and truncated and obs.shape == (W + 1,)


# -- replay -------------------------------------------------------------------------------------


def _transition(P, E, step, end_every=None, obs_dim=3):
    obs = torch.full((P, E, obs_dim), float(step))
    end = torch.zeros(P, E, dtype=torch.bool)
    if end_every and (step + 1) % end_every == 0:
        end[:] = True
    rew = torch.arange(E).float().expand(P, E) * 0 + float(step + 1)
    return Transition(obs, torch.zeros(P, E, 2, dtype=torch.int64), rew, obs + 0.5, end, torch.zeros_like(end), rew)


def test_replay_n_step_returns_stop_at_episode_ends():
    P, E, n, gamma = 2, 3, 3, 0.5
    rng = CounterRNG([1, 2], "cpu")
    buf = ReplayBuffer(P, 30, 3, 2, E, n, gamma, device="cpu")
    for step in range(12):  # rewards 1..12, episodes end after steps 3, 7, 11 (every 4th)
        buf.add(_transition(P, E, step, end_every=4))
    for _ in range(5):
        rng.advance()
        b = buf.sample(rng.uniform(9, (64,)))
        s = b.obs[..., 0]  # the step index of the first transition
        for p in range(P):
            for i in range(64):
                t0 = int(s[p, i])
                exp, k = 0.0, 0
                while k < n:
                    exp += gamma**k * (t0 + k + 1)
                    k += 1
                    if (t0 + k) % 4 == 0:
                        break
                assert b.reward[p, i].item() == pytest.approx(exp)
                assert b.discount[p, i].item() == pytest.approx(gamma**k)
                assert b.next_obs[p, i, 0].item() == t0 + k - 1 + 0.5
        assert int(s.max()) <= 12 - n  # never reads past what was written


def test_replay_wraps_and_keeps_the_newest_transitions():
    P, E = 1, 4
    rng = CounterRNG([1], "cpu")
    buf = ReplayBuffer(P, 10, 3, 2, E, 1, 0.9, device="cpu")
    for step in range(7):
        buf.add(_transition(P, E, step))
    assert int(buf.size) == 10
    seen = set()
    for _ in range(50):
        rng.advance()
        seen |= set(buf.sample(rng.uniform(9, (32,))).obs[0, :, 0].tolist())
    assert seen == {4.0, 5.0, 6.0}  # 28 inserted, capacity 10: steps 4..6 (and part of 4)


# -- RNG ----------------------------------------------------------------------------------------


def test_counter_rng_is_per_member_and_advances():
    a = CounterRNG([1, 2, 3], "cpu")
    b = CounterRNG([1, 99, 3], "cpu")
    ua, ub = a.uniform(4, (1000,)), b.uniform(4, (1000,))
    assert torch.equal(ua[[0, 2]], ub[[0, 2]]) and not torch.equal(ua[1], ub[1])
    assert 0 < ua.min() and ua.max() < 1 and abs(ua.mean().item() - 0.5) < 0.02
    assert not torch.equal(a.uniform(5, (1000,)), ua)
    a.advance()
    assert not torch.equal(a.uniform(4, (1000,)), ua)
    z = a.normal(7, (20000,))
    assert abs(z.mean().item()) < 0.03 and abs(z.std().item() - 1) < 0.03
    i = a.integers(8, (5000,), torch.tensor(7))
    assert i.min() == 0 and i.max() == 6


def test_iteration_draws_are_per_member_slices_of_one_block():
    from tune_gems.rng import DrawPlan

    plan = DrawPlan({"a": 6, "b": 4000, "c": 0}, "cpu")
    r1, r2 = CounterRNG([1, 2], "cpu"), CounterRNG([1, 3], "cpu")
    d1, d2 = r1.draw(plan), r2.draw(plan)
    assert d1.uniform("a").shape == (2, 6) and d1.uniform("c").shape == (2, 0)
    assert torch.equal(d1.block[0], d2.block[0]) and not torch.equal(d1.block[1], d2.block[1])
    z = d1.normal("b")
    assert z.shape == (2, 2000) and abs(z.mean().item()) < 0.1 and abs(z.std().item() - 1) < 0.1
    r1.advance()
    assert not torch.equal(r1.draw(plan).block, d1.block)


def test_member_seeds_are_distinct_and_stable():
    s = member_seeds(0, 64)
    assert len(set(s)) == 64 and s == member_seeds(0, 64) and s[:3] == member_seeds(0, 3)
    assert set(s).isdisjoint(member_seeds(1, 64))


# -- C51 projection -----------------------------------------------------------------------------


def test_c51_projection_conserves_mass_and_is_exact_on_support():
    torch.manual_seed(0)
    N, atoms, vmin, vmax = 200, 21, -2.0, 2.0
    p = torch.softmax(torch.randn(N, atoms, dtype=torch.float64), -1)
    r = torch.randn(N, dtype=torch.float64) * 3
    g = torch.rand(N, dtype=torch.float64)
    m = c51_project(p, r, g, vmin, vmax)
    torch.testing.assert_close(m.sum(-1), torch.ones(N, dtype=torch.float64))
    assert (m >= 0).all()
    dz = (vmax - vmin) / (atoms - 1)
    r0 = torch.full((N,), 2 * dz, dtype=torch.float64)  # shift by two atoms, gamma 1
    m0 = c51_project(p, r0, torch.ones(N, dtype=torch.float64), vmin, vmax)
    torch.testing.assert_close(m0[:, 2:-1], p[:, : atoms - 3])
    torch.testing.assert_close(m0[:, -1], p[:, -3:].sum(-1))  # clamped mass lands on v_max
    done = c51_project(p, torch.full((N,), 0.3, dtype=torch.float64), torch.zeros(N, dtype=torch.float64), vmin, vmax)
    j = (0.3 - vmin) / dz
    lo = math.floor(j)
    torch.testing.assert_close(done[:, lo], torch.full((N,), lo + 1 - j, dtype=torch.float64))
    torch.testing.assert_close(done[:, lo + 1], torch.full((N,), j - lo, dtype=torch.float64))


# -- optimizer ----------------------------------------------------------------------------------


class _TwoParams(torch.nn.Module):
    def __init__(self, a: torch.Tensor, b: torch.Tensor):
        super().__init__()
        self.a, self.b = torch.nn.Parameter(a.clone()), torch.nn.Parameter(b.clone())


def test_population_adam_matches_torch_adam_per_member():
    torch.manual_seed(1)
    a, b = torch.randn(3, 4, 5), torch.randn(3, 2, 1, 5)
    module = _TwoParams(a, b)
    flat = FlatParameters(module, 3)
    assert module.a.data_ptr() == flat.data.data_ptr()  # parameters are views of the matrix
    ref = [a.clone().requires_grad_(True), b.clone().requires_grad_(True)]
    ours = PopulationAdam(flat, lr=1e-2, eps=1e-8, max_grad_norm=1e9)
    theirs = torch.optim.Adam(ref, lr=1e-2, eps=1e-8)
    for step in range(5):
        grads = [torch.randn_like(p) for p in ref]
        loss = (module.a * grads[0]).sum() + (module.b * grads[1]).sum()
        flat.gather_grads(torch.autograd.grad(loss, flat.params))
        ours.step()
        theirs.zero_grad()
        for p, g in zip(ref, grads):
            p.grad = g.clone()
        theirs.step()
    torch.testing.assert_close(module.a.detach(), ref[0].detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(module.b.detach(), ref[1].detach(), rtol=1e-5, atol=1e-6)
    ours._fused = False  # the plain-torch fallback follows the same rule
    flat.gather_grads((grads[0], None))
    before = module.a.detach().clone()
    ours.step()
    assert not torch.equal(before, module.a.detach())


def test_population_adam_clips_each_member_alone():
    module = _TwoParams(torch.zeros(2, 3), torch.zeros(2, 1))
    flat = FlatParameters(module, 2)
    opt = PopulationAdam(flat, lr=1.0, eps=1e-8, max_grad_norm=1.0)
    flat.grad.copy_(torch.tensor([[30.0, 40.0, 0.0, 0.0], [0.3, 0.4, 0.0, 0.0]]))
    norm = opt.step()
    torch.testing.assert_close(norm, torch.tensor([50.0, 0.5]))
    # after clipping member 0's gradient is [0.6, 0.8, 0]; member 1's is untouched
    torch.testing.assert_close(opt.exp_avg[0, :3] / 0.1, torch.tensor([0.6, 0.8, 0.0]))
    torch.testing.assert_close(opt.exp_avg[1, :3] / 0.1, torch.tensor([0.3, 0.4, 0.0]))
