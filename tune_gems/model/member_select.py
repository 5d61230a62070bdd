"""Per-member selections skipped when every member chooses alike: the mask is then a host fact and
`select` returns that side itself (the same bits, one elementwise pass fewer; an unchosen side gets
no gradient instead of an exact zero: tests/test_arms_learner.py)."""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

Uniform = bool | None
"""True: every member's switch is on; False: every member's is off; None: they differ."""


def uniform(flags: Sequence[bool]) -> Uniform:
    flags = [bool(f) for f in flags]
    return True if all(flags) else False if not any(flags) else None


def select(common: Uniform, mask: Tensor, a: Tensor, b: Tensor | float) -> Tensor:
    """torch.where(mask, a, b), or the chosen side itself when `common` says all agree."""
    if common is True:
        return a
    if common is False:
        return b if isinstance(b, Tensor) else torch.full_like(a, b)
    return torch.where(mask, a, b)
