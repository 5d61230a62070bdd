"""Parameters a gem owns (`Gem.head`): population layers whose effective weights the network
computes with its own (one parameter matrix, optimizer step and graph); `forward(*args, weights)`."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from tune_gems.config.schema import ModelConfig
from tune_gems.model.layers import PopLinear


@dataclass(frozen=True)
class HeadContext:
    """What a head factory gets: the member generators, the model config, H, K and A."""

    generators: list[torch.Generator]
    model: ModelConfig
    hidden: int
    branches: int
    sub_actions: int


class LatentPredictor(nn.Module):
    """G12's predictor: (h_t [P,B,H], action [P,B,K]) -> predicted h_{t+1} [P,B,H]."""

    def __init__(self, ctx: HeadContext):
        super().__init__()
        gens, H, K, A = ctx.generators, ctx.hidden, ctx.branches, ctx.sub_actions
        self.A = A
        self.pred_in = PopLinear(gens, 1, H + K * A, ctx.model.predictor_hidden)
        self.pred_out = PopLinear(gens, 1, ctx.model.predictor_hidden, H)

    def forward(self, h: Tensor, action: Tensor, weights: dict[str, tuple[Tensor, Tensor]]) -> Tensor:
        # one-hot by comparison: F.one_hot validates its input with a host sync on CUDA
        ids = torch.arange(self.A, device=action.device)
        onehot = (action.unsqueeze(-1) == ids).to(h.dtype).flatten(-2)  # [P,B,K*A]
        x = PopLinear.apply(torch.cat([h, onehot], dim=-1), weights["pred_in"], relu=True)
        return PopLinear.apply(x, weights["pred_out"])
