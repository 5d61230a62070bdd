"""A device-resident replay ring per member, n-step returns formed at sample time; a transition is
stored as 16 bytes the environment rebuilds it from (benchmarks/RESULTS.md "Compact replay")."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Protocol

import torch
from torch import Tensor

from tune_gems.market.env import Transition
from tune_gems.rng import to_integers

TIME_DTYPE = torch.int32
"""Decision times are indices into a price path: int32 holds any series a machine can train on."""
ACTION_DTYPE = torch.uint8
"""Sub-action indices: at most 256 sub-actions per branch (the config has a handful)."""


class ObservationSource(Protocol):
    """What replay needs from the environment to rebuild observations (VecTradingEnv has it)."""

    obs_dim: int

    def observe_at(self, t: Tensor, pos: Tensor) -> Tensor:
        ...

    @property
    def actions(self):  # an ActionMap: .position(action) and .sub_actions
        ...


@dataclass
class Batch:
    """A sampled batch per member: `stacked_obs` [P,3B,obs_dim] = cat[obs, succ_obs, next_obs], thirds copied lazily."""

    action: Tensor  # [P,B,K] int64
    reward: Tensor  # [P,B] n-step discounted reward sum
    discount: Tensor  # [P,B] gamma^m * (1 - terminal)
    not_done: Tensor  # [P,B] 1.0 unless the n-step window hit a terminal state
    succ_not_done: Tensor  # [P,B] 0.0 where the first step itself was terminal
    stacked_obs: Tensor  # [P,3B,obs_dim]: s_t, s_{t+1}, s_{t+m}

    def _third(self, k: int) -> Tensor:
        b = self.reward.shape[1]
        return self.stacked_obs[:, k * b : (k + 1) * b].contiguous()

    @cached_property
    def obs(self) -> Tensor:
        """[P,B,obs_dim] the sampled state s_t."""
        return self._third(0)

    @cached_property
    def succ_obs(self) -> Tensor:
        """[P,B,obs_dim] the one-step successor s_{t+1} of obs (what G10 and G12 read)."""
        return self._third(1)

    @cached_property
    def next_obs(self) -> Tensor:
        """[P,B,obs_dim] the n-step target's state s_{t+m} (m <= n: fewer where the episode ended)."""
        return self._third(2)


