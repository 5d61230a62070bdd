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
from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor

from tune_gems.contracts.errors import ConfigError, KernelBuildError
from tune_gems.ops import reference
from tune_gems.ops import custom_ops  # registers the tune_gems:: ops
from tune_gems.ops import double_dqn, dueling_head
from tune_gems.ops.build import first_fallback_warning, load_extension

KERNEL_CHOICES = ("auto", "cuda", "reference")
CUDA_BACKEND = "cuda"
REFERENCE_BACKEND = "reference"


@dataclass(frozen=True)
class GemOps:
    """The gem and C51 functions of one backend, with the signatures and returns of
    tune_gems.ops.reference (plain functions: one call path for every backend).

    `name` is "cuda" when the CUDA kernels run, "reference" when the reference math does;
    `fused` is True when the calls go through the tune_gems:: custom ops (CUDA kernels on CUDA,
    the reference with closed-form gradients on CPU), False for the plain reference functions.
    A gem's `fused` implementation (tune_gems.gems.Gem) is used exactly when `fused` is True.
    """

    name: str
    fused: bool
    g6_branch_indep: Callable[..., tuple]  # f [P,K,B,D] -> (None, value [P])
    g10_temporal: Callable[..., tuple]  # q_t, q_tp1 [P,B,K,A], nd [P,B] -> (per_sample [P,B], value [P])
    g12_predictive: Callable[..., tuple]  # pred, target [P,B,D], nd [P,B] -> (per_sample, value)
    c51_project: Callable[..., Tensor]  # p [N,atoms], r [N], g [N], v_min, v_max -> m [N,atoms]
    c51_loss: Callable[..., tuple]  # logits, m [P,B,K,atoms] -> (per_sample [P,B], value [P])
    # online, target logits [...,K,A,atoms], support [atoms] -> p_next [...,K,atoms] (no grad)
    c51_target: Callable[..., Tensor]
    # value [P,N,atoms], adv [P,K,N,A,atoms], support, action [P,R,K] -> (q [P,N,K,A],
    # taken log-probabilities [P,R,K,atoms]): the dueling-C51 head (tune_gems.ops.dueling_head)
    dueling_c51: Callable[..., tuple]


_FUNCTIONS = ("g6_branch_indep", "g10_temporal", "g12_predictive", "c51_project", "c51_loss", "c51_target", "dueling_c51")


def _reference_function(name: str) -> Callable:
    """The plain reference of one GemOps function (tune_gems.ops.reference, the double-DQN
    target of tune_gems.ops.double_dqn, the dueling head of tune_gems.ops.dueling_head)."""
    if name == "c51_target":
        return double_dqn.c51_target_in_online_dtype
    if name == "dueling_c51":
        return dueling_head.dueling_c51
    return getattr(reference, name)


def reference_ops() -> GemOps:
    """The plain-torch reference, called directly (any device, plain torch autograd)."""
    return GemOps(REFERENCE_BACKEND, False, **{f: _reference_function(f) for f in _FUNCTIONS})


def custom_op_ops(name: str) -> GemOps:
    """The tune_gems:: custom ops; `name` says which math runs under them."""
    return GemOps(name, True, **{f: getattr(custom_ops.FUSED, f) for f in _FUNCTIONS})


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
