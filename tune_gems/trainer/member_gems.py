"""The run's gems under their modes, with a mode and a weight per member: the one class that
evaluates gems in a run (docs/design.md, "The gem registry" and "Arms"; a run of one arm is the
case A = 1).

A gem's mode is off | measure | wire. `measure` evaluates it on inputs cut from the autograd
graph, so no gradient reaches the shared network; parameters the gem owns (its head, e.g. G12's
predictor) still train on those stop-gradient inputs, with the gem's value as their loss
(`head_loss`), so a measured value is never that of an untrained head. `wire` evaluates it on
the live inputs and adds weight x value to each member's loss (gradient into the shared network
and the head). Which implementation runs (the fused custom op or the plain-torch reference) is
fixed per run by the ops backend (tune_gems.ops.resolve_backend, `GemOps.fused`).

With arms the mode and the weight of a gem differ between members, so here they are [P]
tensors and the graph's structure never depends on them:
- a gem is computed for every member when any member has it on (off members: NaN in the
  reports, no gradient anywhere);
- its inputs are the live ones for `wire` members and stop-gradient copies for the others
  (`torch.where` per member, so a measured or off member's gem sends no gradient into the
  shared network);
- the loss term is `where(wire, weight x value, 0)`, summed over the gems any member wires;
- a gem that owns a head (G12's predictor) trains it in `measure` mode with the value as its
  loss: `where(measure, value, 0)`, summed over the gems any member measures; in `wire` mode
  the head trains at the same rate whatever the gem's weight (a weighted gradient at weight
  0.01 sinks under Adam's epsilon and the predictor barely trains): the loss adds
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
from typing import Any, Callable, Sequence

import torch
from torch import Tensor

from tune_gems.design.arms import MemberLayout
from tune_gems.gems.inputs import GemInputs
from tune_gems.gems.registry import Gem, run_gems
from tune_gems.model.member_select import Uniform, select, uniform
from tune_gems.trainer.gem_check import dry_check

WEIGHT_DTYPES = (torch.float32, torch.float64)
"""The dtypes a gem's [P] weights are kept in (a value of another dtype gets them cast)."""


def member_rows(x: GemInputs, rows: slice) -> GemInputs:
    """The inputs of the members in `rows` (every tensor's leading member axis sliced)."""
    return dataclasses.replace(x, **{k: getattr(x, k)[rows] for k in GemInputs.TENSORS})


