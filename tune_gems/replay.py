"""A device-resident replay ring buffer per member, with n-step returns formed at sample time.

Every iteration inserts one transition per environment (E per member) at the same ring slots
for all members, so the insertion index is shared and lives on the device; the global insert
index g of a transition maps to slot g mod C, and env e's next step is always E slots later.
Sampling maps B uniforms per member (from that member's RNG) to logical positions, walks n steps
forward, stops at the first episode end (bootstrapping from that step's true next
observation), and never reads past what has been written. Fixed shapes, no host sync.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from tune_gems.env import Transition
from tune_gems.rng import to_integers


@dataclass
class Batch:
    obs: Tensor  # [P,B,obs_dim]
    action: Tensor  # [P,B,K] int64
    reward: Tensor  # [P,B] n-step discounted reward sum
    discount: Tensor  # [P,B] gamma^m * (1 - terminal)
    next_obs: Tensor  # [P,B,obs_dim] observation to bootstrap from
    not_done: Tensor  # [P,B] 1.0 unless the n-step window hit a terminal state


class ReplayBuffer:
    def __init__(
        self,
        population: int,
        capacity: int,
        obs_dim: int,
        branches: int,
        n_envs: int,
        n_step: int,
        gamma: float,
        device: torch.device | str,
    ):
        P, C = population, capacity
        self.capacity, self.n_envs, self.n_step = C, n_envs, n_step
        self.obs = torch.zeros(P, C, obs_dim, device=device)
        self.next_obs = torch.zeros(P, C, obs_dim, device=device)
        self.action = torch.zeros(P, C, branches, dtype=torch.int64, device=device)
        self.reward = torch.zeros(P, C, device=device)
        self.end = torch.zeros(P, C, dtype=torch.bool, device=device)
        self.terminal = torch.zeros(P, C, dtype=torch.bool, device=device)
        self.ptr = torch.zeros((), dtype=torch.int64, device=device)
        self.size = torch.zeros((), dtype=torch.int64, device=device)
        self._env_idx = torch.arange(n_envs, device=device)
        self._steps = torch.arange(n_step, device=device) * n_envs
        self._gamma_pow = gamma ** torch.arange(n_step + 1, dtype=torch.float32, device=device)

    def add(self, tr: Transition) -> None:
        idx = (self.ptr + self._env_idx) % self.capacity
        self.obs.index_copy_(1, idx, tr.obs)
        self.next_obs.index_copy_(1, idx, tr.next_obs)
        self.action.index_copy_(1, idx, tr.action)
        self.reward.index_copy_(1, idx, tr.reward)
        self.end.index_copy_(1, idx, tr.end)
        self.terminal.index_copy_(1, idx, tr.terminal)
        self.ptr.copy_((self.ptr + self.n_envs) % self.capacity)
        self.size.copy_(torch.clamp(self.size + self.n_envs, max=self.capacity))

    def min_fill(self) -> int:
        """Transitions per member needed before sampling is defined."""
        return (self.n_step - 1) * self.n_envs + 1

    def sample(self, u: Tensor) -> Batch:
        """A batch per member from uniforms u [P,B] drawn from each member's own RNG."""
        P, C, n = self.obs.shape[0], self.capacity, self.n_step
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
        obs_dim = self.obs.shape[-1]
        return Batch(
            obs=self.obs.gather(1, first.unsqueeze(-1).expand(-1, -1, obs_dim)),
            action=self.action.gather(1, first.unsqueeze(-1).expand(-1, -1, self.action.shape[-1])),
            reward=ret,
            discount=self._gamma_pow[m] * (1.0 - term),
            next_obs=self.next_obs.gather(1, last.unsqueeze(-1).expand(-1, -1, obs_dim)),
            not_done=1.0 - term,
        )

    def state_tensors(self) -> dict[str, Tensor]:
        return {
            "obs": self.obs,
            "next_obs": self.next_obs,
            "action": self.action,
            "reward": self.reward,
            "end": self.end,
            "terminal": self.terminal,
            "ptr": self.ptr,
            "size": self.size,
        }
