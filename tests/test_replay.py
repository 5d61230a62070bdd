"""Replay: n-step returns, the ring, compact storage that rebuilds observations bit for bit
(against the float-window buffer it replaced, kept here as the oracle), and the one-step
successor that G10/G12 read."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import pytest
import torch

from tune_gems.config.schema import EnvConfig
from tune_gems.data.segments import split_bounds
from tune_gems.data.series import synthetic_prices
from tune_gems.market.env import VecTradingEnv
from tune_gems.market.features import Market
from tune_gems.trainer.replay import ReplayBuffer
from tune_gems.rng import CounterRNG, member_seeds, to_integers

W = 6


def _market(prices: pd.Series | list[pd.Series], window: int = W) -> Market:
    first = prices if isinstance(prices, pd.Series) else prices[0]
    return Market(prices, split_bounds(first, [0.6, 0.2, 0.2], min_len=window + 2), window)


# -- the oracle: the replay buffer before compact storage (full observation windows) ----------


@dataclass
class _OracleBatch:
    obs: torch.Tensor
    action: torch.Tensor
    reward: torch.Tensor
    discount: torch.Tensor
    next_obs: torch.Tensor
    not_done: torch.Tensor


class _WindowReplay:
    """The previous ReplayBuffer, verbatim in its arithmetic: stores obs and next_obs windows."""

    def __init__(self, population, capacity, obs_dim, branches, n_envs, n_step, gamma):
        P, C = population, capacity
        self.capacity, self.n_envs, self.n_step = C, n_envs, n_step
        self.obs = torch.zeros(P, C, obs_dim)
        self.next_obs = torch.zeros(P, C, obs_dim)
        self.action = torch.zeros(P, C, branches, dtype=torch.int64)
        self.reward = torch.zeros(P, C)
        self.end = torch.zeros(P, C, dtype=torch.bool)
        self.terminal = torch.zeros(P, C, dtype=torch.bool)
        self.ptr = torch.zeros((), dtype=torch.int64)
        self.size = torch.zeros((), dtype=torch.int64)
        self._env_idx = torch.arange(n_envs)
        self._steps = torch.arange(n_step) * n_envs
        self._gamma_pow = gamma ** torch.arange(n_step + 1, dtype=torch.float32)

    def add(self, obs, action, reward, next_obs, end, terminal):
        idx = (self.ptr + self._env_idx) % self.capacity
        for buf, val in ((self.obs, obs), (self.next_obs, next_obs), (self.action, action), (self.reward, reward)):
            buf.index_copy_(1, idx, val)
        self.end.index_copy_(1, idx, end)
        self.terminal.index_copy_(1, idx, terminal)
        self.ptr.copy_((self.ptr + self.n_envs) % self.capacity)
        self.size.copy_(torch.clamp(self.size + self.n_envs, max=self.capacity))

    def sample(self, u):
        P, C, n = self.obs.shape[0], self.capacity, self.n_step
        batch_size = u.shape[1]
        starts = self.size - self._steps[-1]
        j = to_integers(u, starts)
        oldest = (self.ptr - self.size) % C
        slots = ((oldest + j).unsqueeze(-1) + self._steps) % C
        flat = slots.view(P, -1)
        r = self.reward.gather(1, flat).view(P, batch_size, n)
        end = self.end.gather(1, flat).view(P, batch_size, n).float()
        cols = [torch.ones_like(end[..., 0])]
        for k in range(1, n):
            cols.append(cols[-1] * (1.0 - end[..., k - 1]))
        alive = torch.stack(cols, dim=-1)
        ret = (alive * self._gamma_pow[:n] * r).sum(-1)
        m = alive.sum(-1).to(torch.int64)
        last = slots.gather(2, (m - 1).unsqueeze(-1)).squeeze(-1)
        first = slots[..., 0]
        term = self.terminal.gather(1, last).float()
        obs_dim = self.obs.shape[-1]
        return _OracleBatch(
            obs=self.obs.gather(1, first.unsqueeze(-1).expand(-1, -1, obs_dim)),
            action=self.action.gather(1, first.unsqueeze(-1).expand(-1, -1, self.action.shape[-1])),
            reward=ret,
            discount=self._gamma_pow[m] * (1.0 - term),
            next_obs=self.next_obs.gather(1, last.unsqueeze(-1).expand(-1, -1, obs_dim)),
            not_done=1.0 - term,
        )

    def successor(self, u):
        """The oracle's one-step successor of each sampled obs: next_obs of the first step."""
        P, C = self.obs.shape[0], self.capacity
        j = to_integers(u, self.size - self._steps[-1])
        first = ((self.ptr - self.size) % C + j) % C
        return self.next_obs.gather(1, first.unsqueeze(-1).expand(-1, -1, self.obs.shape[-1])), 1.0 - self.terminal.gather(1, first).float()


