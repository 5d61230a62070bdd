"""Per-member selections skipped when every member chooses alike.

Arms select each member's side with `torch.where(mask, a, b)`; when every member has the same switch
(every single-arm run), the mask is known on the host before capture and `select` returns that side
itself: the same bits, one elementwise pass (and its backward) fewer. The side not chosen gets no
gradient instead of an exact zero, which changes no sum (the arms invariant,
tests/test_arms_learner.py)."""

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
    """torch.where(mask, a, b), or the chosen side itself when `common` says every member
    chooses alike (a float `b` is then broadcast to a's shape)."""
    if common is True:
        return a
    if common is False:
        return b if isinstance(b, Tensor) else torch.full_like(a, b)
    return torch.where(mask, a, b)
