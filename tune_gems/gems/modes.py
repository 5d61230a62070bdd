"""The gems of one run under their modes: off | measure | wire (docs/design.md, "The gem registry").

`measure` evaluates a gem on inputs cut from the autograd graph, so no gradient reaches the
shared network; parameters the gem owns (its head, e.g. G12's predictor) still train on those
stop-gradient inputs, with the gem's value as their loss (`head_loss`), so a measured value is
never that of an untrained head. `wire` evaluates it on the live inputs and adds weight x value
to each member's loss (gradient into the shared network and the head). Which implementation runs (the fused custom op or the plain-torch reference) is fixed per
run by the ops backend (tune_gems.ops.resolve_backend).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import Tensor

from tune_gems.contracts.errors import ConfigError
from tune_gems.gems.inputs import GemInputs
from tune_gems.gems.registry import Gem, run_gems


@dataclass(frozen=True)
class GemSetting:
    gem: Gem
    mode: str  # off | measure | wire
    weight: float

    @property
    def name(self) -> str:
        return self.gem.name

    @property
    def metric(self) -> str:
        return self.gem.metric


class GemSet:
    """The run's gems in registry order, each with its mode and weight.

    `gems_config` is the config's `gems` section; `plugins` the config's plugin list (which
    plug-in gems the run knows). `fused`: use a gem's custom op where it has one.
    """

    def __init__(self, gems_config: Any, plugins: list[str] | tuple[str, ...] = (), fused: bool = False):
        self.fused = fused
        self.settings: dict[str, GemSetting] = {}
        for gem in run_gems(plugins):
            c = getattr(gems_config, gem.name)
            self.settings[gem.name] = GemSetting(gem, c.mode, c.weight)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.settings)

    def active(self, name: str) -> bool:
        return self.settings[name].mode != "off"

    def wired(self, name: str) -> bool:
        return self.settings[name].mode == "wire"

    def function(self, name: str) -> Callable[[GemInputs], Tensor]:
        gem = self.settings[name].gem
        return gem.fused if (self.fused and gem.fused is not None) else gem.reference

    def evaluate(self, name: str, x: GemInputs) -> Tensor | None:
        """The gem's value [P] under its mode (None when off)."""
        mode = self.settings[name].mode
        if mode == "off":
            return None
        fn = self.function(name)
        if mode == "measure":
            # a head trains on the detached inputs; without one, nothing needs a graph
            with torch.set_grad_enabled(self.settings[name].gem.head is not None and torch.is_grad_enabled()):
                return fn(x.detached())
        return fn(x)

    def nulls(self, x: GemInputs) -> dict[str, Tensor | None]:
        """Each active gem's null [P] on these inputs (None when off or without a null)."""
        out: dict[str, Tensor | None] = {}
        with torch.no_grad():
            for name, s in self.settings.items():
                out[name] = s.gem.null(x.detached()) if s.mode != "off" and s.gem.null is not None else None
        return out

    def head_loss(self, values: dict[str, Tensor | None]) -> Tensor | None:
        """Per member [P]: the sum of the measured values of gems that own a head (their heads'
        own objective; the values carry gradient into the heads only)."""
        terms = [
            v for n, v in values.items()
            if v is not None and self.settings[n].mode == "measure" and self.settings[n].gem.head is not None
        ]  # fmt: skip
        return torch.stack(terms).sum(0) if terms else None

    def evaluate_all(self, x: GemInputs, heads: dict[str, Callable[..., Tensor]]) -> dict[str, Tensor | None]:
        """Every gem's value [P] (None when off), in registry order; `heads` binds each gem's
        own parameters to this iteration's weights."""
        return {n: self.evaluate(n, x.with_head(heads.get(n))) for n in self.settings}

    def loss_term(self, values: dict[str, Tensor | None]) -> Tensor | None:
        """Sum over wired gems of weight * value, per member [P]."""
        terms = [self.settings[n].weight * v for n, v in values.items() if v is not None and self.wired(n)]
        return torch.stack(terms).sum(0) if terms else None

    def check(self, x: GemInputs, heads: dict[str, Callable[..., Tensor]]) -> None:
        """Dry-evaluate every active gem (and its null) on sample inputs: without gradient, and
        the value once more with gradient (backpropagated), as `wire` mode and heads run it.

        Refused in one line (ConfigError naming `gems.<name>`), at trainer construction, before
        anything is written: a gem that raises (with or without gradient), returns something
        other than a tensor of shape [P] in the inputs' dtype, or a non-finite value.
        """
        P = x.population
        for name, s in self.settings.items():
            if s.mode == "off":
                continue
            x_gem = x.with_head(heads.get(name))
            parts = [("value", self.function(name))] + ([("null", s.gem.null)] if s.gem.null is not None else [])
            where = f"gems.{name} ({s.gem.origin})"
            for what, fn in parts:
                with torch.no_grad():
                    v = _dry(where, what, "on a dry evaluation", lambda: fn(x_gem))
                _check_value(where, what, v, P, x.q_t.dtype)
            _dry(where, "value", "when evaluated with gradients", lambda: _with_gradients(self.function(name), x_gem))


def _dry(where: str, what: str, when: str, call: Callable[[], Any]) -> Any:
    try:
        return call()
    except Exception as e:  # a plug-in's own failure is bad input, not a crash
        msg = " ".join(str(e).split())[:300] or type(e).__name__
        raise ConfigError(f"{where}: {what} raises {when} ({type(e).__name__}: {msg})") from None


def _check_value(where: str, what: str, v: Any, P: int, dtype: torch.dtype) -> None:
    if not isinstance(v, Tensor) or v.dtype != dtype or tuple(v.shape) != (P,):
        got = f"shape {tuple(v.shape)} {v.dtype}" if isinstance(v, Tensor) else type(v).__name__
        raise ConfigError(f"{where}: {what} must be a {dtype} tensor of shape [P]=({P},), got {got}")
    if not bool(torch.isfinite(v).all()):
        raise ConfigError(f"{where}: {what} is not finite on a dry evaluation ({v.tolist()[:8]})")


def _with_gradients(fn: Callable[[GemInputs], Tensor], x: GemInputs) -> None:
    """`fn` on copies of the float inputs that require gradient, and the gradient of its sum
    with respect to those copies (torch.autograd.grad: no parameter's .grad is touched)."""
    live = {k: getattr(x, k).detach().clone().requires_grad_(True) for k in ("q_t", "q_tp1", "h_t", "adv_features")}
    with torch.enable_grad():
        v = fn(dataclasses.replace(x, **live))
        if isinstance(v, Tensor) and v.requires_grad:
            torch.autograd.grad(v.sum(), list(live.values()), allow_unused=True)