def _rollout(n_paths, path_of_member, *, P=3, E=4, n_step=3, capacity=50, steps=40, episode_length=8, seed=0):
    """Random rollouts into both buffers at once; yields nothing, returns (env, compact, oracle, rng)."""
    prices = [synthetic_prices(400, seed=3 + k) for k in range(n_paths)]
    m = _market(prices if n_paths > 1 else prices[0])
    cfg = EnvConfig(window=W, episode_length=episode_length, cost=1e-3)
    env = VecTradingEnv(m, cfg, P, E, path_of_member)
    rng = CounterRNG(member_seeds(seed, P), "cpu")
    compact = ReplayBuffer(P, capacity, m.obs_dim, 2, E, n_step, 0.9, device="cpu")
    oracle = _WindowReplay(P, capacity, m.obs_dim, 2, E, n_step, 0.9)
    env.reset(rng.uniform(1, (E,)))
    for _ in range(steps):
        rng.advance()
        action = to_integers(rng.uniform(2, (E, 2)), torch.tensor(3)).view(P, E, 2)
        obs = env.observe()
        tr = env.step(action, rng.uniform(1, (E,)))
        # the transition's observations are the env's own: the one it acted on, and the next one
        # it shows wherever the episode goes on
        assert torch.equal(tr.obs, obs)
        assert torch.equal(tr.next_obs[~tr.end], env.observe()[~tr.end])
        compact.add(tr)
        oracle.add(tr.obs, tr.action, tr.reward, tr.next_obs, tr.end, tr.terminal)
    return env, compact, oracle, rng


@pytest.mark.parametrize("capacity", [50, 1000])  # wrapped ring, and a ring not yet full
@pytest.mark.parametrize("n_step", [1, 3])
def test_compact_replay_rebuilds_the_window_replay_bit_for_bit(capacity, n_step):
    _, compact, oracle, rng = _rollout(1, None, capacity=capacity, n_step=n_step)
    for _ in range(5):
        rng.advance()
        u = rng.uniform(9, (64,))
        got, want = compact.sample(u), oracle.sample(u)
        for name in ("obs", "action", "reward", "discount", "next_obs", "not_done"):
            a, b = getattr(got, name), getattr(want, name)
            assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), name
        succ, succ_nd = oracle.successor(u)
        assert torch.equal(got.succ_obs, succ) and torch.equal(got.succ_not_done, succ_nd)
        assert torch.equal(got.stacked_obs, torch.cat([want.obs, succ, want.next_obs], dim=1))


def test_compact_replay_matches_the_oracle_on_per_member_paths():
    _, compact, oracle, rng = _rollout(3, [2, 0, 2])
    rng.advance()
    u = rng.uniform(9, (64,))
    got, want = compact.sample(u), oracle.sample(u)
    assert torch.equal(got.obs, want.obs) and torch.equal(got.next_obs, want.next_obs)
    assert torch.equal(got.succ_obs, oracle.successor(u)[0])


