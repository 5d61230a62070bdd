"""The run's gems under their per-member modes and weights, the one class that evaluates gems (docs/design.md "The gem
registry", "Arms"). Modes are [P] tensors selected by `torch.where` (not a 0/1 product: NaN x 0 is NaN), so the graph
never depends on them. A wired head trains at a weight-free rate (at weight 0.01 it would sink under Adam's epsilon);
a null runs per (fold, arm) block, so a reduction never sees another member count, unless the backend
has a fixed-order row mean and the null reduces only through it (`Gem.null_by_row_means`): then once."""

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


def member_rows(x: GemInputs, rows: slice) -> GemInputs:
    return dataclasses.replace(x, **{k: getattr(x, k)[rows] for k in GemInputs.TENSORS})


class MemberGems:
    """Per-member modes and weights of the run's gems, in registry order, from each arm's `gems` section."""

    def __init__(
        self, arm_gems: Sequence[Any], layout: MemberLayout, device: torch.device | str,
        plugins: Sequence[str] = (), fused: bool = False, row_means: Callable[[Tensor], Tensor] | None = None,
    ):  # fmt: skip
        if len(arm_gems) != len(layout.arms):
            raise ValueError(f"{len(arm_gems)} gem sections for {len(layout.arms)} arms")
        self.blocks = layout.blocks  # one per (fold, arm): what a run of that arm alone reduces over
        self.fused = fused
        self.row_means = row_means
        self.gems: tuple[Gem, ...] = tuple(run_gems(plugins))
        self.names: tuple[str, ...] = tuple(g.name for g in self.gems)
        self._gem = {g.name: g for g in self.gems}
        self.arm_modes: dict[str, dict[str, str]] = {
            arm: {n: getattr(section, n).mode for n in self.names} for arm, section in zip(layout.arms, arm_gems)
        }  # fmt: skip
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
            self._common[n] = {"on": uniform([m != "off" for m in modes]),
                               "wire": uniform([m == "wire" for m in modes]),
                               "measure": uniform([m == "measure" for m in modes])}

    def computed(self, name: str) -> bool:
        return any(m != "off" for m in self.modes[name])

    def any_wired(self, name: str) -> bool:
        return "wire" in self.modes[name]

    def any_measured(self, name: str) -> bool:
        return "measure" in self.modes[name]

    def summary_mode(self, name: str) -> str:
        """One mode per run (HEALTH_DIAG): wire if any member wires, else measure if any does, else off."""
        return "wire" if self.any_wired(name) else "measure" if self.any_measured(name) else "off"

    def off_by_arm(self) -> dict[str, set[str]]:
        return {arm: {n for n, mode in modes.items() if mode == "off"} for arm, modes in self.arm_modes.items()}

    def function(self, name: str) -> Callable[[GemInputs], Tensor]:
        """The gem's function in this run: its fused op where the backend fuses, else its reference."""
        gem = self._gem[name]
        return gem.fused if (self.fused and gem.fused is not None) else gem.reference

    def _has_head(self, name: str) -> bool:
        return self._gem[name].head is not None

    def _weight_as(self, name: str, dtype: torch.dtype) -> Tensor:
        by_dtype = self._weight[name]
        return by_dtype[dtype] if dtype in by_dtype else by_dtype[torch.float64].to(dtype)

    def _live_where(self, name: str, x: GemInputs) -> GemInputs:
        mask, common = self._wire[name], self._common[name]["wire"]

        def pick(t: Tensor) -> Tensor:
            if not t.is_floating_point():
                return t
            return select(common, mask.view(-1, *([1] * (t.dim() - 1))), t, t.detach())

        return dataclasses.replace(x, **{k: pick(getattr(x, k)) for k in GemInputs.TENSORS})

    def evaluate(self, name: str, x: GemInputs) -> Tensor | None:
        """Gem `name`'s value [P] (None when all have it off), with a graph only where it is needed."""
        if not self.computed(name):
            return None
        needs_graph = self.any_wired(name) or (self._has_head(name) and self.any_measured(name))
        with torch.set_grad_enabled(needs_graph and torch.is_grad_enabled()):
            return self.function(name)(self._live_where(name, x))

    def evaluate_all(self, x: GemInputs, heads: dict[str, Callable[..., Tensor]]) -> dict[str, Tensor | None]:
        """Every gem's value [P] (None when off for all); `heads` binds each gem's parameters."""
        return {n: self.evaluate(n, x.with_head(heads.get(n))) for n in self.names}

    def nulls(self, x: GemInputs) -> dict[str, Tensor | None]:
        out: dict[str, Tensor | None] = {}
        x = x.detached()
        parts: list[GemInputs] = []  # the blocks' inputs, sliced once and only for a null that runs per block
        with torch.no_grad():
            for n in self.names:
                gem = self._gem[n]
                if not self.computed(n) or gem.null is None:
                    out[n] = None
                elif self.row_means is not None and gem.null_by_row_means:
                    out[n] = gem.null(dataclasses.replace(x, row_means=self.row_means))
                else:
                    parts = parts or ([x] if len(self.blocks) == 1 else [member_rows(x, rows) for rows in self.blocks])
                    out[n] = gem.null(parts[0]) if len(parts) == 1 else torch.cat([gem.null(part) for part in parts])
        return out

    def loss_term(self, values: dict[str, Tensor | None]) -> Tensor | None:
        terms = [
            select(self._common[n]["wire"], self._wire[n], self._weight_as(n, v.dtype) * v, 0.0)
            for n, v in values.items() if v is not None and self.any_wired(n)
        ]  # fmt: skip
        return torch.stack(terms).sum(0) if terms else None

    def wired_head_values(self, x: GemInputs, heads: dict[str, Callable[..., Tensor]]) -> dict[str, Tensor | None]:
        """Each wired gem's value on stop-gradient inputs (reaching its head only), for `head_loss`."""
        out: dict[str, Tensor | None] = {}
        cut = x.detached()
        for n in self.names:
            if self.any_wired(n) and self._has_head(n):
                out[n] = self.function(n)(cut.with_head(heads.get(n)))
        return out

    def head_loss(self, values: dict[str, Tensor | None], wired_heads: dict[str, Tensor | None] | None = None) -> Tensor | None:
        """Per member: where(measure, value, 0) over gems with a head, plus wired heads' weight-free term."""
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
        if v is None:
            return torch.full_like(like, math.nan)
        return select(self._common[name]["on"], self._on[name], v.detach(), math.nan)

    def check(self, x: GemInputs, heads: dict[str, Callable[..., Tensor]]) -> None:
        """Dry-evaluate every gem some arm has on, each once, at construction (`gem_check`)."""
        checked: set[str] = set()
        for modes in self.arm_modes.values():
            for n in self.names:
                if modes[n] != "off" and n not in checked:
                    checked.add(n)
                    dry_check(self._gem[n], self.function(n), x.with_head(heads.get(n)))
