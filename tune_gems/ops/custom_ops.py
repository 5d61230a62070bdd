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

Graph-safe: no host sync, no .item(), no CPU tensors, no branching on tensor values; the
Python branch on "extension loaded" is fixed for a process once the backend is resolved.

This module has no annotations future-import on purpose: torch.library infers each op's
schema from real type annotations.
"""

from typing import Optional

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


def _op_name(name: str) -> str:
    return f"{NAMESPACE}::{name}"


def _contiguous(*tensors: Optional[Tensor]) -> list[Optional[Tensor]]:
    return [None if t is None else t.contiguous() for t in tensors]


def _save_tensor_inputs(ctx, inputs, output) -> None:
    ctx.save_for_backward(*(x for x in inputs if isinstance(x, Tensor)))


# ============================================================== G6 branch independence


def _g6_reference(f: Tensor) -> Tensor:
    """G6 value [P] of f [P,K,B,D]."""
    return reference.g6_branch_indep(f)[1].contiguous()


def _g6_backward_reference(grad_value: Tensor, f: Tensor) -> Tensor:
    """grad_f [P,K,B,D] of G6 given grad_value [P]."""
    return reference_grads.g6_branch_indep_grad(grad_value, f)


g6_branch_indep = torch.library.custom_op(_op_name("g6_branch_indep"), _g6_reference, mutates_args=())
g6_branch_indep_backward = torch.library.custom_op(
    _op_name("g6_branch_indep_backward"), _g6_backward_reference, mutates_args=()
)


@g6_branch_indep.register_kernel("cuda")
def _g6_cuda(f: Tensor) -> Tensor:
    extension = loaded_extension(f.device)
    if extension is None:
        return _g6_reference(f)
    return extension.g6_forward(f.contiguous())


@g6_branch_indep_backward.register_kernel("cuda")
def _g6_backward_cuda(grad_value: Tensor, f: Tensor) -> Tensor:
    extension = loaded_extension(f.device)
    if extension is None:
        return _g6_backward_reference(grad_value, f)
    return extension.g6_backward(*_contiguous(grad_value, f))


@g6_branch_indep.register_fake
def _g6_fake(f: Tensor) -> Tensor:
    return f.new_empty((f.shape[0],))


@g6_branch_indep_backward.register_fake
def _g6_backward_fake(grad_value: Tensor, f: Tensor) -> Tensor:
    return f.new_empty(f.shape)


def _g6_autograd_backward(ctx, grad_value: Tensor):
    (f,) = ctx.saved_tensors
    return torch.ops.tune_gems.g6_branch_indep_backward(grad_value, f)


g6_branch_indep.register_autograd(_g6_autograd_backward, setup_context=_save_tensor_inputs)


# ============================================================== G10 temporal consistency


def _g10_reference(q_t: Tensor, q_tp1: Tensor, nd: Tensor) -> tuple[Tensor, Tensor]:
    """G10 (per_sample [P,B], value [P]) of q_t, q_tp1 [P,B,K,A] and nd [P,B]."""
    per_sample, value = reference.g10_temporal(q_t, q_tp1, nd)
    return per_sample.contiguous(), value.contiguous()


def _g10_backward_reference(
    grad_per_sample: Optional[Tensor], grad_value: Tensor, q_t: Tensor, q_tp1: Tensor, nd: Tensor
) -> tuple[Tensor, Tensor]:
    """(grad_q_t, grad_q_tp1 = -grad_q_t) of G10."""
    return reference_grads.g10_temporal_grads(grad_per_sample, grad_value, q_t, q_tp1, nd)


g10_temporal = torch.library.custom_op(_op_name("g10_temporal"), _g10_reference, mutates_args=())
g10_temporal_backward = torch.library.custom_op(
    _op_name("g10_temporal_backward"), _g10_backward_reference, mutates_args=()
)


@g10_temporal.register_kernel("cuda")
def _g10_cuda(q_t: Tensor, q_tp1: Tensor, nd: Tensor) -> tuple[Tensor, Tensor]:
    extension = loaded_extension(q_t.device)
    if extension is None:
        return _g10_reference(q_t, q_tp1, nd)
    return extension.g10_forward(*_contiguous(q_t, q_tp1, nd))


@g10_temporal_backward.register_kernel("cuda")
def _g10_backward_cuda(
    grad_per_sample: Optional[Tensor], grad_value: Tensor, q_t: Tensor, q_tp1: Tensor, nd: Tensor
) -> tuple[Tensor, Tensor]:
    extension = loaded_extension(q_t.device)
    if extension is None:
        return _g10_backward_reference(grad_per_sample, grad_value, q_t, q_tp1, nd)
    return extension.g10_backward(*_contiguous(grad_per_sample, grad_value, q_t, q_tp1, nd))


@g10_temporal.register_fake
def _g10_fake(q_t: Tensor, q_tp1: Tensor, nd: Tensor) -> tuple[Tensor, Tensor]:
    P, B = q_t.shape[0], q_t.shape[1]
    return q_t.new_empty((P, B)), q_t.new_empty((P,))


@g10_temporal_backward.register_fake
def _g10_backward_fake(
    grad_per_sample: Optional[Tensor], grad_value: Tensor, q_t: Tensor, q_tp1: Tensor, nd: Tensor
) -> tuple[Tensor, Tensor]:
    return q_t.new_empty(q_t.shape), q_t.new_empty(q_t.shape)


def _g10_autograd_backward(ctx, grad_per_sample: Tensor, grad_value: Tensor):
    q_t, q_tp1, nd = ctx.saved_tensors
    grad_q_t, grad_q_tp1 = torch.ops.tune_gems.g10_temporal_backward(
        grad_per_sample, grad_value, q_t, q_tp1, nd
    )
    return grad_q_t, grad_q_tp1, None


g10_temporal.register_autograd(_g10_autograd_backward, setup_context=_save_tensor_inputs)


# ============================================================== G12 predictive coding


def _g12_reference(pred: Tensor, target: Tensor, nd: Tensor) -> tuple[Tensor, Tensor]:
    """G12 (per_sample [P,B], value [P]) of pred, target [P,B,D] and nd [P,B]."""
    per_sample, value = reference.g12_predictive(pred, target, nd)
    return per_sample.contiguous(), value.contiguous()


def _g12_backward_reference(
    grad_per_sample: Optional[Tensor], grad_value: Tensor, pred: Tensor, target: Tensor, nd: Tensor
) -> Tensor:
    """grad_pred of G12 (target gets none)."""
    return reference_grads.g12_predictive_grad(grad_per_sample, grad_value, pred, target, nd)


g12_predictive = torch.library.custom_op(_op_name("g12_predictive"), _g12_reference, mutates_args=())
g12_predictive_backward = torch.library.custom_op(
    _op_name("g12_predictive_backward"), _g12_backward_reference, mutates_args=()
)


@g12_predictive.register_kernel("cuda")
def _g12_cuda(pred: Tensor, target: Tensor, nd: Tensor) -> tuple[Tensor, Tensor]:
    extension = loaded_extension(pred.device)
    if extension is None:
        return _g12_reference(pred, target, nd)
    return extension.g12_forward(*_contiguous(pred, target, nd))


@g12_predictive_backward.register_kernel("cuda")
def _g12_backward_cuda(
    grad_per_sample: Optional[Tensor], grad_value: Tensor, pred: Tensor, target: Tensor, nd: Tensor
) -> Tensor:
    extension = loaded_extension(pred.device)
    if extension is None:
        return _g12_backward_reference(grad_per_sample, grad_value, pred, target, nd)
    return extension.g12_backward(*_contiguous(grad_per_sample, grad_value, pred, target, nd))


@g12_predictive.register_fake
def _g12_fake(pred: Tensor, target: Tensor, nd: Tensor) -> tuple[Tensor, Tensor]:
    P, B = pred.shape[0], pred.shape[1]
    return pred.new_empty((P, B)), pred.new_empty((P,))


@g12_predictive_backward.register_fake
def _g12_backward_fake(
    grad_per_sample: Optional[Tensor], grad_value: Tensor, pred: Tensor, target: Tensor, nd: Tensor
) -> Tensor:
    return pred.new_empty(pred.shape)


def _g12_autograd_backward(ctx, grad_per_sample: Tensor, grad_value: Tensor):
    pred, target, nd = ctx.saved_tensors
    grad_pred = torch.ops.tune_gems.g12_predictive_backward(
        grad_per_sample, grad_value, pred, target, nd
    )
    return grad_pred, None, None


g12_predictive.register_autograd(_g12_autograd_backward, setup_context=_save_tensor_inputs)


# ============================================================== C51 projection


def _c51_project_reference(p: Tensor, r: Tensor, g: Tensor, v_min: float, v_max: float) -> Tensor:
    """Projected target distribution m [N,atoms] (gather form)."""
    return reference.c51_project(p, r, g, v_min, v_max).contiguous()


c51_project = torch.library.custom_op(
    _op_name("c51_project"), _c51_project_reference, mutates_args=()
)


@c51_project.register_kernel("cuda")
def _c51_project_cuda(p: Tensor, r: Tensor, g: Tensor, v_min: float, v_max: float) -> Tensor:
    extension = loaded_extension(p.device)
    if extension is None:
        return _c51_project_reference(p, r, g, v_min, v_max)
    p, r, g = _contiguous(p, r, g)
    return extension.c51_project(p, r, g, v_min, v_max)


@c51_project.register_fake
def _c51_project_fake(p: Tensor, r: Tensor, g: Tensor, v_min: float, v_max: float) -> Tensor:
    return p.new_empty(p.shape)


def _c51_project_autograd_backward(ctx, grad_m: Tensor):
    raise RuntimeError(C51_PROJECT_NO_GRAD)


c51_project.register_autograd(_c51_project_autograd_backward)


# ============================================================== C51 loss


def _c51_loss_reference(logits: Tensor, m: Tensor) -> tuple[Tensor, Tensor]:
    """C51 cross-entropy (per_sample [P,B], value [P]) of logits, m [P,B,K,atoms]."""
    per_sample, value = reference.c51_loss(logits, m)
    return per_sample.contiguous(), value.contiguous()


def _c51_loss_backward_reference(
    grad_per_sample: Optional[Tensor], grad_value: Tensor, logits: Tensor, m: Tensor
) -> Tensor:
    """grad_logits of the C51 loss (m gets none)."""
    return reference_grads.c51_loss_grad(grad_per_sample, grad_value, logits, m)


c51_loss = torch.library.custom_op(_op_name("c51_loss"), _c51_loss_reference, mutates_args=())
c51_loss_backward = torch.library.custom_op(
    _op_name("c51_loss_backward"), _c51_loss_backward_reference, mutates_args=()
)


@c51_loss.register_kernel("cuda")
def _c51_loss_cuda(logits: Tensor, m: Tensor) -> tuple[Tensor, Tensor]:
    extension = loaded_extension(logits.device)
    if extension is None:
        return _c51_loss_reference(logits, m)
    return extension.c51_loss_forward(*_contiguous(logits, m))


@c51_loss_backward.register_kernel("cuda")
def _c51_loss_backward_cuda(
    grad_per_sample: Optional[Tensor], grad_value: Tensor, logits: Tensor, m: Tensor
) -> Tensor:
    extension = loaded_extension(logits.device)
    if extension is None:
        return _c51_loss_backward_reference(grad_per_sample, grad_value, logits, m)
    return extension.c51_loss_backward(*_contiguous(grad_per_sample, grad_value, logits, m))


@c51_loss.register_fake
def _c51_loss_fake(logits: Tensor, m: Tensor) -> tuple[Tensor, Tensor]:
    P, B = logits.shape[0], logits.shape[1]
    return logits.new_empty((P, B)), logits.new_empty((P,))


@c51_loss_backward.register_fake
def _c51_loss_backward_fake(
    grad_per_sample: Optional[Tensor], grad_value: Tensor, logits: Tensor, m: Tensor
) -> Tensor:
    return logits.new_empty(logits.shape)


def _c51_loss_autograd_backward(ctx, grad_per_sample: Tensor, grad_value: Tensor):
    logits, m = ctx.saved_tensors
    grad_logits = torch.ops.tune_gems.c51_loss_backward(grad_per_sample, grad_value, logits, m)
    return grad_logits, None


c51_loss.register_autograd(_c51_loss_autograd_backward, setup_context=_save_tensor_inputs)
