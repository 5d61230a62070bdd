"""The `tune_gems::*` torch.library custom ops: gems, C51 projection and C51 loss.

Each differentiable op has a forward op and a backward op (both custom ops), a fake (meta)
implementation for tracing, and an autograd registration that calls the backward op. The
default implementation (CPU, and CUDA while the extension is not loaded) is the plain-torch
reference; the CUDA implementation calls the JIT-built extension (tune_gems.ops.build).

Ops (P members, B samples, K branches, A sub-actions, D features, N rows):
  g6_branch_indep(f [P,K,B,D]) -> value [P]
  g6_branch_indep_backward(grad_value [P], f) -> grad_f
  g10_temporal(q_t, q_tp1 [P,B,K,A], nd [P,B]) -> (per_sample [P,B], value [P])
  g10_temporal_backward(grad_per_sample?, grad_value, q_t, q_tp1, nd) -> (grad_q_t, grad_q_tp1)
  g12_predictive(pred, target [P,B,D], nd) -> (per_sample, value)
  g12_predictive_backward(grad_per_sample?, grad_value, pred, target, nd) -> grad_pred
  c51_project(p [N,atoms], r [N], g [N], v_min, v_max) -> m [N,atoms]
  c51_loss(logits, m [P,B,K,atoms]) -> (per_sample, value)
  c51_loss_backward(grad_per_sample?, grad_value, logits, m) -> grad_logits

Gradients flow into f, q_t and q_tp1, pred, and logits only: nd is a mask, the G12 target and
the C51 target m come from the target network and get no gradient (None), and c51_project
has none at all (its backward raises). All inputs of one op share one float dtype.

Every op is defined by one factory (`_define`): the reference implementation (CPU, and CUDA
while the extension is not loaded), the extension function it calls on CUDA, its fake, and for
a differentiable op the backward op and how the backward op's outputs map to the inputs. The
CUDA-or-reference choice is one function (`_cuda_or_reference`).

Graph-safe: no host sync, no .item(), no CPU tensors, no branching on tensor values; the
Python branch on "extension loaded" is fixed for a process once the backend is resolved.

This module has no annotations future-import on purpose: torch.library infers each op's
schema from real type annotations.
"""

from types import SimpleNamespace
from typing import Callable, Optional

import torch
from torch import Tensor

from tune_gems.gems import reference
from tune_gems.ops import reference_grads
from tune_gems.ops.build import loaded_extension

NAMESPACE = "tune_gems"
C51_PROJECT_NO_GRAD = (
    "tune_gems::c51_project has no gradient: projected C51 targets carry none "
    "(compute p under torch.no_grad() or pass p.detach())"
)


def _contiguous(args: tuple) -> list:
    return [a.contiguous() if isinstance(a, Tensor) else a for a in args]


def _cuda_or_reference(reference_impl: Callable, extension_function: str) -> Callable:
    """The CUDA implementation of an op: the extension's function when the extension is
    loaded for the device of the first tensor argument, else the reference."""

    def cuda_impl(*args):
        device = next(a.device for a in args if isinstance(a, Tensor))
        extension = loaded_extension(device)  # looked up per call: tests patch it
        if extension is None:
            return reference_impl(*args)
        return getattr(extension, extension_function)(*_contiguous(args))

    return cuda_impl


def _define(name: str, reference_impl: Callable, extension_function: str, fake: Callable):
    """One custom op `tune_gems::<name>` (schema from reference_impl's annotations)."""
    op = torch.library.custom_op(f"{NAMESPACE}::{name}", reference_impl, mutates_args=())
    op.register_kernel("cuda")(_cuda_or_reference(reference_impl, extension_function))
    op.register_fake(fake)
    return op


def _define_differentiable(forward_op, backward_op, n_inputs: int) -> None:
    """Autograd of forward_op through backward_op(*grad_outputs, *inputs), whose outputs are
    the gradients of the leading inputs (the rest, masks and targets, get None)."""

    def setup_context(ctx, inputs, output) -> None:
        ctx.save_for_backward(*(x for x in inputs if isinstance(x, Tensor)))

    def backward(ctx, *grad_outputs):
        grads = backward_op(*grad_outputs, *ctx.saved_tensors)
        grads = (grads,) if isinstance(grads, Tensor) else tuple(grads)
        return (*grads, *([None] * (n_inputs - len(grads))))

    forward_op.register_autograd(backward, setup_context=setup_context)


def _per_sample_and_value(x: Tensor, *_: object) -> tuple[Tensor, Tensor]:
    """Fake of a (per_sample [P,B], value [P]) op whose first input is [P,B,...]."""
    return x.new_empty((x.shape[0], x.shape[1])), x.new_empty((x.shape[0],))


def _like(*shapes_of: int) -> Callable:
    """Fake of a backward op: empty tensors shaped like the tensor arguments at these indices."""

    def fake(*args):
        out = tuple(args[i].new_empty(args[i].shape) for i in shapes_of)
        return out[0] if len(out) == 1 else out

    return fake


# ---------------------------------------------------------------- reference implementations
# (real annotations: torch.library infers each op's schema from them)


def _g6_reference(f: Tensor) -> Tensor:
    """G6 value [P] of f [P,K,B,D]."""
    return reference.g6_branch_indep(f)[1].contiguous()


