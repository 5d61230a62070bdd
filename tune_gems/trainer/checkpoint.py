"""Checkpoints that resume exactly: every learner state tensor plus host-side progress, only
tensors and plain values, so `torch.load(weights_only=True)` runs no pickle code; written to a
temporary and renamed, so a crash never truncates one. `validate_payload` holds the schema (a
damaged file is one CheckpointError naming the field); docs/checkpoints.md its versions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from tune_gems.contracts.errors import CheckpointError
from tune_gems.contracts.safe_files import open_atomic

FORMAT = "tune-gems-checkpoint-v1"
VERSION = 3
"""Schema version written in every checkpoint; a reader refuses versions it does not know."""
SUPPORTED_VERSIONS = (1, 2, 3)
META_SCHEMA: dict[str, tuple[type, ...]] = {"epoch": (int,), "env_steps": (int,), "updates": (int,),
                                            "diverged": (bool,), "prefilled": (bool,), "history": (list,),
                                            "member_history": (list,), "config": (dict,)}
"""Meta fields a resume reads, with their types (counters must also be >= 0)."""
FINITE_STATE_PREFIXES = ("online.", "target.", "optim.")
"""State tensors that are finite in every run that did not diverge: the weights and the
optimizer moments (metric accumulators may hold NaN for a metric with no value yet)."""


def save(path: str | Path, state: dict[str, Tensor], meta: dict[str, Any]) -> None:
    path = Path(path)
    payload = {"format": FORMAT, "version": VERSION, "meta": meta, "state": {k: v.detach().cpu() for k, v in state.items()}}
    with open_atomic(path, tmp=path.with_name(path.name + ".tmp")) as f:
        torch.save(payload, f)


def load(path: str | Path) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """(state, meta) of a checkpoint file, checked (module docstring)."""
    return read(path)[:2]


def read(path: str | Path) -> tuple[dict[str, Tensor], dict[str, Any], int]:
    """`load`, and the file's schema version (what its state's layout follows)."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises many types for truncated / foreign files
        raise CheckpointError(f"{path}: corrupt or not a tune-gems checkpoint ({type(e).__name__})") from None
    validate_payload(path, payload)
    check_consistent(path, payload["state"], payload["meta"])
    return payload["state"], payload["meta"], payload.get("version", 1)


def check_consistent(path: str | Path, state: dict[str, Tensor], meta: dict[str, Any]) -> None:
    """CheckpointError when a valid checkpoint contradicts itself: a history not one row per epoch, an
    epoch past `trainer.epochs`, or non-finite weights in a run that did not diverge."""
    epoch, history = meta["epoch"], meta["history"]
    epochs_col = [row.get("epoch") for row in history]
    if epochs_col != list(range(1, epoch + 1)):
        raise CheckpointError(f"{path}: meta.history has epochs {epochs_col[:5]}{'...' if len(epochs_col) > 5 else ''}, expected 1..{epoch}")
    if history and any(set(row) != set(history[0]) for row in history):
        raise CheckpointError(f"{path}: meta.history rows do not all have the same columns")
    planned = (meta["config"].get("trainer") or {}).get("epochs")
    if isinstance(planned, int) and epoch > planned:
        raise CheckpointError(f"{path}: meta.epoch is {epoch}, past the run's trainer.epochs={planned}")
    if not meta["diverged"]:
        for name, tensor in state.items():
            if name.startswith(FINITE_STATE_PREFIXES) and tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                raise CheckpointError(f"{path}: state.{name} holds NaN or infinite values, and the run did not diverge")


def _kind(x: Any) -> str:
    return type(x).__name__


def validate_payload(path: str | Path, payload: Any) -> None:
    """CheckpointError naming the first field that does not follow the schema (module doc)."""
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not a tune-gems checkpoint (format {payload.get('format') if isinstance(payload, dict) else '?'})")
    version = payload.get("version", 1)
    if isinstance(version, bool) or not isinstance(version, int) or version not in SUPPORTED_VERSIONS:
        raise CheckpointError(f"{path}: checkpoint schema version {version!r} is not supported (this tune-gems reads {SUPPORTED_VERSIONS})")
    meta, state = payload.get("meta"), payload.get("state")
    if not isinstance(meta, dict):
        raise CheckpointError(f"{path}: field meta is {_kind(meta)}, expected a mapping")
    if not isinstance(state, dict):
        raise CheckpointError(f"{path}: field state is {_kind(state)}, expected a mapping of tensors")
    for key, types in META_SCHEMA.items():
        if key not in meta:
            raise CheckpointError(f"{path}: field meta.{key} is missing")
        value = meta[key]
        ok = isinstance(value, types) and not (bool not in types and isinstance(value, bool))
        if not ok:
            raise CheckpointError(f"{path}: field meta.{key} is {_kind(value)}, expected {types[0].__name__}")
        if types == (int,) and value < 0:
            raise CheckpointError(f"{path}: field meta.{key} is {value}, expected >= 0")
    for key in ("history", "member_history"):
        if not all(isinstance(row, dict) for row in meta[key]):
            raise CheckpointError(f"{path}: field meta.{key} must be a list of mappings")
    for name, tensor in state.items():
        if not isinstance(name, str) or not isinstance(tensor, Tensor):
            raise CheckpointError(f"{path}: field state.{name} is {_kind(tensor)}, expected a tensor")


def restore_into(path: str | Path, target: dict[str, Tensor], saved: dict[str, Tensor]) -> None:
    """Copy saved tensors into the live ones, checking that names, shapes and dtypes match."""
    missing = sorted(set(target) - set(saved))
    extra = sorted(set(saved) - set(target))
    if missing or extra:
        what = f"missing {missing[:3]}" if missing else f"unexpected {extra[:3]}"
        raise CheckpointError(f"{path}: checkpoint does not match this config ({what})")
    with torch.no_grad():
        for k, live in target.items():
            src = saved[k]
            if src.shape != live.shape or src.dtype != live.dtype:
                raise CheckpointError(
                    f"{path}: {k} has shape {tuple(src.shape)} {src.dtype}, config needs {tuple(live.shape)} {live.dtype}"
                )
            live.copy_(src)
