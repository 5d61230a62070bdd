"""Adam for population-batched parameters with per-member clipping: on the member-major matrix the norm is one row
reduction and the update torch's `_fused_adam_` (same bits as `fused=True`; the private op because the public one's
tensor `lr` must be 0-dim), capturable. One fused call per learning-rate block of rows, so a block's bits are a run of
it alone; `clip_adam` instead steps each row alone."""

from __future__ import annotations

from typing import Callable, Sequence

import torch
from torch import Tensor

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
    def __init__(self, flat: FlatParameters, lr: float | Sequence[float], eps: float, max_grad_norm: float,
                 betas: tuple[float, float] = (0.9, 0.999), clip_groups: list[slice] | None = None,
                 blocks: Sequence[slice] | None = None, clip_adam: Callable | None = None):
        """`lr`: one rate or one per member; `blocks` the row ranges every reduction and call sees apart.
        `clip_groups`: column ranges clipped on their own (a measured gem head must not move the shared
        network's clip). `clip_adam`: a factory of the fused step."""
        self.flat = flat
        P = flat.population
        lrs = [float(lr)] * P if isinstance(lr, (int, float)) else [float(x) for x in lr]
        if len(lrs) != P:
            raise ValueError(f"{len(lrs)} learning rates for a population of {P}")
        self.blocks = member_blocks(lrs, blocks)
        width = flat.data.shape[1]
        self.clip_groups = [slice(*c.indices(width)[:2]) for c in clip_groups or [slice(None)]]
        self.eps, self.max_grad_norm = eps, max_grad_norm
        self.beta1, self.beta2 = betas
        self.exp_avg = torch.zeros_like(flat.data)
        self.exp_avg_sq = torch.zeros_like(flat.data)
        self.step_count = torch.zeros((), device=flat.data.device)
        self.kernel = clip_adam(flat.data, lrs, self.clip_groups, betas, eps, max_grad_norm, CLIP_EPS) if clip_adam else None
        self.frozen: tuple[slice, ...] = ()
        self.kept = [slice(0, width)]  # the columns Adam updates
        self._calls = self._fused_calls()

    def _fused_calls(self) -> list:
        """Per distinct lr, the views of (params, grads, avgs, avg_sqs), made once; contiguous row blocks or
        each row's runs of kept columns."""
        by_lr: dict[float, list[slice]] = {}
        for rows, rate in self.blocks if self.kernel is None else ():
            by_lr.setdefault(rate, []).append(rows)
        mats = (self.flat.data, self.flat.grad, self.exp_avg, self.exp_avg_sq)
        if not self.frozen:
            return [(rate, *([m[rows] for rows in rows_list] for m in mats)) for rate, rows_list in by_lr.items()]
        members = {rate: [r for rows in rows_list for r in range(rows.start, rows.stop)] for rate, rows_list in by_lr.items()}
        return [(rate, *([m[r, cols] for r in rs for cols in self.kept] for m in mats)) for rate, rs in members.items()]

    def freeze_columns(self, frozen: Sequence[slice]) -> None:
        """Leave out of Adam the columns no gradient reaches (same bits, less traffic). CUDA or `clip_adam` only: the
        CPU fused kernel's vector body and scalar tail round differently, so shorter views would change bits."""
        if not self.flat.data.is_cuda and self.kernel is None:
            return
        frozen = tuple(c for c in frozen if c.stop > c.start)
        if frozen != self.frozen:
            self.frozen = frozen
            self.kept, start = [], 0
            for cols in sorted(frozen, key=lambda c: c.start):
                if cols.start > start:
                    self.kept.append(slice(start, cols.start))
                start = max(start, cols.stop)
            if start < self.flat.data.shape[1]:
                self.kept.append(slice(start, self.flat.data.shape[1]))
            self._calls = self._fused_calls()

    def step(self) -> Tensor:
        """Clip each member's gradient to max_grad_norm (per clip group), take an Adam step;
        returns the pre-clip gradient norm per member [P] of the first group."""
        return self.step_groups()[0]

    @torch.no_grad()
    def step_groups(self) -> Tensor:
        """`step`, returning the pre-clip gradient norms of every clip group [groups, P]."""
        p, g = self.flat.data, self.flat.grad
        if self.kernel is not None:
            self.step_count.add_(1)
            return self.kernel(p, g, self.exp_avg, self.exp_avg_sq, self.step_count, self.kept)
        norms = []
        for cols in self.clip_groups:
            parts = []
            for rows, _ in self.blocks:
                part = g[rows, cols]
                norm = torch.linalg.vector_norm(part, dim=1)
                coef = (self.max_grad_norm / (norm + CLIP_EPS)).clamp(max=1.0)
                part.mul_(coef.unsqueeze(1))
                parts.append(norm)
            norms.append(torch.cat(parts) if len(parts) > 1 else parts[0])
        self.step_count.add_(1)
        for rate, params, grads, avgs, avg_sqs in self._calls:
            torch._fused_adam_(
                params, grads, avgs, avg_sqs, [], [self.step_count] * len(params),
                lr=rate, beta1=self.beta1, beta2=self.beta2, weight_decay=0.0, eps=self.eps, amsgrad=False, maximize=False,
            )  # fmt: skip
        return torch.stack(norms)

    def state_tensors(self) -> dict[str, Tensor]:
        return {"exp_avg": self.exp_avg, "exp_avg_sq": self.exp_avg_sq, "step": self.step_count}