def test_successor_is_one_step_after_obs_and_differs_from_the_n_step_state():
    env, compact, _, rng = _rollout(1, None, n_step=3, episode_length=50)
    rng.advance()
    b = compact.sample(rng.uniform(9, (64,)))
    # s_{t+1}'s window is obs's window moved one step: its first W-1 returns are obs's last W-1
    assert torch.equal(b.succ_obs[..., : W - 1], b.obs[..., 1:W])
    # and it holds the position the sampled action chose
    assert torch.equal(b.succ_obs[..., W], env.actions.position(b.action))
    # far from episode ends the bootstrap state is s_{t+3}, not s_{t+1}
    assert torch.equal(b.next_obs[..., : W - 3], b.obs[..., 3:W])
    assert not torch.equal(b.next_obs, b.succ_obs)
    assert (b.succ_not_done == 1).all()


def test_successor_not_done_is_zero_where_the_first_step_was_terminal():
    env, compact, _, rng = _rollout(1, None, n_step=1)
    compact.terminal[0, ::2] = True  # plant true ends on half the slots of member 0
    rng.advance()
    b = compact.sample(rng.uniform(9, (200,)))
    assert (b.succ_not_done[0] == 0).any() and (b.succ_not_done[0] == 1).any()
    torch.testing.assert_close(b.succ_not_done[0], b.not_done[0])  # n = 1: the first step is the last
    assert (b.succ_not_done[1:] == 1).all()


def test_compact_transition_is_at_least_ten_times_smaller():
    _, compact, oracle, _ = _rollout(1, None, capacity=1000)
    nbytes = lambda tensors: sum(t.numel() * t.element_size() for t in tensors)  # noqa: E731
    per = lambda buf, names: nbytes(getattr(buf, n) for n in names) / (3 * 1000)  # noqa: E731
    ring = ("action", "reward", "end", "terminal")
    new = per(compact, ("t", "pos") + ring)
    old = per(oracle, ("obs", "next_obs") + ring)
    assert new == 4 + 4 + 2 + 4 + 1 + 1 and old == 2 * (W + 1) * 4 + 16 + 4 + 2
    assert set(compact.state_tensors()) == {"t", "pos", "action", "reward", "end", "terminal", "ptr", "size"}


def test_replay_binds_the_source_given_or_the_first_transitions():
    env, compact, _, _ = _rollout(1, None)
    assert compact.source is env
    other = ReplayBuffer(3, 10, env.obs_dim, 2, 4, 1, 0.9, device="cpu", source=env)
    assert other.source is env
    with pytest.raises(ValueError, match="observations of size"):
        ReplayBuffer(3, 10, env.obs_dim + 1, 2, 4, 1, 0.9, device="cpu", source=env)


# -- n-step returns and the ring (a market whose features encode the time index) ------------------


def _time_env(P: int, E: int, end_every: int) -> VecTradingEnv:
    """An env on a price path whose normalised log return at t is an affine map of t, so an
    observation's last window entry identifies its decision time exactly."""
    n = 200
    m = _market(synthetic_prices(n, seed=1), window=2)
    m.features[0] = torch.arange(n, dtype=torch.float32)  # logret_norm is its row view
    return VecTradingEnv(m, EnvConfig(window=2, episode_length=end_every), P, E)


def _fill(buf: ReplayBuffer, env: VecTradingEnv, steps: int) -> None:
    """Steps with rewards 1, 2, ... (= step index + 1), all envs starting at t = 10."""
    env.t.fill_(10)
    start_u = torch.full(env.t.shape, 0.5)
    for step in range(steps):
        tr = env.step(torch.zeros(*env.t.shape, 2, dtype=torch.int64), start_u)
        tr.reward = torch.full_like(tr.reward, float(step + 1))
        buf.add(tr)
        env.t.copy_(torch.where(tr.end, tr.t + 1, env.t))  # keep time running across episode ends


