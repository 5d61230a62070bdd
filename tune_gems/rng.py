"""Per-member randomness that lives inside a CUDA graph.

Each member p has its own seed. Draws are a pure function of (member key, stream, counter,
element index) through an integer hash, so
- members never share or mix randomness (member p's draws ignore every other member's seed);
- the only state is one int64 counter tensor on the device, advanced in place once per
  iteration: a captured graph draws fresh numbers on every replay with no host involvement;
- CPU and CUDA produce the same bits, and checkpoints hold the whole RNG state in one number.

The hash is a 32-bit avalanche mix computed in int64 with multipliers below 2^31, so no product
ever overflows int64 (signed overflow would not be portable).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

_MASK32 = 0xFFFFFFFF
_GOLDEN = 0x9E3779B9
_MUL_A = 0x21F0AAAD
_MUL_B = 0x735A2D97
_U24 = 1.0 / (1 << 24)


def _mix32(x: Tensor) -> Tensor:
    """A 32-bit avalanche hash of int64 values in [0, 2^32)."""
    x = x ^ (x >> 16)
    x = (x * _MUL_A) & _MASK32
    x = x ^ (x >> 15)
    x = (x * _MUL_B) & _MASK32
    return x ^ (x >> 15)


def member_seeds(seed: int, population: int) -> list[int]:
    """The seed of each member of a run: distinct, 31-bit, a pure function of (seed, member).

    Two runs with the same `seed` give their members the same seeds, so members can be paired
    across configurations; two different seeds give unrelated member seeds.
    """
    base = torch.tensor([seed & _MASK32], dtype=torch.int64)
    hi = torch.tensor([(seed >> 32) & _MASK32], dtype=torch.int64)
    idx = torch.arange(population, dtype=torch.int64)
    h = _mix32((_mix32(base ^ _mix32(hi + _GOLDEN)) + idx * _GOLDEN) & _MASK32)
    return [int(v) & 0x7FFFFFFF for v in h.tolist()]


class CounterRNG:
    """Counter-based random numbers with a leading population axis.

    `uniform(stream, shape)` returns [P, *shape] floats in (0, 1) with 24 random bits;
    `normal` uses Box-Muller on two uniforms. Distinct `stream` ids give independent numbers
    within one iteration; `advance()` moves every stream to fresh numbers.
    """

    def __init__(self, seeds: list[int], device: torch.device | str):
        keys = torch.tensor([s & _MASK32 for s in seeds], dtype=torch.int64)
        self.keys = _mix32(keys).to(device)
        self.counter = torch.zeros((), dtype=torch.int64, device=device)

    @property
    def population(self) -> int:
        return self.keys.shape[0]

    def advance(self) -> None:
        self.counter.add_(1)

    def _bits(self, stream: int, n: int) -> Tensor:
        dev = self.keys.device
        ctr = self.counter & _MASK32
        k = _mix32((self.keys + stream * _GOLDEN) & _MASK32)  # [P]
        k = _mix32(k ^ _mix32((ctr + _GOLDEN) & _MASK32))  # [P]
        idx = torch.arange(n, dtype=torch.int64, device=dev)
        return _mix32((k.unsqueeze(1) ^ _mix32(idx)) & _MASK32)  # [P, n]

    def uniform(self, stream: int, shape: tuple[int, ...]) -> Tensor:
        n = math.prod(shape)
        bits = self._bits(stream, n) >> 8
        u = bits.to(torch.float32) * _U24 + 0.5 * _U24
        return u.view(self.population, *shape)

    def normal(self, stream: int, shape: tuple[int, ...]) -> Tensor:
        n = math.prod(shape)
        u = self.uniform(stream, (2, n))
        r = torch.sqrt(-2.0 * torch.log(u[:, 0]))
        return (r * torch.cos((2.0 * math.pi) * u[:, 1])).view(self.population, *shape)

    def integers(self, stream: int, shape: tuple[int, ...], high: Tensor | int) -> Tensor:
        """Uniform integers in [0, high) per member; `high` may be a device tensor ([P] or scalar)."""
        u = self.uniform(stream, shape)
        if isinstance(high, Tensor):
            h = high.to(u.dtype).view(-1, *([1] * len(shape)))
            hi_long = high.view(-1, *([1] * len(shape)))
        else:
            h, hi_long = float(high), high
        i = (u * h).to(torch.int64)
        return torch.minimum(i, hi_long - 1) if isinstance(high, Tensor) else i.clamp_max(high - 1)

    def state_dict(self) -> dict[str, Tensor]:
        return {"keys": self.keys, "counter": self.counter}
