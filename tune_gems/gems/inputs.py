"""What a gem function receives: population-first tensors (docs/gems.md). A gem must not reduce
across the member axis."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Optional


@dataclass(frozen=True)
class GemInputs:
    """One iteration's transitions as the learner sees them (docs/gems.md "The inputs"), `head` bound."""

    q_t: Any
    q_tp1: Any
    h_t: Any
    h_tp1: Any
    adv_features: Any
    action: Any
    reward: Any
    not_done: Any
    head: Optional[Callable[..., Any]] = None
    row_means: Optional[Callable[..., Any]] = None
    """The backend's mean of each row of a float32 [R, n] matrix in an order fixed by the row alone
    (None: plain torch, whose reduction order may follow R): what a `null_by_row_means` null reduces with."""

    TENSORS = ("q_t", "q_tp1", "h_t", "h_tp1", "adv_features", "action", "reward", "not_done")

    @property
    def population(self) -> int:
        return int(self.q_t.shape[0])

    def detached(self) -> "GemInputs":
        """The same inputs cut from the autograd graph (what `measure` mode passes a gem)."""
        return dataclasses.replace(self, **{k: getattr(self, k).detach() for k in self.TENSORS})

    def with_head(self, head: Optional[Callable[..., Any]]) -> "GemInputs":
        return dataclasses.replace(self, head=head)
