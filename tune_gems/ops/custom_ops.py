"""The `tune_gems::*` torch.library custom ops (docs/design.md "Ops and kernels"; shapes in
ops/reference.py), graph-safe: no host sync, no branch on tensor values. No annotations
future-import: torch.library infers each schema from them."""

from dataclasses import dataclass
from typing import Callable, Optional

import torch
from torch import Tensor

from tune_gems.ops import double_dqn, dueling_head, reference, reference_grads
from tune_gems.ops.build import loaded_extension

NAMESPACE = "tune_gems"
C51_PROJECT_NO_GRAD = (
    "tune_gems::c51_project has no gradient: projected C51 targets carry none "
    "(compute p under torch.no_grad() or pass p.detach())"
)
C51_TARGET_NO_GRAD = (
    "tune_gems::c51_target has no gradient: the double-DQN target carries none "
    "(call it under torch.no_grad() or pass detached logits)"
)


def _contiguous(args: tuple) -> list:
    return [a.contiguous() if isinstance(a, Tensor) else a for a in args]


def _cuda_or_reference(reference_impl: Callable, extension_function: str) -> Callable:
    """An op's CUDA implementation: the extension's function once loaded, else the reference."""

    def cuda_impl(*args):
        device = next(a.device for a in args if isinstance(a, Tensor))
        extension = loaded_extension(device)  # looked up per call: tests patch it
        if extension is None:
            return reference_impl(*args)
        return getattr(extension, extension_function)(*_contiguous(args))

    return cuda_impl


_LIBRARY = torch.library.Library(NAMESPACE, "FRAGMENT")


def _define(name: str, reference_impl: Callable, extension_function: str, fake: Callable) -> torch._ops.OpOverload:
    """One custom op `tune_gems::<name>`, through the low-level `Library`: `custom_op`'s wrapper imports
    torch._dynamo (seconds)."""
    schema = torch.library.infer_schema(reference_impl, mutates_args=())
    _LIBRARY.define(f"{name}{schema}")
    _LIBRARY.impl(name, reference_impl, "CompositeExplicitAutograd")
    _LIBRARY.impl(name, _cuda_or_reference(reference_impl, extension_function), "CUDA")
    torch.library.register_fake(f"{NAMESPACE}::{name}", fake, lib=_LIBRARY)
    return getattr(torch.ops.tune_gems, name).default


def _register_autograd(op: torch._ops.OpOverload, backward: Callable, setup_context: Optional[Callable] = None) -> None:
    torch.library.register_autograd(op, backward, setup_context=setup_context, lib=_LIBRARY)


def _saved_inputs(inputs: tuple, output) -> tuple:
    return tuple(x for x in inputs if isinstance(x, Tensor))


def _value_grad(grad_per_sample: Optional[Tensor], grad_value: Optional[Tensor], shape_of: Tensor):
    """(grad_per_sample or None, grad_value or zeros [P]): only a per-sample gradient may be None."""
    if grad_value is None:
        grad_value = grad_per_sample.new_zeros(shape_of.shape[0])
    return grad_per_sample, grad_value


def _define_differentiable(forward_op, backward_op, n_inputs: int, saved: Callable = _saved_inputs,
        differentiable_outputs: int = 0, per_sample_value: bool = True) -> None:
    """Autograd of forward_op through backward_op; only the first `differentiable_outputs` (0: all) carry one."""

    def setup_context(ctx, inputs, output) -> None:
        ctx.set_materialize_grads(False)
        if differentiable_outputs:
            ctx.mark_non_differentiable(*output[differentiable_outputs:])
        ctx.save_for_backward(*saved(inputs, output))

    def backward(ctx, *grad_outputs):
        if differentiable_outputs:
            grad_outputs = grad_outputs[:differentiable_outputs]
        if all(g is None for g in grad_outputs):
            return (None,) * n_inputs
        if per_sample_value and len(grad_outputs) == 2:  # (per_sample, value)
            grad_outputs = _value_grad(*grad_outputs, shape_of=ctx.saved_tensors[0])
        grads = backward_op(*grad_outputs, *ctx.saved_tensors)
        grads = (grads,) if isinstance(grads, Tensor) else tuple(grads)
        return (*grads, *([None] * (n_inputs - len(grads))))

    _register_autograd(forward_op, backward, setup_context=setup_context)


