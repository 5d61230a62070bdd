"""Greedy evaluation: a policy run over a whole segment for every member from a flat position, as
fixed-shape in-place steps (captured once as a CUDA graph by tune_gems.trainer.graph.StepRunner)."""

from __future__ import annotations

from typing import Callable, Sequence

import torch
from torch import Tensor

from tune_gems.market.actions import ActionMap
from tune_gems.market.features import Market, member_paths, path_index


class SegmentEvaluator:
    """Runs a greedy policy over a whole segment for every member, from a flat position.

    The loop is sequential in time (the position feeds the next observation), so each step is
    a fixed-shape update of preallocated state: `step()` can be captured once as a CUDA graph
    and replayed T times (see tune_gems.trainer.graph.StepRunner), or run eagerly on CPU.
    `policy` maps observations [P,1,obs_dim] to actions [P,1,K] and must read the live
    parameters inside the call (so a captured graph sees later updates).
    """

    def __init__(
        self,
        market: Market,
        actions: ActionMap,
        cost: float,
        policy: Callable[[Tensor], Tensor],
        population: int,
        segment: str,
        path_of_member: Sequence[int] | Tensor | None = None,
        fold_of_member: Sequence[int] | Tensor | None = None,
    ):
        """`path_of_member`, `fold_of_member` [P]: each member's path and fold (default 0): a
        member walks its own fold's window of `segment` (every fold's has the same length)."""
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

