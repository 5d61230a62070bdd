"""The branching action space: a direction and a size per decision, mapped to a target position."""

from __future__ import annotations

import torch
from torch import Tensor

from tune_gems.config.schema import EnvConfig


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

