"""All parameters of a population module as views of one member-major matrix.

Every parameter has a leading member axis [P, ...], so member p's parameters are row p of one
matrix `data` [P, total], and their gradients row p of `grad` [P, total]. Parameters become
views into `data`; `gather_grads` writes the gradients that `torch.autograd.grad` returns into
`grad` with one concatenation. That turns whole-model work into single kernels: the
per-member gradient norm is one row-wise reduction, the Adam step one fused update, and the
target-network update one lerp. Each parameter carries `grad_slot`, its columns of `grad` in its
own shape: a kernel may write the parameter's gradient there itself (the Triton layer kernels,
tune_gems.ops.triton_layers), and `gather_grads` then leaves that slot as it is.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class FlatParameters:
    def __init__(self, module: nn.Module, population: int, with_grad: bool = True):
        P = population
        slots: list[tuple[nn.Module, str, Tensor]] = []
        for mod in module.modules():
            for name, p in mod.named_parameters(recurse=False):
                if p.shape[0] != P:
                    raise ValueError(f"parameter {name} has leading size {p.shape[0]}, not the population {P}")
                slots.append((mod, name, p))
        self.population = P
        self.sizes = [p.numel() // P for _, _, p in slots]
        with torch.no_grad():
            self.data = torch.cat([p.detach().reshape(P, -1) for _, _, p in slots], dim=1).contiguous()
        self.grad = torch.zeros_like(self.data) if with_grad else None
        self.params: list[nn.Parameter] = []
        self._columns: dict[int, slice] = {}  # id(parameter) -> its columns of `data`
        offset = 0
        for (mod, name, p), n in zip(slots, self.sizes):
            param = nn.Parameter(self.data[:, offset : offset + n].view(p.shape), requires_grad=with_grad)
            if self.grad is not None:
                param.grad_slot = self.grad[:, offset : offset + n].view(p.shape)
            setattr(mod, name, param)  # nn.Module registers a Parameter in place of the old one
            self.params.append(param)
            self._columns[id(param)] = slice(offset, offset + n)
            offset += n
        self._zeros = [torch.zeros(P, n, device=self.data.device) for n in self.sizes]

    def columns_of(self, param: Tensor) -> slice:
        """The columns of `data` holding one parameter."""
        return self._columns[id(param)]

    def columns(self, module: nn.Module) -> slice:
        """The columns of `data` holding a submodule's parameters (one contiguous range: a
        module's parameters are laid out together, in `module.modules()` order)."""
        spans = sorted((self._columns[id(p)].start, self._columns[id(p)].stop) for p in module.parameters())
        if not spans:
            return slice(0, 0)
        if any(a[1] != b[0] for a, b in zip(spans, spans[1:])):
            raise ValueError("the module's parameters are not contiguous in the flat matrix")
        return slice(spans[0][0], spans[-1][1])

    def gather_grads(self, grads: tuple[Tensor | None, ...]) -> None:
        """Write per-parameter gradients (None: no gradient reached it) into `grad`: one
        concatenation, or, when some gradients already are their slots (written there by a
        kernel), a copy of each of the others into its slot (zeros for None)."""
        P = self.population
        in_place = [g is not None and _is_view_of(g, p.grad_slot) for g, p in zip(grads, self.params)]
        if not any(in_place):
            parts = [g.reshape(P, -1) if g is not None else z for g, z in zip(grads, self._zeros)]
            torch.cat(parts, dim=1, out=self.grad)
            return
        for g, p, z, done in zip(grads, self.params, self._zeros, in_place):
            if not done:
                p.grad_slot.copy_(g if g is not None else z.view(p.shape))


def _is_view_of(t: Tensor, slot: Tensor) -> bool:
    """Whether `t` is `slot` itself (the same memory, shape and strides)."""
    return t.data_ptr() == slot.data_ptr() and t.shape == slot.shape and t.stride() == slot.stride()

