"""Per-member selections that are skipped when every member chooses alike.

Arms put per-member switches on the population axis, and the iteration selects each member's
side with `torch.where(mask, a, b)` (tune_gems.model.layers, tune_gems.trainer.member_gems).
When every member of the run has the same switch (every single-arm run, and arms that agree on
it), the mask is a constant known on the host before capture, and the select is one full
elementwise pass (plus its backward) that returns `a` or `b` unchanged: `select` returns that
side itself. The values are the same bits; the side not chosen gets no gradient instead of an
exact-zero one, and adding an exact zero to a gradient leaves it unchanged, so the members
compute what they compute with the where (the arms invariant, tests/test_arms_learner.py).
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

Uniform = bool | None
"""True: every member's switch is on; False: every member's is off; None: they differ."""


def uniform(flags: Sequence[bool]) -> Uniform:
    """The members' common switch, or None when they differ."""
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
