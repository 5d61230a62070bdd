"""Choosing the implementation of the gems and C51 ops for one learner: `resolve_backend`.

The learner asks once, at setup (before any CUDA-graph capture), for a `GemOps` (plain
functions with the signatures and returns of tune_gems.ops.reference) and calls them:

  kernels="reference": the plain-torch reference functions, on any device;
  kernels="cuda":      the tune_gems:: custom ops on the built CUDA extension; needs a CUDA
                       device and a successful build, else KernelBuildError (one line);
  kernels="auto":      on CPU the custom ops (whose CPU implementation is the reference); on
                       CUDA the extension if it builds, else one warning per process and the
                       reference.
"""

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
    """The functions of one backend: one attribute per row of the op table
    (tune_gems.ops.custom_ops.OP_TABLE: the gems' ops, `c51_project`, `c51_loss`, `c51_target`,
    `dueling_c51`), each with the signature and return of its plain reference (one call path for
    every backend). Built from the table, so a new op is listed once, there.

    `name` is "cuda" when the CUDA kernels run, "reference" when the reference math does;
    `fused` is True when the calls go through the tune_gems:: custom ops (CUDA kernels on CUDA,
    the reference with closed-form gradients on CPU), False for the plain reference functions.
    A gem's `fused` implementation (tune_gems.gems.Gem) is used exactly when `fused` is True.
    """

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
    """The plain-torch reference, called directly (any device, plain torch autograd)."""
    return GemOps(REFERENCE_BACKEND, False)


def custom_op_ops(name: str) -> GemOps:
    """The tune_gems:: custom ops; `name` says which math runs under them."""
    return GemOps(name, True)


def resolve_backend(kernels: str, device: torch.device | str) -> GemOps:
    """The GemOps for config key `kernels` (auto|cuda|reference) on `device`.

    Raises ConfigError for an unknown choice and KernelBuildError when kernels="cuda" cannot
    be honoured. Call it before graph capture: it may build the extension (minutes, once per
    node) and never runs inside the captured step.
    """
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
            warnings.warn(
                f"kernels=auto: using the reference gems on {device} ({error})",
                RuntimeWarning,
                stacklevel=2,
            )
        return reference_ops()
    return custom_op_ops(CUDA_BACKEND)
