"""The dry evaluation of a gem at trainer construction (docs/gems.md "What is refused"): value and
null without gradient, the value again with; one that raises or returns anything but a finite [P]
tensor of the inputs' dtype is refused in one line naming `gems.<name>`."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import torch
from torch import Tensor

from tune_gems.contracts.errors import ConfigError
from tune_gems.gems.inputs import GemInputs
from tune_gems.gems.registry import Gem

MESSAGE_CHARS = 300


def dry_check(gem: Gem, value: Callable[[GemInputs], Tensor], x: GemInputs) -> None:
    """Dry-evaluate `gem` through `value` (its reference or fused function) and its null on `x`."""
    where = f"gems.{gem.name} ({gem.origin})"
    parts = [("value", value)] + ([("null", gem.null)] if gem.null is not None else [])
    for what, fn in parts:
        with torch.no_grad():
            v = _dry(where, what, "on a dry evaluation", lambda: fn(x))
        _check_value(where, what, v, x.population, x.q_t.dtype)
    _dry(where, "value", "when evaluated with gradients", lambda: _with_gradients(value, x))


def _dry(where: str, what: str, when: str, call: Callable[[], Any]) -> Any:
    try:
        return call()
    except Exception as e:  # a plug-in's own failure is bad input, not a crash
        msg = " ".join(str(e).split())[:MESSAGE_CHARS] or type(e).__name__
        raise ConfigError(f"{where}: {what} raises {when} ({type(e).__name__}: {msg})") from None


def _check_value(where: str, what: str, v: Any, P: int, dtype: torch.dtype) -> None:
    if not isinstance(v, Tensor) or v.dtype != dtype or tuple(v.shape) != (P,):
        got = f"shape {tuple(v.shape)} {v.dtype}" if isinstance(v, Tensor) else type(v).__name__
        raise ConfigError(f"{where}: {what} must be a {dtype} tensor of shape [P]=({P},), got {got}")
    if not bool(torch.isfinite(v).all()):
        raise ConfigError(f"{where}: {what} is not finite on a dry evaluation ({v.tolist()[:8]})")


def _with_gradients(fn: Callable[[GemInputs], Tensor], x: GemInputs) -> None:
    """`fn` on float inputs requiring gradient, and its sum's gradient (no parameter's .grad touched)."""
    live = {k: getattr(x, k).detach().clone().requires_grad_(True) for k in ("q_t", "q_tp1", "h_t", "adv_features")}
    with torch.enable_grad():
        v = fn(dataclasses.replace(x, **live))
        if isinstance(v, Tensor) and v.requires_grad:
            torch.autograd.grad(v.sum(), list(live.values()), allow_unused=True)