def test_replay_n_step_returns_stop_at_episode_ends():
    P, E, n, gamma = 2, 3, 3, 0.5
    env = _time_env(P, E, end_every=8)
    rng = CounterRNG([1, 2], "cpu")
    buf = ReplayBuffer(P, 45, env.obs_dim, 2, E, n, gamma, device="cpu")
    _fill(buf, env, 20)  # rewards 1..20, episodes end after steps 7, 15 (every 8th); 5..19 kept
    for _ in range(5):
        rng.advance()
        b = buf.sample(rng.uniform(9, (64,)))
        s = b.obs[..., 1].long() - 10  # the step index of the first transition
        for p in range(P):
            for i in range(64):
                t0 = int(s[p, i])
                exp, k = 0.0, 0
                while k < n:
                    exp += gamma**k * (t0 + k + 1)
                    k += 1
                    if (t0 + k) % 8 == 0:
                        break
                assert b.reward[p, i].item() == pytest.approx(exp)
                assert b.discount[p, i].item() == pytest.approx(gamma**k)
                assert b.next_obs[p, i, 1].item() == 10 + t0 + k  # s_{t0+k}
                assert b.succ_obs[p, i, 1].item() == 10 + t0 + 1
        assert int(s.max()) <= 20 - n and int(s.min()) >= 5  # never reads past what was written


def test_replay_wraps_and_keeps_the_newest_transitions():
    P, E = 1, 4
    env = _time_env(P, E, end_every=100)
    rng = CounterRNG([1], "cpu")
    buf = ReplayBuffer(P, 10, env.obs_dim, 2, E, 1, 0.9, device="cpu")
    _fill(buf, env, 7)
    assert int(buf.size) == 10
    seen = set()
    for _ in range(50):
        rng.advance()
        seen |= set((buf.sample(rng.uniform(9, (32,))).obs[0, :, 1] - 10).tolist())
    assert seen == {4.0, 5.0, 6.0}  # 28 inserted, capacity 10: steps 4..6 (and part of 4)


# -- CUDA: the same bits as on the CPU, and sampling inside a captured graph ----------------------


def _device_rollout(device: str, path_of_member, steps: int = 40):
    """A compact replay filled on `device` by the same actions and starts (drawn on the CPU)."""
    P, E = 3, 4
    prices = [synthetic_prices(400, seed=3 + k) for k in range(2)]
    m = Market(prices, split_bounds(prices[0], [0.6, 0.2, 0.2], min_len=W + 2), W, device)
    env = VecTradingEnv(m, EnvConfig(window=W, episode_length=8, cost=1e-3), P, E, path_of_member)
    buf = ReplayBuffer(P, 50, m.obs_dim, 2, E, 3, 0.9, device=device, source=env)
    rng = CounterRNG(member_seeds(0, P), "cpu")
    env.reset(rng.uniform(1, (E,)).to(device))
    for _ in range(steps):
        rng.advance()
        action = to_integers(rng.uniform(2, (E, 2)), torch.tensor(3)).view(P, E, 2).to(device)
        buf.add(env.step(action, rng.uniform(1, (E,)).to(device)))
    return buf


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_compact_replay_on_cuda_matches_cpu_and_samples_inside_a_cuda_graph():
    cpu, gpu = _device_rollout("cpu", [1, 0, 1]), _device_rollout("cuda", [1, 0, 1])
    for name, t in cpu.state_tensors().items():
        assert torch.equal(t, gpu.state_tensors()[name].cpu()), name
    u_cpu = CounterRNG([7, 8, 9], "cpu").uniform(9, (64,))
    want = cpu.sample(u_cpu)
    fields = ("obs", "action", "reward", "discount", "next_obs", "not_done", "succ_obs", "succ_not_done")
    got = gpu.sample(u_cpu.cuda())
    for name in fields:
        if name == "reward":  # a float sum over the n steps: CUDA may order it differently
            torch.testing.assert_close(got.reward.cpu(), want.reward, rtol=1e-6, atol=1e-6)
        else:
            assert torch.equal(getattr(got, name).cpu(), getattr(want, name)), name
    # captured once, replayed with fresh uniforms written into the static input
    u = torch.zeros_like(u_cpu, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        gpu.sample(u)  # warm-up outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static = gpu.sample(u)
        static.obs, static.succ_obs, static.next_obs  # their copies are part of the graph  # noqa: B018
    for seed in (11, 12):
        fresh = CounterRNG([seed, seed + 1, seed + 2], "cpu").uniform(9, (64,)).cuda()
        u.copy_(fresh)
        graph.replay()
        eager = gpu.sample(fresh)
        torch.cuda.synchronize()
        for name in fields:
            assert torch.equal(getattr(static, name), getattr(eager, name)), name