def _per_sample_and_value(x: Tensor, *_: object) -> tuple[Tensor, Tensor]:
    return x.new_empty((x.shape[0], x.shape[1])), x.new_empty((x.shape[0],))


def _like(*shapes_of: int) -> Callable:
    """Fake of a backward op: empty tensors shaped like the arguments at these indices."""

    def fake(*args):
        out = tuple(args[i].new_empty(args[i].shape) for i in shapes_of)
        return out[0] if len(out) == 1 else out

    return fake


def _g6_reference(f: Tensor) -> Tensor:
    return reference.g6_branch_indep(f)[1].contiguous()


def _g6_backward_reference(grad_value: Tensor, f: Tensor) -> Tensor:
    return reference_grads.g6_branch_indep_grad(grad_value, f)


def _g10_reference(q_t: Tensor, q_tp1: Tensor, nd: Tensor) -> tuple[Tensor, Tensor]:
    per_sample, value = reference.g10_temporal(q_t, q_tp1, nd)
    return per_sample.contiguous(), value.contiguous()


def _g10_backward_reference(grad_per_sample: Optional[Tensor], grad_value: Tensor, q_t: Tensor, q_tp1: Tensor,
        nd: Tensor) -> tuple[Tensor, Tensor]:
    return reference_grads.g10_temporal_grads(grad_per_sample, grad_value, q_t, q_tp1, nd)


def _g12_reference(pred: Tensor, target: Tensor, nd: Tensor) -> tuple[Tensor, Tensor]:
    per_sample, value = reference.g12_predictive(pred, target, nd)
    return per_sample.contiguous(), value.contiguous()


def _g12_backward_reference(grad_per_sample: Optional[Tensor], grad_value: Tensor, pred: Tensor, target: Tensor,
        nd: Tensor) -> Tensor:
    return reference_grads.g12_predictive_grad(grad_per_sample, grad_value, pred, target, nd)


def _c51_project_reference(p: Tensor, r: Tensor, g: Tensor, v_min: float, v_max: float) -> Tensor:
    return reference.c51_project(p, r, g, v_min, v_max).contiguous()


def _c51_target_reference(online_logits: Tensor, target_logits: Tensor, support: Tensor) -> Tensor:
    return double_dqn.c51_target(online_logits, target_logits, support).contiguous()


