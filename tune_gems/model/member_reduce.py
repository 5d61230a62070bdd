"""Per-member reductions whose bits do not depend on the population size P.

A member's numbers must not depend on how many other members share its tensors (the arms and
seed-block invariants, docs/design.md "The population axis"). Elementwise ops never do; torch's
CUDA reductions do: the reduction kernel (aten/src/ATen/native/cuda/Reduce.cuh,
`setReduceConfigCUDA`) picks the lanes that share one output from the *number of outputs* (a
row of n > 32 elements is summed by up to 512 lanes when there are few rows and by 32 when there
are 16 or more), and splits a long row across thread blocks according to how many blocks the
other outputs leave free. So `x.sum(dim=1)` over [P, n] rounds member 0 differently at P = 8 and
P = 48 (the spectral-norm sigma and its gradient, the gradient clip's norm, q_mean, the loss).

The fixed-order form here sums each row in stages of short chunks, a stage being one torch
reduction over the last, contiguous dim with at most `INNER_CHUNK` elements per output (or at
most `WIDE_CHUNK` when every row has at least `MIN_CHUNKS` chunks): with so few elements per
output, every lane count the heuristic can choose is the chunk's own power of two, a thread
holds at most four elements and nothing is split across warps or blocks, whatever the number of
outputs. The order of every addition is then fixed by the row length alone, so member p's sum is
the same bits at any P. A row whose length is not a whole number of chunks has its tail summed
by the same rule and appended to the stage's partial sums.

On the CPU every function is torch's own reduction, unchanged: there the reduction order does
not depend on the number of rows (tests/test_arms_learner.py, one batched run against each arm
alone; tests/test_member_tiles.py), and the CPU bits stay those of every earlier run. `benchmarks/gemm_batch_probe.py`
checks both forms on the GPU across P, tests/gpu/test_member_tiles_gpu.py the learner.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import Tensor

INNER_CHUNK = 32
"""Most elements per output of a fixed-order stage: with at most a warp's width, torch gives each
output exactly `last_pow2(chunk)` lanes whatever the number of outputs."""
WIDE_CHUNK = 128
"""Most elements per output of a stage whose rows have at least MIN_CHUNKS chunks: with 16 or
more outputs torch gives each output 32 lanes; up to 128 elements are not vectorised."""
MIN_CHUNKS = 16
"""Outputs per row above which a stage may use WIDE_CHUNK (torch's block height caps at 16)."""


def fixed_order(x: Tensor) -> bool:
    """Whether torch's own reduction of `x` could depend on the number of rows: on CUDA."""
    return x.is_cuda


def _dims(x: Tensor, dims: int | Sequence[int]) -> tuple[int, ...]:
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    return tuple(sorted(d % x.dim() for d in dims))


def _chunk(n: int) -> int:
    return WIDE_CHUNK if n >= WIDE_CHUNK * MIN_CHUNKS else INNER_CHUNK


def _stage(rows: Tensor) -> Tensor:
    """One fixed-order stage over the last dim of a 2-D [R, n] tensor: [R, ceil(n / chunk)]
    partial sums (the last over the row's tail, summed by `_sum_rows` itself)."""
    n = rows.shape[1]
    chunk = _chunk(n)
    whole = n // chunk * chunk
    head = rows[:, :whole].reshape(rows.shape[0], whole // chunk, chunk).sum(-1)
    if whole == n:
        return head
    return torch.cat([head, _sum_rows(rows[:, whole:]).unsqueeze(1)], dim=1)


def _squares_stage(rows: Tensor) -> Tensor:
    """The first stage of a fixed-order sum of squares: each chunk's Euclidean norm by torch
    (the square fused into the one read of x, under the same per-output rule as a sum),
    squared, [R, ceil(n / chunk)] (the tail's squares summed by `_sum_rows`). Not the bits of
    summing x * x, but a function of the row alone."""
    n = rows.shape[1]
    chunk = _chunk(n)
    whole = n // chunk * chunk
    head = torch.linalg.vector_norm(rows[:, :whole].reshape(rows.shape[0], whole // chunk, chunk), dim=-1).square()
    if whole == n:
        return head
    tail = rows[:, whole:]
    return torch.cat([head, _sum_rows(tail * tail).unsqueeze(1)], dim=1)


def _sum_rows(rows: Tensor) -> Tensor:
    """Fixed-order sum of each row of a 2-D [R, n] tensor -> [R]."""
    while rows.shape[1] > INNER_CHUNK:
        rows = _stage(rows)
    return rows.sum(-1)  # at most INNER_CHUNK elements per output (none: zeros)


def _as_rows(x: Tensor, dims: tuple[int, ...]) -> tuple[Tensor, list[int]]:
    """x as a 2-D [rows, n] tensor whose rows are the reduced dims (moved last when they are not
    the trailing ones: a copy), its last dim contiguous; and the kept dims' sizes."""
    keep = [d for d in range(x.dim()) if d not in dims]
    moved = x if keep + list(dims) == list(range(x.dim())) else x.permute(*keep, *dims)
    lead = [x.shape[d] for d in keep]
    rows = moved.reshape(math.prod(lead), math.prod(x.shape[d] for d in dims))
    return (rows if rows.stride(-1) == 1 else rows.contiguous()), lead


def _restored(out: Tensor, lead: list[int], dims: tuple[int, ...], keepdim: bool) -> Tensor:
    out = out.view(lead)
    if keepdim:
        for d in dims:
            out = out.unsqueeze(d)
    return out


def fixed_order_sum(x: Tensor, dims: int | Sequence[int], keepdim: bool = False) -> Tensor:
    """The fixed-order sum of `x` over `dims` (on any device: the GPU form's own arithmetic)."""
    dims = _dims(x, dims)
    rows, lead = _as_rows(x, dims)
    return _restored(_sum_rows(rows), lead, dims, keepdim)


def fixed_order_norm(x: Tensor, dims: int | Sequence[int], keepdim: bool = False) -> Tensor:
    """The Euclidean norm of `x` over `dims` in a fixed order (on any device): one read of x,
    each chunk's norm squared, then the fixed-order sum of those and its square root."""
    dims = _dims(x, dims)
    rows, lead = _as_rows(x, dims)
    squares = _squares_stage(rows) if rows.shape[1] > INNER_CHUNK else rows * rows
    return _restored(_sum_rows(squares).sqrt(), lead, dims, keepdim)


def member_sum(x: Tensor, dims: int | Sequence[int], keepdim: bool = False) -> Tensor:
    """x.sum(dims) on the CPU; the fixed-order sum on CUDA (its bits do not depend on P)."""
    if not fixed_order(x):
        return x.sum(dim=_dims(x, dims), keepdim=keepdim)
    return fixed_order_sum(x, dims, keepdim)


def member_mean(x: Tensor, dims: int | Sequence[int], keepdim: bool = False) -> Tensor:
    """x.mean(dims) on the CPU; the fixed-order sum over the count on CUDA."""
    dims = _dims(x, dims)
    if not fixed_order(x):
        return x.mean(dim=dims, keepdim=keepdim)
    count = 1
    for d in dims:
        count *= x.shape[d]
    return fixed_order_sum(x, dims, keepdim) / count


def member_norm(x: Tensor, dims: int | Sequence[int] = -1, keepdim: bool = False) -> Tensor:
    """The Euclidean norm over `dims`: torch.linalg.vector_norm on the CPU; `fixed_order_norm`
    on CUDA."""
    dims = _dims(x, dims)
    if not fixed_order(x):
        return torch.linalg.vector_norm(x, dim=dims, keepdim=keepdim)
    return fixed_order_norm(x, dims, keepdim)


class _ExpandTo(torch.autograd.Function):
    """`t.expand(shape)` whose backward sums the gradient back to t's shape with `member_sum`
    (autograd's own reduction of a broadcast gradient is torch's sum, P-dependent on CUDA)."""

    @staticmethod
    def forward(ctx, t: Tensor, shape: tuple[int, ...]) -> Tensor:
        ctx.dims = tuple(d for d, (a, b) in enumerate(zip(t.shape, shape)) if a == 1 and b != 1)
        ctx.shape = t.shape
        return t.expand(shape)

    @staticmethod
    def backward(ctx, grad: Tensor):
        if not ctx.dims:
            return grad, None
        if not fixed_order(grad):
            return grad.sum_to_size(ctx.shape), None  # what autograd's broadcast reduction calls
        return fixed_order_sum(grad, ctx.dims, keepdim=True), None


def expand_to(t: Tensor, shape: Sequence[int]) -> Tensor:
    """`t` broadcast to `shape` (same number of dims; its size-1 dims expanded) for an
    elementwise op, so that the op itself reduces nothing in its backward: the gradient of the
    broadcast dims is summed here, with `member_sum`. The forward values are t's, as a view."""
    shape = tuple(shape)
    if t.dim() != len(shape):
        raise ValueError(f"expand_to keeps the number of dims: {tuple(t.shape)} -> {shape}")
    return _ExpandTo.apply(t, shape)