class MemberGems:
    """Per-member modes and weights of the run's gems, in registry order (built-ins, then the
    run's plug-ins: `registry.run_gems`).

    `arm_gems`: each arm's `gems` config section (`Arm.config.gems`), in the layout's arm order;
    `plugins`: the run's plug-in modules (which gems it knows); `fused`: call a gem's custom op
    where it has one (`GemOps.fused`)."""

    def __init__(
        self, arm_gems: Sequence[Any], layout: MemberLayout, device: torch.device | str,
        plugins: Sequence[str] = (), fused: bool = False,
    ):  # fmt: skip
        if len(arm_gems) != len(layout.arms):
            raise ValueError(f"{len(arm_gems)} gem sections for {len(layout.arms)} arms")
        self.blocks = layout.blocks  # one per (fold, arm): what a run of that arm alone reduces over
        self.fused = fused
        self.gems: tuple[Gem, ...] = tuple(run_gems(plugins))
        self.names: tuple[str, ...] = tuple(g.name for g in self.gems)
        self._gem = {g.name: g for g in self.gems}
        self.arm_modes: dict[str, dict[str, str]] = {
            arm: {n: getattr(section, n).mode for n in self.names} for arm, section in zip(layout.arms, arm_gems)
        }  # fmt: skip
        """Each arm's mode of each gem (the arm's config)."""
        self.modes: dict[str, list[str]] = {}
        self.weights: dict[str, list[float]] = {}
        self._on: dict[str, Tensor] = {}
        self._wire: dict[str, Tensor] = {}
        self._measure: dict[str, Tensor] = {}
        self._weight: dict[str, dict[torch.dtype, Tensor]] = {}
        self._common: dict[str, dict[str, Uniform]] = {}
        for n in self.names:
            modes = layout.per_member([getattr(section, n).mode for section in arm_gems])
            weights = layout.per_member([float(getattr(section, n).weight) for section in arm_gems])
            self.modes[n], self.weights[n] = modes, weights
            self._on[n] = torch.tensor([m != "off" for m in modes], device=device)
            self._wire[n] = torch.tensor([m == "wire" for m in modes], device=device)
            self._measure[n] = torch.tensor([m == "measure" for m in modes], device=device)
            # each weight rounded once to the value's dtype: float32 values (training) are
            # weighted in float32, float64 ones (the tests' oracle) by the weight itself
            self._weight[n] = {dt: torch.tensor(weights, dtype=dt, device=device) for dt in WEIGHT_DTYPES}
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
        """One mode for reports that show one per run (the HEALTH_DIAG line): wire if any member
        wires it, else measure if any member measures it, else off (a one-arm run's own mode)."""
        return "wire" if self.any_wired(name) else "measure" if self.any_measured(name) else "off"

    def off_by_arm(self) -> dict[str, set[str]]:
        """Per arm, the gems it has off (HEALTH_DIAG prints `off` for them)."""
        return {arm: {n for n, mode in modes.items() if mode == "off"} for arm, modes in self.arm_modes.items()}

    def function(self, name: str) -> Callable[[GemInputs], Tensor]:
        """The gem's implementation in this run: its fused custom op where the backend fuses and
        the gem has one, else its reference."""
        gem = self._gem[name]
        return gem.fused if (self.fused and gem.fused is not None) else gem.reference

    def _has_head(self, name: str) -> bool:
        return self._gem[name].head is not None

    def _weight_as(self, name: str, dtype: torch.dtype) -> Tensor:
        by_dtype = self._weight[name]
        return by_dtype[dtype] if dtype in by_dtype else by_dtype[torch.float64].to(dtype)

    # -- the iteration ---------------------------------------------------------------------------
    def _live_where(self, name: str, x: GemInputs) -> GemInputs:
        """x for the members that wire gem `name`, a stop-gradient copy for the others."""
        mask, common = self._wire[name], self._common[name]["wire"]

        def pick(t: Tensor) -> Tensor:
            if not t.is_floating_point():
                return t
            return select(common, mask.view(-1, *([1] * (t.dim() - 1))), t, t.detach())

        return dataclasses.replace(x, **{k: pick(getattr(x, k)) for k in GemInputs.TENSORS})

    def evaluate(self, name: str, x: GemInputs) -> Tensor | None:
        """Gem `name`'s value [P] on `x` (its head bound), None when no member has it on. The
        autograd graph is kept only where a member wires it or measures its head."""
        if not self.computed(name):
            return None
        needs_graph = self.any_wired(name) or (self._has_head(name) and self.any_measured(name))
        with torch.set_grad_enabled(needs_graph and torch.is_grad_enabled()):
            return self.function(name)(self._live_where(name, x))

    def evaluate_all(self, x: GemInputs, heads: dict[str, Callable[..., Tensor]]) -> dict[str, Tensor | None]:
        """Every gem's value [P] (None when no member has it on), in registry order; `heads`
        binds each gem's own parameters to this iteration's weights."""
        return {n: self.evaluate(n, x.with_head(heads.get(n))) for n in self.names}

    def nulls(self, x: GemInputs) -> dict[str, Tensor | None]:
        """Each computed gem's null [P] (None when off for all or without a null)."""
        out: dict[str, Tensor | None] = {}
        x = x.detached()
        parts = [x] if len(self.blocks) == 1 else [member_rows(x, rows) for rows in self.blocks]
        with torch.no_grad():
            for n in self.names:
                null = self._gem[n].null
                if self.computed(n) and null is not None:
                    values = [null(part) for part in parts]
                    out[n] = values[0] if len(values) == 1 else torch.cat(values)
                else:
                    out[n] = None
        return out

    def loss_term(self, values: dict[str, Tensor | None]) -> Tensor | None:
        """Per member [P]: the sum over gems of where(wire, weight x value, 0)."""
        terms = [
            select(self._common[n]["wire"], self._wire[n], self._weight_as(n, v.dtype) * v, 0.0)
            for n, v in values.items() if v is not None and self.any_wired(n)
        ]  # fmt: skip
        return torch.stack(terms).sum(0) if terms else None

    def wired_head_values(self, x: GemInputs, heads: dict[str, Callable[..., Tensor]]) -> dict[str, Tensor | None]:
        """For each gem with a head that some member wires: its value [P] on stop-gradient inputs
        (the gradient reaches the head only), for `head_loss`'s weight-free head rate."""
        out: dict[str, Tensor | None] = {}
        cut = x.detached()
        for n in self.names:
            if self.any_wired(n) and self._has_head(n):
                out[n] = self.function(n)(cut.with_head(heads.get(n)))
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
            torch.where(self._wire[n], (1.0 - self._weight_as(n, v.dtype)) * v, 0.0)
            for n, v in (wired_heads or {}).items() if v is not None
        ]  # fmt: skip
        return torch.stack(terms).sum(0) if terms else None

    def reported(self, name: str, v: Tensor | None, like: Tensor) -> Tensor:
        """A value (or null) for the accumulator: NaN for members with the gem off."""
        if v is None:
            return torch.full_like(like, math.nan)
        return select(self._common[name]["on"], self._on[name], v.detach(), math.nan)

    def check(self, x: GemInputs, heads: dict[str, Callable[..., Tensor]]) -> None:
        """Dry-evaluate every gem some arm has on, arm by arm in registry order, each once
        (tune_gems.trainer.gem_check: one line naming a bad gem), at construction."""
        checked: set[str] = set()
        for modes in self.arm_modes.values():
            for n in self.names:
                if modes[n] != "off" and n not in checked:
                    checked.add(n)
                    dry_check(self._gem[n], self.function(n), x.with_head(heads.get(n)))