def _c51_loss_reference(logits: Tensor, m: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    per_sample, value = reference.c51_loss(logits, m)
    residual = reference_grads.c51_loss_residual(logits, m)
    return per_sample.contiguous(), value.contiguous(), residual


def _c51_loss_backward_reference(grad_per_sample: Optional[Tensor], grad_value: Tensor, residual: Tensor) -> Tensor:
    return reference_grads.c51_loss_grad_from_residual(grad_per_sample, grad_value, residual)


def _dueling_c51_reference(value: Tensor, adv: Tensor, support: Tensor, action: Tensor) -> tuple[Tensor, Tensor]:
    return dueling_head.dueling_c51(value, adv, support, action)


def _dueling_c51_backward_reference(grad_q: Optional[Tensor], grad_log_probs: Optional[Tensor], value: Tensor,
        adv: Tensor, support: Tensor, action: Tensor) -> tuple[Tensor, Tensor]:
    return dueling_head.dueling_c51_grads(grad_q, grad_log_probs, value, adv, support, action)


def _dueling_c51_fake(value: Tensor, adv: Tensor, support: Tensor, action: Tensor) -> tuple[Tensor, Tensor]:
    P, K, N, A, atoms = adv.shape
    return value.new_empty((P, N, K, A)), value.new_empty((P, action.shape[1], K, atoms))


def _c51_loss_fake(logits: Tensor, m: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    per_sample, value = _per_sample_and_value(logits)
    return per_sample, value, logits.new_empty(logits.shape)


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


_register_autograd(c51_project, _c51_project_autograd_backward)

c51_target = _define(
    "c51_target", _c51_target_reference, "c51_target",
    lambda online, *_: online.new_empty((online.shape[0], online.shape[1], online.shape[3])),
)


def _c51_target_autograd_backward(ctx, grad_p: Tensor):
    raise RuntimeError(C51_TARGET_NO_GRAD)


_register_autograd(c51_target, _c51_target_autograd_backward)

c51_loss = _define("c51_loss", _c51_loss_reference, "c51_loss_forward", _c51_loss_fake)
c51_loss_backward = _define("c51_loss_backward", _c51_loss_backward_reference, "c51_loss_backward", _like(2))
_define_differentiable(
    c51_loss, c51_loss_backward, n_inputs=2,
    saved=lambda inputs, output: (output[2],),  # the residual: no second softmax in backward
    differentiable_outputs=2,
)


dueling_c51 = _define("dueling_c51", _dueling_c51_reference, "dueling_c51_forward", _dueling_c51_fake)
dueling_c51_backward = _define("dueling_c51_backward", _dueling_c51_backward_reference, "dueling_c51_backward",
    _like(2, 3))
_define_differentiable(dueling_c51, dueling_c51_backward, n_inputs=4, per_sample_value=False)


def _fused_c51_target(online_logits: Tensor, target_logits: Tensor, support: Tensor) -> Tensor:
    """tune_gems::c51_target on logits [..., K, A, atoms], in online_logits' dtype."""
    *lead, K, A, atoms = online_logits.shape
    dtype = online_logits.dtype
    p_next = torch.ops.tune_gems.c51_target(online_logits.reshape(-1, K, A, atoms),
        target_logits.to(dtype).reshape(-1, K, A, atoms), support.to(dtype))
    return p_next.view(*lead, K, atoms)


@dataclass(frozen=True)
class OpCall:
    """One op: its plain reference and the custom-op call (`fused`), masks and rewards cast to one dtype."""

    reference: Callable
    fused: Callable


OP_TABLE: dict[str, OpCall] = {
    # gems: a built-in gem's `fused` (tune_gems.builtin_gems) calls its row here
    "g6_branch_indep": OpCall(reference.g6_branch_indep, lambda f: (None, torch.ops.tune_gems.g6_branch_indep(f))),
    "g10_temporal": OpCall(
        reference.g10_temporal, lambda q_t, q_tp1, nd: torch.ops.tune_gems.g10_temporal(q_t, q_tp1, nd.to(q_t.dtype))
    ),
    "g12_predictive": OpCall(
        reference.g12_predictive, lambda pred, target, nd: torch.ops.tune_gems.g12_predictive(pred, target, nd.to(pred.dtype))
    ),
    # the C51 head and target: what the learner calls through its backend (tune_gems.ops.backend.GemOps)
    "c51_project": OpCall(reference.c51_project, lambda p, r, g, v_min, v_max: torch.ops.tune_gems.c51_project(
        p, r.to(p.dtype), g.to(p.dtype), float(v_min), float(v_max)
    )),
    "c51_loss": OpCall(reference.c51_loss, lambda logits, m: tuple(torch.ops.tune_gems.c51_loss(logits, m)[:2])),
    "c51_target": OpCall(double_dqn.c51_target_in_online_dtype, _fused_c51_target),
    "dueling_c51": OpCall(dueling_head.dueling_c51, lambda value, adv, support, action: tuple(
        torch.ops.tune_gems.dueling_c51(value, adv.to(value.dtype), support.to(value.dtype), action)
    )),
}
"""Every op, once: the backend's functions and the built-in gems' `fused` are its rows (docs/gems.md)."""