def _g6_backward_reference(grad_value: Tensor, f: Tensor) -> Tensor:
    """grad_f [P,K,B,D] of G6 given grad_value [P]."""
    return reference_grads.g6_branch_indep_grad(grad_value, f)


def _g10_reference(q_t: Tensor, q_tp1: Tensor, nd: Tensor) -> tuple[Tensor, Tensor]:
    """G10 (per_sample [P,B], value [P]) of q_t, q_tp1 [P,B,K,A] and nd [P,B]."""
    per_sample, value = reference.g10_temporal(q_t, q_tp1, nd)
    return per_sample.contiguous(), value.contiguous()


def _g10_backward_reference(
    grad_per_sample: Optional[Tensor], grad_value: Tensor, q_t: Tensor, q_tp1: Tensor, nd: Tensor
) -> tuple[Tensor, Tensor]:
    """(grad_q_t, grad_q_tp1 = -grad_q_t) of G10."""
    return reference_grads.g10_temporal_grads(grad_per_sample, grad_value, q_t, q_tp1, nd)


def _g12_reference(pred: Tensor, target: Tensor, nd: Tensor) -> tuple[Tensor, Tensor]:
    """G12 (per_sample [P,B], value [P]) of pred, target [P,B,D] and nd [P,B]."""
    per_sample, value = reference.g12_predictive(pred, target, nd)
    return per_sample.contiguous(), value.contiguous()


def _g12_backward_reference(
    grad_per_sample: Optional[Tensor], grad_value: Tensor, pred: Tensor, target: Tensor, nd: Tensor
) -> Tensor:
    """grad_pred of G12 (target gets none)."""
    return reference_grads.g12_predictive_grad(grad_per_sample, grad_value, pred, target, nd)


def _c51_project_reference(p: Tensor, r: Tensor, g: Tensor, v_min: float, v_max: float) -> Tensor:
    """Projected target distribution m [N,atoms] (gather form)."""
    return reference.c51_project(p, r, g, v_min, v_max).contiguous()


def _c51_loss_reference(logits: Tensor, m: Tensor) -> tuple[Tensor, Tensor]:
    """C51 cross-entropy (per_sample [P,B], value [P]) of logits, m [P,B,K,atoms]."""
    per_sample, value = reference.c51_loss(logits, m)
    return per_sample.contiguous(), value.contiguous()


def _c51_loss_backward_reference(
    grad_per_sample: Optional[Tensor], grad_value: Tensor, logits: Tensor, m: Tensor
) -> Tensor:
    """grad_logits of the C51 loss (m gets none)."""
    return reference_grads.c51_loss_grad(grad_per_sample, grad_value, logits, m)


# ---------------------------------------------------------------- the ops

g6_branch_indep = _define("g6_branch_indep", _g6_reference, "g6_forward", lambda f: f.new_empty((f.shape[0],)))
g6_branch_indep_backward = _define("g6_branch_indep_backward", _g6_backward_reference, "g6_backward", _like(1))
_define_differentiable(g6_branch_indep, g6_branch_indep_backward, n_inputs=1)

g10_temporal = _define("g10_temporal", _g10_reference, "g10_forward", _per_sample_and_value)
g10_temporal_backward = _define("g10_temporal_backward", _g10_backward_reference, "g10_backward", _like(2, 3))
_define_differentiable(g10_temporal, g10_temporal_backward, n_inputs=3)

g12_predictive = _define("g12_predictive", _g12_reference, "g12_forward", _per_sample_and_value)
g12_predictive_backward = _define("g12_predictive_backward", _g12_backward_reference, "g12_backward", _like(2))
_define_differentiable(g12_predictive, g12_predictive_backward, n_inputs=3)

c51_project = _define("c51_project", _c51_project_reference, "c51_project", lambda p, *_: p.new_empty(p.shape))


def _c51_project_autograd_backward(ctx, grad_m: Tensor):
    raise RuntimeError(C51_PROJECT_NO_GRAD)


c51_project.register_autograd(_c51_project_autograd_backward)

c51_loss = _define("c51_loss", _c51_loss_reference, "c51_loss_forward", _per_sample_and_value)
c51_loss_backward = _define("c51_loss_backward", _c51_loss_backward_reference, "c51_loss_backward", _like(2))
_define_differentiable(c51_loss, c51_loss_backward, n_inputs=2)


# ---------------------------------------------------------------- reference-signature calls

FUSED = SimpleNamespace(
    g6_branch_indep=lambda f: (None, torch.ops.tune_gems.g6_branch_indep(f)),
    g10_temporal=lambda q_t, q_tp1, nd: torch.ops.tune_gems.g10_temporal(q_t, q_tp1, nd.to(q_t.dtype)),
    g12_predictive=lambda pred, target, nd: torch.ops.tune_gems.g12_predictive(pred, target, nd.to(pred.dtype)),
    c51_project=lambda p, r, g, v_min, v_max: torch.ops.tune_gems.c51_project(
        p, r.to(p.dtype), g.to(p.dtype), float(v_min), float(v_max)
    ),
    c51_loss=lambda logits, m: torch.ops.tune_gems.c51_loss(logits, m),
)
"""The ops with the signatures and returns of tune_gems.gems.reference. Masks, rewards and
discounts are cast to the main input's dtype (a no-op when they match): an op takes one dtype."""
