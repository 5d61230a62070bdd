"""Checkpoints that resume exactly: every state tensor of the learner plus host-side progress.

The file holds only tensors, numbers, strings, lists and dicts, so it loads with
`torch.load(weights_only=True)` (no pickle code runs). It is written to a temporary file and
renamed, so a crash never leaves a truncated checkpoint in place.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from tune_gems.errors import CheckpointError

FORMAT = "tune-gems-checkpoint-v1"


def save(path: str | Path, state: dict[str, Tensor], meta: dict[str, Any]) -> None:
    path = Path(path)
    payload = {"format": FORMAT, "meta": meta, "state": {k: v.detach().cpu() for k, v in state.items()}}
    tmp = path.with_name(path.name + ".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)


def load(path: str | Path) -> tuple[dict[str, Tensor], dict[str, Any]]:
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises many types for truncated / foreign files
        raise CheckpointError(f"{path}: corrupt or not a tune-gems checkpoint ({type(e).__name__})") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not a tune-gems checkpoint (format {payload.get('format') if isinstance(payload, dict) else '?'})")
    return payload["state"], payload["meta"]


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
