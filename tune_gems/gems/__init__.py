"""The gems as the learner uses them: per-gem mode (off | measure | wire) and weight.

`measure` computes the gem forward-only under no_grad on detached inputs: no autograd graph is
built and no gradient can reach the network. `wire` adds value * weight to the loss. The math
itself comes from the ops backend (CUDA kernels or the plain-torch reference, see
tune_gems.ops), which has the signatures of tune_gems.gems.reference.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor

from tune_gems.config import GEM_NAMES, GemsConfig
from tune_gems.metrics import GEM_KEYS


@dataclass(frozen=True)
class GemSetting:
    name: str  # g6 | g10 | g12
    metric: str  # g6_branch_indep | ...
    mode: str
    weight: float


class GemSet:
    def __init__(self, cfg: GemsConfig):
        self.settings = {
            n: GemSetting(n, GEM_KEYS[n], getattr(cfg, n).mode, getattr(cfg, n).weight) for n in GEM_NAMES
        }

    def mode(self, name: str) -> str:
        return self.settings[name].mode

    def active(self, name: str) -> bool:
        return self.settings[name].mode != "off"

    def wired(self, name: str) -> bool:
        return self.settings[name].mode == "wire"

    def evaluate(self, name: str, fn: Callable[..., tuple], *inputs: Tensor) -> Tensor | None:
        """The gem's value [P] under its mode (None when off)."""
        mode = self.settings[name].mode
        if mode == "off":
            return None
        if mode == "measure":
            with torch.no_grad():
                return fn(*(x.detach() for x in inputs))[1]
        return fn(*inputs)[1]

    def loss_term(self, values: dict[str, Tensor | None]) -> Tensor | None:
        """Sum over wired gems of weight * value, per member [P]."""
        terms = [self.settings[n].weight * v for n, v in values.items() if v is not None and self.wired(n)]
        return torch.stack(terms).sum(0) if terms else None
