"""Adam for population-batched parameters, with gradient clipping per member.

The parameters live in one member-major matrix [P, total] (tune_gems.model.flat), so the
per-member gradient norm is one row-wise reduction, the clipping one in-place scale, and the
Adam update one fused kernel (torch's `_fused_adam_`, the kernel behind
`torch.optim.Adam(fused=True)`) over the whole matrix; every step is elementwise or row-wise,
so members never mix. The step counter is a device tensor: the whole step is capturable in a
CUDA graph, and it follows torch.optim.Adam's update rule (see tests).

Why the private `torch._fused_adam_` and not `torch.optim.Adam(fused=True, capturable=True)`:
the public optimizer runs the same kernel (same bits) but wants the parameters as leaf tensors
with `.grad` set and keeps its state in its own dict; one public step over the flat matrix is
possible, yet per-member learning rates (the arms issue) are not: a tensor `lr` must be 0-dim,
and one param group per member means P kernel launches per step. The private op is called with
the same arguments by the public optimizer in torch 2.11 and 2.13; `_composite_step` is the
plain-torch fallback when a build lacks it.

Per-member learning rates (arms): the members come in *blocks* of consecutive rows (an arm's
members, arm-major), one learning rate per block. The fused kernel takes one scalar lr per
call, so there is one call per distinct learning rate, over that rate's blocks (each block a
contiguous row range of the matrix, passed as its own tensor). The kernel is elementwise and
processes each tensor of its list on its own, so a block's bits are those of a run whose whole
matrix is that block: the members of an arm step exactly as in a run of that arm alone, and a
run with one learning rate makes a single call. Clipping norms are reduced
per block as well, so their reduction never sees a different number of rows than in a
single-arm run. A parameter whose gradient is exactly zero from the start keeps zero moments and
is left unchanged (a NoisyNet sigma of a member without NoisyNets; tests/test_optim.py).
"""

from __future__ import annotations

import torch
from torch import Tensor

from typing import Callable, Sequence

from tune_gems.model.flat import FlatParameters

CLIP_EPS = 1e-6


def member_blocks(lrs: Sequence[float], blocks: Sequence[slice] | None) -> list[tuple[slice, float]]:
    """(rows, lr) per block: `blocks` (consecutive row ranges covering every member, the lr
    constant within each), or the maximal runs of equal lr when None."""
    P = len(lrs)
    if blocks is None:
        starts = [0] + [p for p in range(1, P) if lrs[p] != lrs[p - 1]]
        blocks = [slice(a, b) for a, b in zip(starts, starts[1:] + [P])]
    out, expected = [], 0
    for blk in blocks:
        if blk.step not in (None, 1) or blk.start != expected or not (blk.start < blk.stop <= P):
            raise ValueError(f"member blocks must be consecutive row ranges covering 0..{P}: got {list(blocks)}")
        rates = set(lrs[blk])
        if len(rates) != 1:
            raise ValueError(f"members {blk.start}..{blk.stop - 1} form one block but have learning rates {sorted(rates)}")
        out.append((blk, rates.pop()))
        expected = blk.stop
    if expected != P:
        raise ValueError(f"member blocks must be consecutive row ranges covering 0..{P}: got {list(blocks)}")
    return out


