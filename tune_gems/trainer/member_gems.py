"""The run's gems with a mode and a weight per member (arms, docs/design.md "Arms").

`tune_gems.gems.modes.GemSet` gives one mode per gem for a whole run; with arms the mode and
the weight of a gem differ between members, so here they are [P] tensors and the graph's
structure never depends on them:
- a gem is computed for every member when any member has it on (off members: NaN in the
  reports, no gradient anywhere);
- its inputs are the live ones for `wire` members and stop-gradient copies for the others
  (`torch.where` per member, so a measured or off member's gem sends no gradient into the
  shared network);
- the loss term is `where(wire, weight x value, 0)`, summed over the gems any member wires;
- a gem that owns a head (G12's predictor) trains it in `measure` mode with the value as its
  loss: `where(measure, value, 0)`, summed over the gems any member measures; in `wire` mode
  the head trains at the same rate whatever the gem's weight (issue 21: at weight 0.01 the
  weighted gradient sank under Adam's epsilon and the predictor barely trained): the loss adds
  `where(wire, (1 - weight) x value_on_cut_inputs, 0)`, so the head's gradient is weight x g
  through the live inputs plus (1 - weight) x g through the cut ones = g, while the shared
  network still gets weight x its gradient.
`torch.where` rather than multiplying by a 0/1 mask: NaN x 0 is NaN, and a mask product can turn
a value's sign bit; a masked-out member contributes exact zeros. When every member has the
same mode the where is skipped (tune_gems.model.member_select: the same bits). A member therefore computes
exactly what it computes in a run where every member has its own modes (the bit-identity
invariant, tests/test_arms_learner.py). The nulls (plain torch reductions over a member's
batch, reported only) run once per (fold, arm) block, so that a GPU reduction never sees
another number of members than in a run of that arm alone.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

import torch
from torch import Tensor

from tune_gems.design.arms import MemberLayout
from tune_gems.gems import GemInputs
from tune_gems.gems.modes import GemSet
from tune_gems.model.member_select import Uniform, select, uniform


def member_rows(x: GemInputs, rows: slice) -> GemInputs:
    """The inputs of the members in `rows` (every tensor's leading member axis sliced)."""
    return dataclasses.replace(x, **{k: getattr(x, k)[rows] for k in GemInputs.TENSORS})


class MemberGems:
    """Per-member modes and weights of the run's gems, from one GemSet per arm."""

    def __init__(self, arm_gems: list[GemSet], layout: MemberLayout, device: torch.device):
        if len(arm_gems) != len(layout.arms):
            raise ValueError(f"{len(arm_gems)} gem sets for {len(layout.arms)} arms")
        self.blocks = layout.blocks  # one per (fold, arm): what a run of that arm alone reduces over
        self.arm_gems = arm_gems
        self.base = arm_gems[0]  # gem definitions and implementations (the same in every arm)
        self.names: tuple[str, ...] = self.base.names
        self.modes: dict[str, list[str]] = {}
        self.weights: dict[str, list[float]] = {}
        self._on: dict[str, Tensor] = {}
        self._wire: dict[str, Tensor] = {}
        self._measure: dict[str, Tensor] = {}
        self._weight: dict[str, Tensor] = {}
        self._common: dict[str, dict[str, Uniform]] = {}
        for n in self.names:
            modes = layout.per_member([gs.settings[n].mode for gs in arm_gems])
            weights = layout.per_member([float(gs.settings[n].weight) for gs in arm_gems])
            self.modes[n], self.weights[n] = modes, weights
            self._on[n] = torch.tensor([m != "off" for m in modes], device=device)
            self._wire[n] = torch.tensor([m == "wire" for m in modes], device=device)
            self._measure[n] = torch.tensor([m == "measure" for m in modes], device=device)
            self._weight[n] = torch.tensor(weights, dtype=torch.float32, device=device)
            # the masks as host facts when every member agrees (member_select: no where pass)
            self._common[n] = {
                "on": uniform([m != "off" for m in modes]),
                "wire": uniform([m == "wire" for m in modes]),
                "measure": uniform([m == "measure" for m in modes]),
            }

    # -- which gems run (host facts, fixed for the run) ------------------------------------------
    def computed(self, name: str) -> bool:
        """Computed at all: some member has it on."""
        return any(m != "off" for m in self.modes[name])

    def any_wired(self, name: str) -> bool:
        return "wire" in self.modes[name]

    def any_measured(self, name: str) -> bool:
        return "measure" in self.modes[name]

    def summary_mode(self, name: str) -> str:
        """One mode for reports that show one per run: wire if any member wires it, else
        measure if any member measures it, else off."""
        return "wire" if self.any_wired(name) else "measure" if self.any_measured(name) else "off"

    # -- the iteration ---------------------------------------------------------------------------
    def _live_where(self, name: str, x: GemInputs) -> GemInputs:
        """x for the members that wire gem `name`, a stop-gradient copy for the others."""
        mask, common = self._wire[name], self._common[name]["wire"]

        def pick(t: Tensor) -> Tensor:
            if not t.is_floating_point():
                return t
            return select(common, mask.view(-1, *([1] * (t.dim() - 1))), t, t.detach())

        return dataclasses.replace(x, **{k: pick(getattr(x, k)) for k in GemInputs.TENSORS})

    def evaluate_all(self, x: GemInputs, heads: dict[str, Callable[..., Tensor]]) -> dict[str, Tensor | None]:
        """Every computed gem's value [P] (None when no member has it on), in registry order."""
        out: dict[str, Tensor | None] = {}
        for n in self.names:
            if not self.computed(n):
                out[n] = None
                continue
            gem = self.base.settings[n].gem
            needs_graph = self.any_wired(n) or (gem.head is not None and self.any_measured(n))
            with torch.set_grad_enabled(needs_graph and torch.is_grad_enabled()):
                out[n] = self.base.function(n)(self._live_where(n, x).with_head(heads.get(n)))
        return out

    def nulls(self, x: GemInputs) -> dict[str, Tensor | None]:
        """Each computed gem's null [P] (None when off for all or without a null)."""
        out: dict[str, Tensor | None] = {}
        x = x.detached()
        parts = [x] if len(self.blocks) == 1 else [member_rows(x, rows) for rows in self.blocks]
        with torch.no_grad():
            for n in self.names:
                null = self.base.settings[n].gem.null
                if self.computed(n) and null is not None:
                    values = [null(part) for part in parts]
                    out[n] = values[0] if len(values) == 1 else torch.cat(values)
                else:
                    out[n] = None
        return out

    def loss_term(self, values: dict[str, Tensor | None]) -> Tensor | None:
        """Per member [P]: the sum over gems of where(wire, weight x value, 0)."""
        terms = [
            select(self._common[n]["wire"], self._wire[n], self._weight[n] * v, 0.0)
            for n, v in values.items() if v is not None and self.any_wired(n)
        ]  # fmt: skip
        return torch.stack(terms).sum(0) if terms else None

    def _has_head(self, name: str) -> bool:
        return self.base.settings[name].gem.head is not None

    def wired_head_values(self, x: GemInputs, heads: dict[str, Callable[..., Tensor]]) -> dict[str, Tensor | None]:
        """For each gem with a head that some member wires: its value [P] on stop-gradient inputs
        (the gradient reaches the head only), for `head_loss`'s weight-free head rate."""
        out: dict[str, Tensor | None] = {}
        cut = x.detached()
        for n in self.names:
            if self.any_wired(n) and self._has_head(n):
                out[n] = self.base.function(n)(cut.with_head(heads.get(n)))
        return out

    def head_loss(self, values: dict[str, Tensor | None], wired_heads: dict[str, Tensor | None] | None = None) -> Tensor | None:
        """Per member [P]: the sum over gems with a head of where(measure, value, 0) (the head's
        own objective in measure mode; the inputs were stop-gradient, so it trains the head only)
        and, from `wired_head_values`, where(wire, (1 - weight) x value, 0) (module docstring: the
        wired head's rate does not depend on the weight)."""
        terms = [
            select(self._common[n]["measure"], self._measure[n], v, 0.0)
            for n, v in values.items()
            if v is not None and self.any_measured(n) and self._has_head(n)
        ]  # fmt: skip
        terms += [
            torch.where(self._wire[n], (1.0 - self._weight[n]) * v, 0.0)
            for n, v in (wired_heads or {}).items() if v is not None
        ]  # fmt: skip
        return torch.stack(terms).sum(0) if terms else None

    def reported(self, name: str, v: Tensor | None, like: Tensor) -> Tensor:
        """A value (or null) for the accumulator: NaN for members with the gem off."""
        if v is None:
            return torch.full_like(like, math.nan)
        return select(self._common[name]["on"], self._on[name], v.detach(), math.nan)

    def check(self, x: GemInputs, heads: dict[str, Callable[..., Tensor]]) -> None:
        """Dry-evaluate the gems of every arm (GemSet.check: one line naming a bad gem)."""
        seen: set[tuple[str, ...]] = set()
        for gs in self.arm_gems:
            active = tuple(n for n in self.names if gs.active(n))
            if active not in seen:
                seen.add(active)
                gs.check(x, heads)
