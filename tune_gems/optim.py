"""Adam for population-batched parameters, with gradient clipping per member.

Every parameter has a leading member axis (G = P, or P*K member-major), so a gradient viewed
as [P, -1] holds one row per member. The optimizer concatenates those rows into one
member-major matrix [P, total]: the per-member norm, the clipping and the Adam moments are then
a handful of kernels whatever the number of parameters, all elementwise or row-wise, so
members never mix. The step counter is a device tensor: the whole step is capturable in a CUDA
graph and matches torch.optim.Adam's update rule (see tests).
"""

from __future__ import annotations

import torch
from torch import Tensor

CLIP_EPS = 1e-6


class PopulationAdam:
    def __init__(
        self,
        params: list[Tensor],
        population: int,
        lr: float,
        eps: float,
        max_grad_norm: float,
        betas: tuple[float, float] = (0.9, 0.999),
    ):
        self.params, self.P = list(params), population
        self.lr, self.eps, self.max_grad_norm = lr, eps, max_grad_norm
        self.beta1, self.beta2 = betas
        self.sizes = [p.numel() // population for p in self.params]
        total = sum(self.sizes)
        dev = self.params[0].device
        self.exp_avg = torch.zeros(population, total, device=dev)
        self.exp_avg_sq = torch.zeros(population, total, device=dev)
        self.step_count = torch.zeros((), device=dev)
        for p in self.params:  # persistent gradient buffers: backward accumulates into them in place
            p.grad = torch.zeros_like(p)

    def zero_grad(self) -> None:
        torch._foreach_zero_([p.grad for p in self.params])

    @torch.no_grad()
    def step(self) -> Tensor:
        """Clip each member's gradient to max_grad_norm, take an Adam step; returns the
        pre-clip gradient norm per member [P]."""
        P = self.P
        g = torch.cat([p.grad.reshape(P, -1) for p in self.params], dim=1)
        norm = torch.linalg.vector_norm(g, dim=1)
        coef = (self.max_grad_norm / (norm + CLIP_EPS)).clamp(max=1.0)
        g.mul_(coef.unsqueeze(1))
        self.step_count.add_(1)
        self.exp_avg.lerp_(g, 1 - self.beta1)
        self.exp_avg_sq.mul_(self.beta2).addcmul_(g, g, value=1 - self.beta2)
        bc1 = 1 - torch.pow(self.beta1, self.step_count)
        bc2_sqrt = torch.sqrt(1 - torch.pow(self.beta2, self.step_count))
        denom = (self.exp_avg_sq.sqrt() / bc2_sqrt).add_(self.eps)
        update = (self.exp_avg / denom) * (-self.lr / bc1)
        torch._foreach_add_([p.view(P, -1) for p in self.params], list(update.split(self.sizes, dim=1)))
        return norm

    def state_tensors(self) -> dict[str, Tensor]:
        return {"exp_avg": self.exp_avg, "exp_avg_sq": self.exp_avg_sq, "step": self.step_count}
