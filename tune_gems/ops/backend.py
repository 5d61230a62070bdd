"""Choosing the implementation of the gems and C51 ops for one learner: `resolve_backend`.

The learner asks once, at setup (before any CUDA-graph capture), for a `GemOps` and then calls
its methods, which have the signatures and returns of tune_gems.gems.reference:

  kernels="reference": the plain-torch reference functions, on any device;
  kernels="cuda":      the tune_gems:: custom ops on the built CUDA extension; needs a CUDA
                       device and a successful build, else KernelBuildError (one line);
  kernels="auto":      on CPU the custom ops (whose CPU implementation is the reference); on
                       CUDA the extension if it builds, else one warning per process and the
                       reference.
"""

from __future__ import annotations

import warnings

import torch
from torch import Tensor

from tune_gems.errors import ConfigError, KernelBuildError
from tune_gems.gems import reference
from tune_gems.ops import custom_ops  # noqa: F401 - registers the tune_gems:: ops
from tune_gems.ops.build import first_fallback_warning, load_extension

KERNEL_CHOICES = ("auto", "cuda", "reference")
CUDA_BACKEND = "cuda"
REFERENCE_BACKEND = "reference"


class GemOps:
    """The gem and C51 functions of one backend, with the reference module's signatures.

    `name` is "cuda" when the CUDA kernels run, "reference" when the reference math does.
    """

    name: str = REFERENCE_BACKEND

    def g6_branch_indep(self, f: Tensor) -> tuple[None, Tensor]:
        """f [P,K,B,D] -> (None, value [P])."""
        raise NotImplementedError

    def g10_temporal(self, q_t: Tensor, q_tp1: Tensor, nd: Tensor) -> tuple[Tensor, Tensor]:
        """q_t, q_tp1 [P,B,K,A], nd [P,B] -> (per_sample [P,B], value [P])."""
        raise NotImplementedError

    def g12_predictive(self, pred: Tensor, target: Tensor, nd: Tensor) -> tuple[Tensor, Tensor]:
        """pred, target [P,B,D], nd [P,B] -> (per_sample [P,B], value [P])."""
        raise NotImplementedError

    def c51_project(self, p: Tensor, r: Tensor, g: Tensor, v_min: float, v_max: float) -> Tensor:
        """p [N,atoms], r [N], g [N] -> m [N,atoms]."""
        raise NotImplementedError

    def c51_loss(self, logits: Tensor, m: Tensor) -> tuple[Tensor, Tensor]:
        """logits, m [P,B,K,atoms] -> (per_sample [P,B], value [P])."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


class ReferenceGemOps(GemOps):
    """The plain-torch reference, called directly (any device, plain torch autograd)."""

    name = REFERENCE_BACKEND

    def g6_branch_indep(self, f: Tensor) -> tuple[None, Tensor]:
        return reference.g6_branch_indep(f)

    def g10_temporal(self, q_t: Tensor, q_tp1: Tensor, nd: Tensor) -> tuple[Tensor, Tensor]:
        return reference.g10_temporal(q_t, q_tp1, nd)

    def g12_predictive(self, pred: Tensor, target: Tensor, nd: Tensor) -> tuple[Tensor, Tensor]:
        return reference.g12_predictive(pred, target, nd)

    def c51_project(self, p: Tensor, r: Tensor, g: Tensor, v_min: float, v_max: float) -> Tensor:
        return reference.c51_project(p, r, g, v_min, v_max)

    def c51_loss(self, logits: Tensor, m: Tensor) -> tuple[Tensor, Tensor]:
        return reference.c51_loss(logits, m)


class CustomOpGemOps(GemOps):
    """The tune_gems:: custom ops (CUDA kernels on CUDA, the reference on CPU).

    Masks, rewards and discounts are cast to the dtype of the main input (a no-op when they
    already match), because the ops require one dtype per call.
    """

    def __init__(self, name: str) -> None:
        self.name = name

    def g6_branch_indep(self, f: Tensor) -> tuple[None, Tensor]:
        return None, torch.ops.tune_gems.g6_branch_indep(f)

    def g10_temporal(self, q_t: Tensor, q_tp1: Tensor, nd: Tensor) -> tuple[Tensor, Tensor]:
        return torch.ops.tune_gems.g10_temporal(q_t, q_tp1, nd.to(q_t.dtype))

    def g12_predictive(self, pred: Tensor, target: Tensor, nd: Tensor) -> tuple[Tensor, Tensor]:
        return torch.ops.tune_gems.g12_predictive(pred, target, nd.to(pred.dtype))

    def c51_project(self, p: Tensor, r: Tensor, g: Tensor, v_min: float, v_max: float) -> Tensor:
        return torch.ops.tune_gems.c51_project(
            p, r.to(p.dtype), g.to(p.dtype), float(v_min), float(v_max)
        )

    def c51_loss(self, logits: Tensor, m: Tensor) -> tuple[Tensor, Tensor]:
        return torch.ops.tune_gems.c51_loss(logits, m)


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
        return ReferenceGemOps()
    if kernels == "cuda":
        load_extension(device)  # KernelBuildError (one line) if not a CUDA device or no build
        return CustomOpGemOps(CUDA_BACKEND)
    if device.type != "cuda":
        return CustomOpGemOps(REFERENCE_BACKEND)
    try:
        load_extension(device)
    except KernelBuildError as error:
        if first_fallback_warning(str(error)):
            warnings.warn(
                f"kernels=auto: using the reference gems on {device} ({error})",
                RuntimeWarning,
                stacklevel=2,
            )
        return ReferenceGemOps()
    return CustomOpGemOps(CUDA_BACKEND)
