"""Per-member randomness inside a CUDA graph: a draw is a pure function of (member key, stream,
counter, element) through an integer hash, so members never share randomness, one int64 counter is
the only state (fresh numbers each replay; one number in a checkpoint) and CPU and CUDA agree. The
32-bit mix multiplies in int64 below 2^31, so nothing overflows."""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import Tensor

MASK32 = 0xFFFFFFFF
GOLDEN = 0x9E3779B9
MUL_A = 0x21F0AAAD
MUL_B = 0x735A2D97
U24 = 1.0 / (1 << 24)


def _mix32(x: Tensor) -> Tensor:
    """A 32-bit avalanche hash of int64 values in [0, 2^32)."""
    x = x ^ (x >> 16)
    x = (x * MUL_A) & MASK32
    x = x ^ (x >> 15)
    x = (x * MUL_B) & MASK32
    return x ^ (x >> 15)


def member_seeds(seed: int, population: int, first: int = 0) -> list[int]:
    """Distinct 31-bit seeds, each a pure function of (seed, seed index), so members pair across
    configurations and a seed block gets the seeds a full run gives them:
    `member_seeds(seed, n, first) == member_seeds(seed, first + n)[first:]`."""
    base = torch.tensor([seed & MASK32], dtype=torch.int64)
    hi = torch.tensor([(seed >> 32) & MASK32], dtype=torch.int64)
    idx = torch.arange(first, first + population, dtype=torch.int64)
    h = _mix32((_mix32(base ^ _mix32(hi + GOLDEN)) + idx * GOLDEN) & MASK32)
    return [int(v) & 0x7FFFFFFF for v in h.tolist()]


class CounterRNG:
    """Counter-based random numbers with a leading population axis: `uniform` has 24 random bits (normals:
    `box_muller`); distinct streams are independent, `advance()` moves all to fresh numbers."""

    def __init__(self, seeds: list[int], device: torch.device | str):
        keys = torch.tensor([s & MASK32 for s in seeds], dtype=torch.int64)
        self.keys = _mix32(keys).to(device)
        self.counter = torch.zeros((), dtype=torch.int64, device=device)

    def advance(self) -> None:
        self.counter.add_(1)

    def _bits(self, stream: int, index_hash: Tensor) -> Tensor:
        ctr = self.counter & MASK32
        k = _mix32((self.keys + stream * GOLDEN) & MASK32) if stream else self.keys  # [P]
        k = _mix32(k ^ _mix32((ctr + GOLDEN) & MASK32))  # [P]
        return _mix32((k.unsqueeze(1) ^ index_hash) & MASK32)  # [P, n]

    @staticmethod
    def _to_unit(bits: Tensor) -> Tensor:
        return (bits >> 8).to(torch.float32) * U24 + 0.5 * U24

    def uniform(self, stream: int, shape: tuple[int, ...]) -> Tensor:
        idx = torch.arange(math.prod(shape), dtype=torch.int64, device=self.keys.device)
        return self._to_unit(self._bits(stream, _mix32(idx))).view(self.keys.shape[0], *shape)

    def draw(self, plan: "DrawPlan") -> "Draws":
        """All of one iteration's random numbers in one block [P, plan.total] (stream 0): a few dozen small
        kernels per iteration (one launch with the plan's kernel) instead of a few dozen per consumer."""
        if plan.kernel is not None:
            return Draws(plan, plan.kernel(self.keys, self.counter, plan.index_hash))
        return Draws(plan, self._to_unit(self._bits(0, plan.index_hash)))


def to_integers(u: Tensor, high: Tensor | int) -> Tensor:
    """Uniforms [P, ...] in (0,1) -> integers in [0, high); `high` an int or a device tensor
    (0-dim, or [P]) so that the bound can change inside a captured graph."""
    if isinstance(high, Tensor):
        shape = (-1, *([1] * (u.dim() - 1)))
        i = (u * high.to(u.dtype).view(shape)).to(torch.int64)
        return torch.minimum(i, high.view(shape) - 1)
    return (u * float(high)).to(torch.int64).clamp_max(high - 1)


def box_muller(u: Tensor) -> Tensor:
    """Uniforms [P, 2n] -> standard normals [P, n]."""
    n = u.shape[-1] // 2
    r = torch.sqrt(-2.0 * torch.log(u[..., :n]))
    return r * torch.cos((2.0 * math.pi) * u[..., n:])


class DrawPlan:
    """The layout of one iteration's random numbers per member: named slices of one block of
    uniforms. Every consumer owns its own slice, so consumers stay independent."""

    def __init__(self, sizes: dict[str, int], device: torch.device | str, kernel: Callable[..., Tensor] | None = None):
        """`kernel(keys, counter, index_hash)`: the backend's launch of `CounterRNG.draw`'s block with its bits
        (None: torch's ops)."""
        self.kernel = kernel
        self.slices: dict[str, slice] = {}
        offset = 0
        for name, n in sizes.items():
            self.slices[name] = slice(offset, offset + n)
            offset += n
        self.total = offset
        self.index_hash = _mix32(torch.arange(max(offset, 1), dtype=torch.int64, device=device))


class Draws:
    """One iteration's block of uniforms [P, total], read by name."""

    def __init__(self, plan: DrawPlan, block: Tensor):
        self.plan, self.block = plan, block

    def uniform(self, name: str) -> Tensor:
        return self.block[:, self.plan.slices[name]]

    def normal(self, name: str) -> Tensor:
        """Standard normals [P, n/2] from the slice's n uniforms."""
        return box_muller(self.uniform(name))

    def integers(self, name: str, high: Tensor | int) -> Tensor:
        return to_integers(self.uniform(name), high)