class ReplayBuffer:
    def __init__(self, population: int, capacity: int, obs_dim: int, branches: int, n_envs: int, n_step: int,
            gamma: float, device: torch.device | str, source: ObservationSource | None = None):
        """`source` rebuilds observations; without it the buffer binds to the first Transition's."""
        P, C = population, capacity
        self.capacity, self.n_envs, self.n_step, self.obs_dim = C, n_envs, n_step, obs_dim
        self.t = torch.zeros(P, C, dtype=TIME_DTYPE, device=device)
        self.pos = torch.zeros(P, C, device=device)
        self.action = torch.zeros(P, C, branches, dtype=ACTION_DTYPE, device=device)
        self.reward = torch.zeros(P, C, device=device)
        self.end = torch.zeros(P, C, dtype=torch.bool, device=device)
        self.terminal = torch.zeros(P, C, dtype=torch.bool, device=device)
        self.ptr = torch.zeros((), dtype=torch.int64, device=device)
        self.size = torch.zeros((), dtype=torch.int64, device=device)
        self._env_idx = torch.arange(n_envs, device=device)
        self._steps = torch.arange(n_step, device=device) * n_envs
        self._gamma_pow = gamma ** torch.arange(n_step + 1, dtype=torch.float32, device=device)
        self.source: ObservationSource | None = None
        if source is not None:
            self.bind(source)

    def bind(self, source: ObservationSource) -> None:
        if source.obs_dim != self.obs_dim:
            raise ValueError(f"replay holds observations of size {self.obs_dim}, the source makes {source.obs_dim}")
        limit = torch.iinfo(ACTION_DTYPE).max + 1
        if source.actions.sub_actions > limit:
            raise ValueError(f"replay stores sub-actions as {ACTION_DTYPE}: at most {limit}, got {source.actions.sub_actions}")
        self.source = source

    def add(self, tr: Transition) -> None:
        if self.source is None:
            if getattr(tr, "source", None) is None:
                raise ValueError("replay has no observation source: pass source= or add Transitions from a VecTradingEnv")
            self.bind(tr.source)
        idx = (self.ptr + self._env_idx) % self.capacity
        self.t.index_copy_(1, idx, tr.t.to(TIME_DTYPE))
        self.pos.index_copy_(1, idx, tr.pos)
        self.action.index_copy_(1, idx, tr.action.to(ACTION_DTYPE))
        self.reward.index_copy_(1, idx, tr.reward)
        self.end.index_copy_(1, idx, tr.end)
        self.terminal.index_copy_(1, idx, tr.terminal)
        self.ptr.copy_((self.ptr + self.n_envs) % self.capacity)
        self.size.copy_(torch.clamp(self.size + self.n_envs, max=self.capacity))

    def min_fill(self) -> int:
        return (self.n_step - 1) * self.n_envs + 1

    def sample(self, u: Tensor) -> Batch:
        P, C, n = self.t.shape[0], self.capacity, self.n_step
        batch_size = u.shape[1]
        starts = self.size - self._steps[-1]  # logical positions with n steps written after them
        j = to_integers(u, starts)  # [P,B]
        oldest = (self.ptr - self.size) % C
        slots = (oldest + j).unsqueeze(-1) + self._steps  # [P,B,n]
        slots = slots % C
        flat = slots.view(P, -1)
        r = self.reward.gather(1, flat).view(P, batch_size, n)
        end = self.end.gather(1, flat).view(P, batch_size, n).float()
        # alive_k = 1 while no earlier step of the window ended its episode (a short loop over
        # the n steps: torch's scan kernel is slow for an innermost dimension this small)
        cols = [torch.ones_like(end[..., 0])]
        for k in range(1, n):
            cols.append(cols[-1] * (1.0 - end[..., k - 1]))
        alive = torch.stack(cols, dim=-1)
        ret = (alive * self._gamma_pow[:n] * r).sum(-1)
        m = alive.sum(-1).to(torch.int64)  # steps used, in 1..n
        last = slots.gather(2, (m - 1).unsqueeze(-1)).squeeze(-1)  # [P,B]
        first = slots[..., 0]
        term = self.terminal.gather(1, last).float()
        first_last = torch.cat([first, last], dim=1)  # [P,2B]: one gather per stored field
        t_fl = self.t.gather(1, first_last)  # int32: the market's window offsets widen it
        k = self.action.shape[-1]
        a_fl = self.action.gather(1, first_last.unsqueeze(-1).expand(-1, -1, k)).long()
        chosen = self.source.actions.position(a_fl)  # the position each stored action chose
        # s_t = (t, pos) of the first step; s_{t+1} = (t+1, chosen) of the first; s_{t+m} = (t+1,
        # chosen) of the last: the observations the env built, rebuilt the way it built them
        stacked = self.source.observe_at(torch.cat([t_fl[:, :batch_size], t_fl + 1], dim=1),
            torch.cat([self.pos.gather(1, first), chosen], dim=1))
        return Batch(action=a_fl[:, :batch_size].contiguous(), reward=ret, discount=self._gamma_pow[m] * (1.0 - term),
            not_done=1.0 - term, succ_not_done=1.0 - self.terminal.gather(1, first).float(), stacked_obs=stacked)

    def state_tensors(self) -> dict[str, Tensor]:
        """Everything the buffer holds (restored exactly); the features are data, rebuilt on resume."""
        return {"t": self.t, "pos": self.pos, "action": self.action, "reward": self.reward, "end": self.end,
            "terminal": self.terminal, "ptr": self.ptr, "size": self.size}
