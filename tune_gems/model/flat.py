"""All parameters of a population module as views of one member-major matrix: member p is row p
of `data` and `grad`, so norm, Adam step and target update are single kernels. A kernel may write
its gradient into `grad_slot` itself; `align` gives 16-byte-aligned columns."""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor, nn


def column_layout(sizes: Sequence[int], align: int = 1) -> tuple[list[int], int]:
    """(each parameter's first column, the row length) of parameters of these per-member sizes
    laid out in order, each starting at a multiple of `align` columns."""
    offsets, end = [], 0
    for n in sizes:
        offsets.append(_round_up(end, align))
        end = offsets[-1] + n
    return offsets, _round_up(end, align)


def _round_up(n: int, align: int) -> int:
    return -(-n // align) * align


class FlatParameters:
    def __init__(self, module: nn.Module, population: int, with_grad: bool = True, align: int = 1, transposed: bool = False):
        P = population
        slots: list[tuple[nn.Module, str, Tensor]] = []
        for mod in module.modules():
            for name, p in mod.named_parameters(recurse=False):
                if p.shape[0] != P:
                    raise ValueError(f"parameter {name} has leading size {p.shape[0]}, not the population {P}")
                slots.append((mod, name, p))
        self.population, self.align = P, align
        self.sizes = [p.numel() // P for _, _, p in slots]
        self.shapes = [p.shape for _, _, p in slots]
        self.flipped = [transposed and name in getattr(mod, "matrices", ()) for mod, name, _ in slots]
        self.offsets, width = column_layout(self.sizes, align)
        self.padded = width != sum(self.sizes)
        self.plain = not self.padded and not any(self.flipped)  # the parameters side by side as they are
        with torch.no_grad():
            self.data = self.pack(torch.cat([p.detach().reshape(P, -1) for _, _, p in slots], dim=1))
        self.grad = torch.zeros_like(self.data) if with_grad else None
        self.params: list[nn.Parameter] = []
        self._columns: dict[int, slice] = {}  # id(parameter) -> its columns of `data`
        for (mod, name, p), n, offset, flip in zip(slots, self.sizes, self.offsets, self.flipped):
            param = nn.Parameter(_view(self.data[:, offset : offset + n], p.shape, flip), requires_grad=with_grad)
            if self.grad is not None:
                param.grad_slot = _view(self.grad[:, offset : offset + n], p.shape, flip)
            setattr(mod, name, param)  # nn.Module registers a Parameter in place of the old one
            self.params.append(param)
            self._columns[id(param)] = slice(offset, offset + n)
        self._zeros = [torch.zeros(P, n, device=self.data.device) for n in self.sizes]

    def pack(self, packed: Tensor) -> Tensor:
        """A [P, sum(sizes)] matrix of the parameters side by side as they are (the plain layout:
        no gaps, nothing transposed) in this layout (a fresh matrix; the same one when plain)."""
        if self.plain:
            return packed.contiguous()
        out = packed.new_zeros(packed.shape[0], column_layout(self.sizes, self.align)[1])
        start = 0
        for n, offset, shape, flip in zip(self.sizes, self.offsets, self.shapes, self.flipped):
            _view(out[:, offset : offset + n], shape, flip).copy_(packed[:, start : start + n].view(shape))
            start += n
        return out

    def unpack(self, matrix: Tensor) -> Tensor:
        """`pack`'s inverse: a [P, columns] matrix of this layout in the plain one."""
        if self.plain:
            return matrix
        P = matrix.shape[0]
        return torch.cat([_view(matrix[:, o : o + n], shape, flip).reshape(P, n)
                          for n, o, shape, flip in zip(self.sizes, self.offsets, self.shapes, self.flipped)], dim=1)  # fmt: skip

    def columns_of(self, param: Tensor) -> slice:
        """The columns of `data` holding one parameter."""
        return self._columns[id(param)]

    def columns(self, module: nn.Module) -> slice:
        """A submodule's columns of `data`, with the alignment gaps after them (its parameters are laid
        out together, in `module.modules()` order)."""
        spans = sorted((c.start, _round_up(c.stop, self.align)) for c in (self._columns[id(p)] for p in module.parameters()))
        if not spans:
            return slice(0, 0)
        if any(a[1] != b[0] for a, b in zip(spans, spans[1:])):
            raise ValueError("the module's parameters are not contiguous in the flat matrix")
        return slice(spans[0][0], spans[-1][1])

    def gather_grads(self, grads: tuple[Tensor | None, ...]) -> None:
        """Write per-parameter gradients (None: zeros) into `grad`, leaving those already in their slots
        (a kernel wrote them)."""
        P = self.population
        in_place = [g is not None and _is_view_of(g, p.grad_slot) for g, p in zip(grads, self.params)]
        if not any(in_place) and self.plain:
            parts = [g.reshape(P, -1) if g is not None else z for g, z in zip(grads, self._zeros)]
            torch.cat(parts, dim=1, out=self.grad)
            return
        for g, p, z, done in zip(grads, self.params, self._zeros, in_place):
            if not done:
                p.grad_slot.copy_(g if g is not None else z.view(p.shape))


def _view(cols: Tensor, shape: torch.Size, flip: bool) -> Tensor:
    """A [P, n] block of columns as a parameter of `shape`, stored as is or, `flip`, with its
    last two axes swapped (a transposed view)."""
    if not flip:
        return cols.view(shape)
    return cols.view(*shape[:-2], shape[-1], shape[-2]).transpose(-1, -2)


def _is_view_of(t: Tensor, slot: Tensor) -> bool:
    """Whether `t` is `slot` itself (the same memory, shape and strides)."""
    return t.data_ptr() == slot.data_ptr() and t.shape == slot.shape and t.stride() == slot.stride()

