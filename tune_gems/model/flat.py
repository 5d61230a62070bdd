"""All parameters of a population module as views of one member-major matrix.

Every parameter has a leading member axis [P, ...], so member p's parameters are row p of one
matrix `data` [P, total], and their gradients row p of `grad` [P, total]. Parameters and their
`.grad` become views into those two matrices (autograd accumulates into an existing `.grad` in
place), which turns whole-model work into single kernels: the per-member gradient norm is one
row-wise reduction, the Adam step one fused update, the target-network update one lerp, and
zeroing the gradients one memset-free fill.
"""

from __future__ import annotations

import warnings

import torch
from torch import Tensor, nn


# Parameters and gradients are strided views of the two matrices by design; autograd's
# advisory warning about that layout would otherwise print once per process.
LAYOUT_WARNING = "grad and param do not obey the gradient layout contract"


def silence_layout_warning() -> None:
    warnings.filterwarnings("ignore", message=LAYOUT_WARNING)


class FlatParameters:
    def __init__(self, module: nn.Module, population: int, with_grad: bool = True):
        P = population
        slots: list[tuple[nn.Module, str, Tensor]] = []
        for mod in module.modules():
            for name, p in mod._parameters.items():
                if p is not None:
                    if p.shape[0] != P:
                        raise ValueError(f"parameter {name} has leading size {p.shape[0]}, not the population {P}")
                    slots.append((mod, name, p))
        silence_layout_warning()
        self.population = P
        self.sizes = [p.numel() // P for _, _, p in slots]
        self.names = [name for _, name, _ in slots]
        with torch.no_grad():
            self.data = torch.cat([p.detach().reshape(P, -1) for _, _, p in slots], dim=1).contiguous()
        self.grad = torch.zeros_like(self.data) if with_grad else None
        offset = 0
        for (mod, name, p), n in zip(slots, self.sizes):
            param = nn.Parameter(self.data[:, offset : offset + n].view(p.shape), requires_grad=with_grad)
            if with_grad:
                param.grad = self.grad[:, offset : offset + n].view(p.shape)
            mod._parameters[name] = param
            offset += n

    @property
    def total(self) -> int:
        return self.data.shape[1]

    def zero_grad(self) -> None:
        self.grad.zero_()
