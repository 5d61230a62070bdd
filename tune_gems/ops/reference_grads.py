"""Closed-form gradients of the reference gems and C51 loss, in plain torch.

The backward custom ops run these on CPU (and on CUDA when the extension is not loaded).
They are written out, rather than obtained with torch.autograd on the reference, because an
op implementation runs below the autograd dispatch key where autograd does not record. They
are the same formulas the CUDA kernels implement, and the tests check them against
torch.autograd on tune_gems.ops.reference and with gradcheck.

`grad_per_sample` [P,B] may be None (the per-sample output was not used); `grad_value` [P].
"""

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
    """d/df of grad_value . g6_branch_indep(f). f [P,K,B,D] -> [P,K,B,D].

    value = mean over pairs k<l and i,j of R_kl[i,j]^2 with R_kl = z_k^T z_l / B, so
    dvalue/dz_k[b,i] = 2/(npairs D^2 B) sum_{l!=k} sum_j R_kl[i,j] z_l[b,j]; then through
    z = (f - mean) / sd:  dL/df_b = (g_b - mean_B g - z_b mean_B(g z)) / sd, plus the path
    through the branch's floor eps (reference.g6_eps), which depends on every feature's variance.
    """
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


def masked_mse_grad(
    grad_per_sample: Tensor | None, grad_value: Tensor, a: Tensor, b: Tensor, nd: Tensor
) -> Tensor:
    """d/da of the masked mean squared error behind G10 and G12 (d/db is its negative).

    per_sample = nd * mean_{trailing dims} (a - b)^2; a, b [P,B,...], nd [P,B].
    """
    B = a.shape[1]
    width = math.prod(a.shape[2:])
    weight = sample_weight(grad_per_sample, grad_value, B) * nd  # [P,B]
    weight = weight[(...,) + (None,) * (a.dim() - 2)]
    return (weight * (2.0 / width) * (a - b)).contiguous()


def g10_temporal_grads(
    grad_per_sample: Tensor | None, grad_value: Tensor, q_t: Tensor, q_tp1: Tensor, nd: Tensor
) -> tuple[Tensor, Tensor]:
    """(d/dq_t, d/dq_tp1) of G10; the second is the negative of the first."""
    grad_q_t = masked_mse_grad(grad_per_sample, grad_value, q_t, q_tp1, nd)
    return grad_q_t, -grad_q_t


def g12_predictive_grad(
    grad_per_sample: Tensor | None, grad_value: Tensor, pred: Tensor, target: Tensor, nd: Tensor
) -> Tensor:
    """d/dpred of G12 (the target is a fixed latent of the target net: no gradient)."""
    return masked_mse_grad(grad_per_sample, grad_value, pred, target, nd)


def c51_loss_residual(logits: Tensor, m: Tensor) -> Tensor:
    """d/dlogits of each row's cross-entropy -sum_j m_j log softmax(logits)_j:
    softmax * sum_j m_j - m, [P,B,K,atoms].

    The C51 loss saves it in its forward, so the backward is one multiply per element."""
    softmax = torch.softmax(logits, dim=-1)
    return (softmax * m.sum(dim=-1, keepdim=True) - m).contiguous()


def c51_loss_grad_from_residual(
    grad_per_sample: Tensor | None, grad_value: Tensor, residual: Tensor
) -> Tensor:
    """d/dlogits of the C51 loss from its saved residual [P,B,K,atoms]: residual * weight / K."""
    B, K = residual.shape[1], residual.shape[2]
    weight = sample_weight(grad_per_sample, grad_value, B)[..., None, None] / K
    return (weight * residual).contiguous()


def c51_loss_grad(
    grad_per_sample: Tensor | None, grad_value: Tensor, logits: Tensor, m: Tensor
) -> Tensor:
    """d/dlogits of the C51 loss: (softmax * sum_j m_j - m) * weight / K."""
    return c51_loss_grad_from_residual(grad_per_sample, grad_value, c51_loss_residual(logits, m))
