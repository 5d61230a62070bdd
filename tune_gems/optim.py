"""Adam for population-batched parameters, with gradient clipping per member.

The parameters live in one member-major matrix [P, total] (tune_gems.model.flat), so the
per-member gradient norm is one row-wise reduction, the clipping one in-place scale, and the
Adam update one fused kernel (torch's `_fused_adam_`, the kernel behind
`torch.optim.Adam(fused=True)`) over the whole matrix; every step is elementwise or row-wise,
so members never mix. The step counter is a device tensor: the whole step is capturable in a
CUDA graph, and it follows torch.optim.Adam's update rule (see tests).
"""

from __future__ import annotations

import torch
from torch import Tensor

from tune_gems.model.flat import FlatParameters

CLIP_EPS = 1e-6


class PopulationAdam:
    def __init__(
        self,
        flat: FlatParameters,
        lr: float,
        eps: float,
        max_grad_norm: float,
        betas: tuple[float, float] = (0.9, 0.999),
    ):
        self.flat = flat
        self.lr, self.eps, self.max_grad_norm = lr, eps, max_grad_norm
        self.beta1, self.beta2 = betas
        self.exp_avg = torch.zeros_like(flat.data)
        self.exp_avg_sq = torch.zeros_like(flat.data)
        self.step_count = torch.zeros((), device=flat.data.device)
        self._fused = hasattr(torch, "_fused_adam_")

    @torch.no_grad()
    def step(self) -> Tensor:
        """Clip each member's gradient to max_grad_norm, take an Adam step; returns the
        pre-clip gradient norm per member [P]."""
        p, g = self.flat.data, self.flat.grad
        norm = torch.linalg.vector_norm(g, dim=1)
        coef = (self.max_grad_norm / (norm + CLIP_EPS)).clamp(max=1.0)
        g.mul_(coef.unsqueeze(1))
        self.step_count.add_(1)
        if self._fused:
            torch._fused_adam_(
                [p], [g], [self.exp_avg], [self.exp_avg_sq], [], [self.step_count],
                lr=self.lr, beta1=self.beta1, beta2=self.beta2, weight_decay=0.0, eps=self.eps,
                amsgrad=False, maximize=False,
            )  # fmt: skip
        else:
            self._composite_step(p, g)
        return norm

    def _composite_step(self, p: Tensor, g: Tensor) -> None:
        """The same update in plain torch ops, for builds without the fused kernel."""
        self.exp_avg.lerp_(g, 1 - self.beta1)
        self.exp_avg_sq.mul_(self.beta2).addcmul_(g, g, value=1 - self.beta2)
        bc1 = 1 - torch.pow(self.beta1, self.step_count)
        bc2_sqrt = torch.sqrt(1 - torch.pow(self.beta2, self.step_count))
        denom = (self.exp_avg_sq.sqrt() / bc2_sqrt).add_(self.eps)
        p.add_((self.exp_avg / denom) * (-self.lr / bc1))

    def state_tensors(self) -> dict[str, Tensor]:
        return {"exp_avg": self.exp_avg, "exp_avg_sq": self.exp_avg_sq, "step": self.step_count}
