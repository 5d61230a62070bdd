"""Closed-form gradients of the reference gems and C51 loss, what the backward ops run on CPU (an op
runs below autograd's dispatch key); tested against torch.autograd and gradcheck."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from tune_gems.ops.reference import G6_EPS_REL, g6_eps


def sample_weight(grad_per_sample: Tensor | None, grad_value: Tensor, B: int) -> Tensor:
    """Upstream gradient reaching per_sample[p,b]: its own plus grad_value[p]/B via the mean."""
    from_value = (grad_value / B).unsqueeze(1)
    return from_value if grad_per_sample is None else grad_per_sample + from_value


def g6_branch_indep_grad(grad_value: Tensor, f: Tensor) -> Tensor:
    """d/df of grad_value . g6_branch_indep(f), through z = (f - mean) / sd and `reference.g6_eps`."""
    P, K, B, D = f.shape
    if K < 2:
        return torch.zeros_like(f, memory_format=torch.contiguous_format)
    mean = f.mean(dim=2, keepdim=True)
    centred = f - mean
    var = centred.pow(2).mean(dim=2, keepdim=True)
    sd = torch.sqrt(var + g6_eps(var))
    z = centred / sd
    R = torch.einsum("pkbi,plbj->pklij", z, z) / B  # R[p,k,l] = R_kl, all k,l
    off_diagonal = ~torch.eye(K, dtype=torch.bool, device=f.device)
    R = R * off_diagonal.view(1, K, K, 1, 1).to(R.dtype)
    npairs = K * (K - 1) // 2
    scale = grad_value.view(P, 1, 1, 1) * (2.0 / (npairs * D * D * B))
    grad_z = torch.einsum("pklij,plbj->pkbi", R, z) * scale
    mean_gz = (grad_z * z).mean(dim=2, keepdim=True)  # [P,K,1,D]
    grad_f = (grad_z - grad_z.mean(dim=2, keepdim=True) - z * mean_gz) / sd
    # through the floor eps = G6_EPS_REL mean_d var_d: dL/df_bd += G z_bd sd_d with
    # G = -(G6_EPS_REL / D) sum_d mean_B(g z)_d / sd_d^2 (per member and branch)
    G = -(G6_EPS_REL / D) * (mean_gz / sd.pow(2)).sum(dim=3, keepdim=True)
    grad_f = grad_f + G * z * sd
    return grad_f.contiguous()


def masked_mse_grad(grad_per_sample: Tensor | None, grad_value: Tensor, a: Tensor, b: Tensor, nd: Tensor) -> Tensor:
    """d/da of per_sample = nd * mean_{trailing dims} (a - b)^2 (G10, G12); d/db is its negative."""
    B = a.shape[1]
    width = math.prod(a.shape[2:])
    weight = sample_weight(grad_per_sample, grad_value, B) * nd  # [P,B]
    weight = weight[(...,) + (None,) * (a.dim() - 2)]
    return (weight * (2.0 / width) * (a - b)).contiguous()


def g10_temporal_grads(grad_per_sample: Tensor | None, grad_value: Tensor, q_t: Tensor, q_tp1: Tensor,
        nd: Tensor) -> tuple[Tensor, Tensor]:
    grad_q_t = masked_mse_grad(grad_per_sample, grad_value, q_t, q_tp1, nd)
    return grad_q_t, -grad_q_t


def g12_predictive_grad(grad_per_sample: Tensor | None, grad_value: Tensor, pred: Tensor, target: Tensor,
        nd: Tensor) -> Tensor:
    return masked_mse_grad(grad_per_sample, grad_value, pred, target, nd)


def c51_loss_residual(logits: Tensor, m: Tensor) -> Tensor:
    """d/dlogits of each row's cross-entropy: softmax * sum_j m_j - m, saved by the loss's forward."""
    softmax = torch.softmax(logits, dim=-1)
    return (softmax * m.sum(dim=-1, keepdim=True) - m).contiguous()


def c51_loss_grad_from_residual(grad_per_sample: Tensor | None, grad_value: Tensor, residual: Tensor) -> Tensor:
    B, K = residual.shape[1], residual.shape[2]
    weight = sample_weight(grad_per_sample, grad_value, B)[..., None, None] / K
    return (weight * residual).contiguous()


def c51_loss_grad(grad_per_sample: Tensor | None, grad_value: Tensor, logits: Tensor, m: Tensor) -> Tensor:
    """d/dlogits of the C51 loss without a saved residual (the tests' oracle)."""
    return c51_loss_grad_from_residual(grad_per_sample, grad_value, c51_loss_residual(logits, m))
