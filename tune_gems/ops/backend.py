"""The gems' and C51 ops' implementation for one learner, chosen once before capture
(`resolve_backend`; docs/design.md "Ops and kernels")."""

from __future__ import annotations

import warnings
from types import MappingProxyType
from typing import Callable, Mapping

import torch

from tune_gems.contracts.errors import ConfigError, KernelBuildError
from tune_gems.ops import custom_ops  # registers the tune_gems:: ops; their table
from tune_gems.ops.build import first_fallback_warning, load_extension

KERNEL_CHOICES = ("auto", "cuda", "reference")
CUDA_BACKEND = "cuda"
REFERENCE_BACKEND = "reference"


class GemOps:
    """One backend's functions, an attribute per row of `custom_ops.OP_TABLE`; a gem's `fused` runs
    exactly when `fused` is set."""

    def __init__(self, name: str, fused: bool):
        self.name, self.fused = name, fused
        self.functions: Mapping[str, Callable] = MappingProxyType(
            {op: (call.fused if fused else call.reference) for op, call in custom_ops.OP_TABLE.items()}
        )
        for op, fn in self.functions.items():
            setattr(self, op, fn)

    def __repr__(self) -> str:
        return f"GemOps(name={self.name!r}, fused={self.fused})"


def reference_ops() -> GemOps:
    return GemOps(REFERENCE_BACKEND, False)


def custom_op_ops(name: str) -> GemOps:
    return GemOps(name, True)


def resolve_backend(kernels: str, device: torch.device | str) -> GemOps:
    """The GemOps for `kernels` on `device` (may build the extension: minutes, once per node)."""
    if kernels not in KERNEL_CHOICES:
        raise ConfigError(f"kernels: expected one of {'|'.join(KERNEL_CHOICES)}, got {kernels!r}")
    device = torch.device(device)
    if kernels == "reference":
        return reference_ops()
    if kernels == "cuda":
        load_extension(device)  # KernelBuildError (one line) if not a CUDA device or no build
        return custom_op_ops(CUDA_BACKEND)
    if device.type != "cuda":
        return custom_op_ops(REFERENCE_BACKEND)
    try:
        load_extension(device)
    except KernelBuildError as error:
        if first_fallback_warning(str(error)):
            warnings.warn(f"kernels=auto: using the reference gems on {device} ({error})", RuntimeWarning, stacklevel=2)
        return reference_ops()
    return custom_op_ops(CUDA_BACKEND)
