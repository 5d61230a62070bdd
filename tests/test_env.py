"""Features without look-ahead, rewards from t to t+1, the vectorised env, price paths per
member, greedy evaluation, and the C51 projection. (Replay: test_replay.py; RNG: test_rng.py;
optimizer: test_optim.py.)"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from gymnasium.utils.env_checker import check_env

from env_fixtures import evaluate_segment

from tune_gems.config.schema import EnvConfig
from tune_gems.data.segments import split_bounds
from tune_gems.data.series import synthetic_prices
from tune_gems.market.actions import ActionMap
from tune_gems.market.env import VecTradingEnv
from tune_gems.market.features import Market
from tune_gems.contracts.errors import DataError
from tune_gems.ops.reference import c51_project
from tune_gems.market.gym_env import TradingEnv
from tune_gems.rng import CounterRNG, member_seeds, to_integers

W = 6


def _market(prices: pd.Series | list[pd.Series]) -> Market:
    first = prices if isinstance(prices, pd.Series) else prices[0]
    return Market(prices, split_bounds(first, [0.6, 0.2, 0.2], min_len=W + 2), W)


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
    from tune_gems.market.actions import ActionMap

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


# -- price paths per member ---------------------------------------------------------------------


def _paths(k: int, n: int = 400) -> list[pd.Series]:
    return [synthetic_prices(n, seed=3 + i) for i in range(k)]


def _roll(env: VecTradingEnv, steps: int = 30, seed: int = 0) -> list[tuple[torch.Tensor, ...]]:
    """(obs, reward, next_obs, end) of every step under random actions and starts."""
    P, E = env.t.shape
    rng = CounterRNG(member_seeds(seed, P), "cpu")
    env.reset(rng.uniform(1, (E,)))
    out = []
    for _ in range(steps):
        rng.advance()
        action = to_integers(rng.uniform(2, (E, 2)), torch.tensor(3)).view(P, E, 2)
        obs = env.observe()
        tr = env.step(action, rng.uniform(1, (E,)))
        out.append((obs, tr.reward, tr.next_obs, tr.end))
    return out


def test_one_path_market_equals_the_series_market_bit_for_bit():
    prices = _paths(1)[0]
    a, b = _market(prices), _market([prices])
    assert b.n_paths == 1 and torch.equal(a.features, b.features) and torch.equal(a.returns_next, b.returns_next)
    assert a.norm_mean == b.norm_mean and a.norm_std == b.norm_std


def test_path_zero_of_many_behaves_like_the_one_path_market():
    # shared paths (everyone on path 0) give exactly today's env, whatever else the market holds
    cfg = EnvConfig(window=W, episode_length=8, cost=1e-3)
    paths = _paths(3)
    one = _roll(VecTradingEnv(_market(paths[0]), cfg, 3, 4))
    many = _roll(VecTradingEnv(_market(paths), cfg, 3, 4, path_of_member=[0, 0, 0]))
    for x, y in zip(one, many):
        for u, v in zip(x, y):
            assert torch.equal(u, v)


def test_members_see_their_own_path_and_members_on_one_path_the_same():
    cfg = EnvConfig(window=W, episode_length=8, cost=1e-3)
    paths = _paths(2)
    m = _market(paths)
    env = VecTradingEnv(m, cfg, 3, 2, path_of_member=[1, 0, 1])
    t = torch.full((3, 2), 100)
    pos = torch.zeros(3, 2)
    obs = env.observe_at(t, pos)
    assert torch.equal(obs[0], obs[2]) and not torch.equal(obs[0], obs[1])
    # each member's observation is its own path's, as a one-path market builds it
    for p, k in enumerate([1, 0, 1]):
        assert torch.equal(obs[p], _market(paths[k]).observe(t[p], pos[p]))
    # and its rewards come from its own path's returns
    env.t.fill_(100)
    tr = env.step(torch.full((3, 2, 2), 2, dtype=torch.int64), torch.full((3, 2), 0.5))
    for p, k in enumerate([1, 0, 1]):
        expect = _market(paths[k]).ret_next[100] - cfg.cost
        assert torch.equal(tr.net_return[p], expect.expand(2))


def test_members_on_different_paths_diverge_and_on_one_path_agree_over_rollouts():
    # members 0 and 1 share seeds and actions' randomness only through their own RNG, so give
    # them the same seed: then the path alone decides whether their experience differs
    cfg = EnvConfig(window=W, episode_length=8, cost=1e-3)
    paths = _paths(2)
    seeds = [5, 5, 5]
    env = VecTradingEnv(_market(paths), cfg, 3, 2, path_of_member=[0, 0, 1])
    rng = CounterRNG(seeds, "cpu")
    env.reset(rng.uniform(1, (2,)))
    for _ in range(10):
        rng.advance()
        obs = env.observe()
        tr = env.step(to_integers(rng.uniform(2, (2, 2)), torch.tensor(3)).view(3, 2, 2), rng.uniform(1, (2,)))
        assert torch.equal(obs[0], obs[1]) and torch.equal(tr.reward[0], tr.reward[1])
        assert not torch.equal(obs[0], obs[2])


def test_evaluation_runs_each_member_on_its_path():
    paths = _paths(2)
    m = _market(paths)
    cfg = EnvConfig(window=W)
    acts = ActionMap(cfg, "cpu")
    always_long = lambda obs: torch.full((*obs.shape[:2], 2), 2, dtype=torch.int64)  # noqa: E731
    rets, _ = evaluate_segment(m, acts, cfg.cost, always_long, 3, "val", path_of_member=[1, 0, 1])
    for p, k in enumerate([1, 0, 1]):
        alone, _ = evaluate_segment(_market(paths[k]), acts, cfg.cost, always_long, 1, "val")
        assert torch.equal(rets[p], alone[0])
    shared, _ = evaluate_segment(_market(paths[0]), acts, cfg.cost, always_long, 3, "val")
    default, _ = evaluate_segment(m, acts, cfg.cost, always_long, 3, "val")  # default: path 0
    assert torch.equal(shared, default)


def test_bad_path_mappings_and_paths_are_refused():
    cfg = EnvConfig(window=W, episode_length=8)
    m = _market(_paths(2))
    with pytest.raises(ValueError, match="2 entries for a population of 3"):
        VecTradingEnv(m, cfg, 3, 2, path_of_member=[0, 1])
    with pytest.raises(ValueError, match=r"\[0, 2\)"):
        VecTradingEnv(m, cfg, 2, 2, path_of_member=[0, 2])
    with pytest.raises(DataError, match="differ in length"):
        _market([synthetic_prices(400, 1), synthetic_prices(401, 2)])
    short = synthetic_prices(5, 1)
    with pytest.raises(DataError, match="5 prices, fewer than the 6-step observation window"):
        Market(short, split_bounds(short, [0.6, 0.2, 0.2], min_len=1), W)
