"""The trading environment on torch tensors: features without look-ahead, a population x n_envs
vectorised environment with fixed shapes and no host sync in `step`, and greedy evaluation.

Time convention: prices p_0..p_{T-1}. The observation at decision time t holds the W log
returns log(p_s / p_{s-1}) for s = t-W+1..t (prices up to and including t, never later) and
the position held before acting. The position chosen at t earns the simple return from t to
t+1: reward = pos_t * (p_{t+1}/p_t - 1) - cost * |pos_t - pos_{t-1}|.

Log returns are normalised with the mean and std of the training segment only; validation and
test data never influence the features.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from tune_gems.config import EnvConfig
from tune_gems.errors import DataError
from tune_gems.rng import to_integers

SEGMENTS = ("train", "val", "test")
_STD_FLOOR = 1e-12


@dataclass(frozen=True)
class DecisionRange:
    """Decision times t in [lo, hi) of one segment: t and t+1 both lie in the segment."""

    lo: int
    hi: int

    @property
    def length(self) -> int:
        return self.hi - self.lo


class Market:
    """A price series prepared as device tensors: normalised log returns and next-step returns."""

    def __init__(self, prices: pd.Series, bounds, window: int, device: torch.device | str = "cpu"):
        p = np.asarray(prices, dtype=np.float64)
        self.window = window
        self.n = len(p)
        logret = np.zeros_like(p)
        logret[1:] = np.log(p[1:] / p[:-1])
        ret_next = np.zeros_like(p)
        ret_next[:-1] = p[1:] / p[:-1] - 1.0
        s, e = bounds.train
        train_lr = logret[max(s, 1) : e]
        self.norm_mean = float(train_lr.mean())
        self.norm_std = float(max(train_lr.std(), _STD_FLOOR))
        self.logret_norm = torch.tensor((logret - self.norm_mean) / self.norm_std, dtype=torch.float32, device=device)
        self.ret_next = torch.tensor(ret_next, dtype=torch.float32, device=device)
        self.ranges = {
            name: DecisionRange(max(seg[0], window), seg[1] - 1)
            for name, seg in zip(SEGMENTS, (bounds.train, bounds.val, bounds.test))
        }
        self._offsets = torch.arange(-window + 1, 1, device=device)

    def check_lengths(self, episode_length: int) -> None:
        """Each segment must have decision times; training must fit one episode."""
        for name, r in self.ranges.items():
            if r.length < 2:
                raise DataError(f"data: {name} segment has {max(r.length, 0)} decision steps after the {self.window}-step window; need at least 2")
        train = self.ranges["train"]
        if train.length < episode_length:
            raise DataError(
                f"data: train segment has {train.length} decision steps, fewer than env.episode_length={episode_length}"
            )

    def observe(self, t: Tensor, pos: Tensor) -> Tensor:
        """Observations [..., W+1] at decision times t [...] with current positions pos [...]."""
        window = self.logret_norm[t.unsqueeze(-1) + self._offsets]
        return torch.cat([window, pos.unsqueeze(-1)], dim=-1)

    @property
    def obs_dim(self) -> int:
        return self.window + 1


@dataclass
class Transition:
    """One vectorised step, [P,E,...] each. `end` marks the last step of an episode (a time
    limit: bootstrap from `next_obs`); `terminal` marks a true end (no bootstrap)."""

    obs: Tensor
    action: Tensor
    reward: Tensor
    next_obs: Tensor
    end: Tensor
    terminal: Tensor
    net_return: Tensor


class ActionMap:
    """Branching actions -> target position: branch 0 picks a direction, branch 1 a size."""

    branches = 2

    def __init__(self, cfg: EnvConfig, device):
        self.directions = torch.tensor(cfg.directions, dtype=torch.float32, device=device)
        self.sizes = torch.tensor(cfg.sizes, dtype=torch.float32, device=device)

    @property
    def sub_actions(self) -> int:
        return self.directions.shape[0]

    def position(self, action: Tensor) -> Tensor:
        return self.directions[action[..., 0]] * self.sizes[action[..., 1]]


class VecTradingEnv:
    """P members x E environments stepping in lockstep on the training segment.

    State lives in preallocated tensors updated in place; `step` never reads a value back to
    the host, so it can be captured in a CUDA graph. Episode starts come from uniforms [P,E]
    the caller draws from each member's own RNG (one per environment, every step).
    """

    def __init__(self, market: Market, cfg: EnvConfig, population: int, n_envs: int):
        self.market, self.cfg = market, cfg
        self.actions = ActionMap(cfg, market.logret_norm.device)
        P, E = population, n_envs
        dev = market.logret_norm.device
        self.t = torch.zeros(P, E, dtype=torch.int64, device=dev)
        self.pos = torch.zeros(P, E, dtype=torch.float32, device=dev)
        self.steps = torch.zeros(P, E, dtype=torch.int64, device=dev)
        rng_range = market.ranges["train"]
        self._start_lo = rng_range.lo
        self._start_span = rng_range.length - cfg.episode_length + 1

    def reset(self, start_u: Tensor) -> None:
        self.t.copy_(self._starts(start_u))
        self.pos.zero_()
        self.steps.zero_()

    def _starts(self, start_u: Tensor) -> Tensor:
        return self._start_lo + to_integers(start_u, self._start_span)

    def observe(self) -> Tensor:
        return self.market.observe(self.t, self.pos)

    def step(self, action: Tensor, start_u: Tensor) -> Transition:
        """Act, earn, advance; environments whose episode ends restart at `_starts(start_u)`."""
        obs = self.observe()
        new_pos = self.actions.position(action)
        net = new_pos * self.market.ret_next[self.t] - self.cfg.cost * (new_pos - self.pos).abs()
        t_next = self.t + 1
        next_obs = self.market.observe(t_next, new_pos)
        steps = self.steps + 1
        end = steps >= self.cfg.episode_length
        terminal = torch.zeros_like(end)
        # advance, restarting finished episodes at fresh offsets (flat position)
        self.t.copy_(torch.where(end, self._starts(start_u), t_next))
        self.pos.copy_(torch.where(end, torch.zeros_like(new_pos), new_pos))
        self.steps.copy_(torch.where(end, torch.zeros_like(steps), steps))
        return Transition(obs, action, net * self.cfg.reward_scale, next_obs, end, terminal, net)

    def state_tensors(self) -> dict[str, Tensor]:
        return {"t": self.t, "pos": self.pos, "steps": self.steps}


class SegmentEvaluator:
    """Runs a greedy policy over a whole segment for every member, from a flat position.

    The loop is sequential in time (the position feeds the next observation), so each step is
    a fixed-shape update of preallocated state: `step()` can be captured once as a CUDA graph
    and replayed T times (see tune_gems.trainer.graph.StepRunner), or run eagerly on CPU.
    `policy` maps observations [P,1,obs_dim] to actions [P,1,K] and must read the live
    parameters inside the call (so a captured graph sees later updates).
    """

    def __init__(self, market: Market, actions: ActionMap, cost: float, policy: Callable[[Tensor], Tensor], population: int, segment: str):
        r = market.ranges[segment]
        dev = market.logret_norm.device
        self.market, self.actions, self.cost, self.policy = market, actions, cost, policy
        self.lo, self.T = r.lo, r.length
        self.t = torch.full((population, 1), r.lo, dtype=torch.int64, device=dev)
        self.pos = torch.zeros(population, 1, device=dev)
        self.i = torch.zeros(1, dtype=torch.int64, device=dev)
        self.returns = torch.zeros(population, self.T, device=dev)
        self.positions = torch.zeros(population, self.T, device=dev)

    def state_tensors(self) -> dict[str, Tensor]:
        return {"t": self.t, "pos": self.pos, "i": self.i, "returns": self.returns, "positions": self.positions}

    def reset(self) -> None:
        self.t.fill_(self.lo)
        self.pos.zero_()
        self.i.zero_()

    def step(self) -> None:
        act = self.policy(self.market.observe(self.t, self.pos))
        new_pos = self.actions.position(act)
        ret = new_pos * self.market.ret_next[self.t] - self.cost * (new_pos - self.pos).abs()
        self.returns.index_copy_(1, self.i, ret)
        self.positions.index_copy_(1, self.i, new_pos)
        self.pos.copy_(new_pos)
        self.t.add_(1)
        self.i.add_(1)


def evaluate_segment(
    market: Market,
    actions: ActionMap,
    cost: float,
    policy: Callable[[Tensor], Tensor],
    population: int,
    segment: str,
) -> tuple[Tensor, Tensor]:
    """Eager one-off evaluation: per-step net returns and positions, both [P,T]."""
    ev = SegmentEvaluator(market, actions, cost, policy, population, segment)
    for _ in range(ev.T):
        ev.step()
    return ev.returns.clone(), ev.positions.clone()
