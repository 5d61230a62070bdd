"""Greedy evaluation: a policy over a whole segment for every member from a flat position."""

from __future__ import annotations

from typing import Callable, Sequence

import torch
from torch import Tensor

from tune_gems.market.actions import ActionMap
from tune_gems.market.features import Market, member_paths, path_index


class SegmentEvaluator:
    """A greedy policy over a segment for every member from flat, as in-place steps a graph captures."""

    def __init__(self, market: Market, actions: ActionMap, cost: float, policy: Callable[[Tensor], Tensor],
            population: int, segment: str, path_of_member: Sequence[int] | Tensor | None = None,
            fold_of_member: Sequence[int] | Tensor | None = None):
        """`path_of_member`, `fold_of_member` [P]: each member's path and fold (default 0)."""
        dev = market.device
        self.market, self.actions, self.cost, self.policy = market, actions, cost, policy
        self.path_of_member = member_paths(path_of_member, population, market)
        paths = path_index(market, market.member_rows(population, path_of_member, fold_of_member))
        self._path = None if paths is None else paths.view(population, 1)  # against [P,1]
        self.lo_of_member, self.T = market.member_windows(segment, population, fold_of_member)
        self._lo = self.lo_of_member.view(population, 1)
        self.t = self._lo.clone()
        self.pos = torch.zeros(population, 1, device=dev)
        self.i = torch.zeros(1, dtype=torch.int64, device=dev)
        self.returns = torch.zeros(population, self.T, device=dev)
        self.positions = torch.zeros(population, self.T, device=dev)

    def state_tensors(self) -> dict[str, Tensor]:
        return {"t": self.t, "pos": self.pos, "i": self.i, "returns": self.returns, "positions": self.positions}

    def reset(self) -> None:
        self.t.copy_(self._lo)
        self.pos.zero_()
        self.i.zero_()

    def step(self) -> None:
        act = self.policy(self.market.observe(self.t, self.pos, self._path))
        new_pos = self.actions.position(act)
        ret = new_pos * self.market.returns_at(self.t, self._path) - self.cost * (new_pos - self.pos).abs()
        self.returns.index_copy_(1, self.i, ret)
        self.positions.index_copy_(1, self.i, new_pos)
        self.pos.copy_(new_pos)
        self.t.add_(1)
        self.i.add_(1)