class PopulationAdam:
    def __init__(
        self,
        flat: FlatParameters,
        lr: float | Sequence[float],
        eps: float,
        max_grad_norm: float,
        betas: tuple[float, float] = (0.9, 0.999),
        clip_groups: list[slice] | None = None,
        blocks: Sequence[slice] | None = None,
        row_norms: Callable[[Tensor], Tensor] | None = None,
    ):
        """`lr`: one learning rate, or one per member (P floats). `blocks`: the members in
        consecutive row ranges (an arm's members), the lr constant within each; every
        reduction and fused call sees one block at a time (default: the runs of equal lr).
        `clip_groups`: column ranges of the flat matrix clipped each on its own (the shared
        network, and each gem head, whose gradient must not change the shared network's clip
        in `measure` mode); default: one group, the whole matrix. `row_norms`: each member's
        gradient norm from its rows [R, n] (default torch.linalg.vector_norm over dim 1, whose
        reduction order depends on R on CUDA; the triton path passes a fixed-order kernel,
        tune_gems.ops.triton_layers.row_norms, so a member's clip does not depend on P)."""
        self.flat = flat
        P = flat.population
        lrs = [float(lr)] * P if isinstance(lr, (int, float)) else [float(x) for x in lr]
        if len(lrs) != P:
            raise ValueError(f"{len(lrs)} learning rates for a population of {P}")
        self.blocks = member_blocks(lrs, blocks)
        self.clip_groups = list(clip_groups) if clip_groups else [slice(None)]
        self.eps, self.max_grad_norm = eps, max_grad_norm
        self.row_norms = row_norms or (lambda rows: torch.linalg.vector_norm(rows, dim=1))
        self.lr = torch.tensor(lrs, device=flat.data.device)  # [P], for the composite step
        self.beta1, self.beta2 = betas
        self.exp_avg = torch.zeros_like(flat.data)
        self.exp_avg_sq = torch.zeros_like(flat.data)
        self.step_count = torch.zeros((), device=flat.data.device)
        self._fused = hasattr(torch, "_fused_adam_")
        self.frozen: tuple[slice, ...] = ()
        self._calls = self._fused_calls(())

    def _fused_calls(self, frozen: Sequence[slice]) -> list:
        """Per distinct lr: (rate, params, grads, avgs, avg_sqs) as lists of views, made once.
        Without frozen columns a view is a whole row block (one contiguous tensor); with them,
        each row's runs of updated columns (contiguous too, as the fused kernel needs)."""
        width = self.flat.data.shape[1]
        keep, start = [], 0
        for cols in sorted(frozen, key=lambda c: c.start):
            if cols.start > start:
                keep.append(slice(start, cols.start))
            start = max(start, cols.stop)
        if start < width:
            keep.append(slice(start, width))
        by_lr: dict[float, list[slice]] = {}
        for rows, rate in self.blocks:
            by_lr.setdefault(rate, []).append(rows)
        mats = (self.flat.data, self.flat.grad, self.exp_avg, self.exp_avg_sq)
        calls = []
        for rate, rows_list in by_lr.items():
            if not frozen:
                views = [[m[rows] for rows in rows_list] for m in mats]
            else:
                members = [r for rows in rows_list for r in range(rows.start, rows.stop)]
                views = [[m[r, cols] for r in members for cols in keep] for m in mats]
            calls.append((rate, *views))
        return calls

    def freeze_columns(self, frozen: Sequence[slice]) -> None:
        """Leave these columns out of every Adam update: parameters that no gradient reaches
        in this run (a gem head whose gem is off in every arm). Their gradient is zero, so Adam
        would leave them unchanged anyway (moments stay 0, the step is 0 / (0 + eps)); skipping
        them saves the memory traffic and the bits are the same (tests/gpu/test_optim_gpu.py).

        CUDA only: the CPU fused kernel runs a vectorised body and a scalar tail whose roundings
        differ, so splitting a row into shorter views would move elements between the two and
        change bits (and the arms invariant); on the CPU every row stays whole."""
        if not self.flat.data.is_cuda:
            return
        frozen = tuple(c for c in frozen if c.stop > c.start)
        if frozen != self.frozen:
            self.frozen = frozen
            self._calls = self._fused_calls(frozen)

    def step(self) -> Tensor:
        """Clip each member's gradient to max_grad_norm (per clip group), take an Adam step;
        returns the pre-clip gradient norm per member [P] of the first group."""
        return self.step_groups()[0]

    @torch.no_grad()
    def step_groups(self) -> Tensor:
        """`step`, returning the pre-clip gradient norms of every clip group [groups, P]."""
        p, g = self.flat.data, self.flat.grad
        norms = []
        for cols in self.clip_groups:
            parts = []
            for rows, _ in self.blocks:
                part = g[rows, cols]
                norm = self.row_norms(part)
                coef = (self.max_grad_norm / (norm + CLIP_EPS)).clamp(max=1.0)
                part.mul_(coef.unsqueeze(1))
                parts.append(norm)
            norms.append(torch.cat(parts) if len(parts) > 1 else parts[0])
        self.step_count.add_(1)
        if self._fused:
            for rate, params, grads, avgs, avg_sqs in self._calls:
                torch._fused_adam_(
                    params, grads, avgs, avg_sqs, [], [self.step_count] * len(params),
                    lr=rate, beta1=self.beta1, beta2=self.beta2, weight_decay=0.0, eps=self.eps,
                    amsgrad=False, maximize=False,
                )  # fmt: skip
        else:
            self._composite_step(p, g)
        return torch.stack(norms)

    def _composite_step(self, p: Tensor, g: Tensor) -> None:
        """The same update in plain torch ops, for builds without the fused kernel."""
        self.exp_avg.lerp_(g, 1 - self.beta1)
        self.exp_avg_sq.mul_(self.beta2).addcmul_(g, g, value=1 - self.beta2)
        bc1 = 1 - torch.pow(self.beta1, self.step_count)
        bc2_sqrt = torch.sqrt(1 - torch.pow(self.beta2, self.step_count))
        denom = (self.exp_avg_sq.sqrt() / bc2_sqrt).add_(self.eps)
        p.add_((self.exp_avg / denom) * (-self.lr.unsqueeze(1) / bc1))

    def state_tensors(self) -> dict[str, Tensor]:
        return {"exp_avg": self.exp_avg, "exp_avg_sq": self.exp_avg_sq, "step": self.step_count}
