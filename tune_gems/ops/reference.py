"""Plain-torch references of the gems and C51 (docs/design.md "The gems"): every kernel's oracle and
what the custom ops run on CPU. `nd` is the not-done mask [P,B]; nothing reduces across P."""

from __future__ import annotations

import torch
from torch import Tensor

G6_EPS_REL = 1e-3
"""G6's variance floor relative to the branch's mean feature variance, so G6(c f) = G6(f): with an
absolute one, wiring could lower G6 by shrinking the features. Its gradient flows."""
G6_EPS_FLOOR = 1e-12
"""Absolute floor under the relative one, so a constant branch standardises to 0, not 0/0."""


def g6_eps(var: Tensor) -> Tensor:
    """The floor per member and branch: G6_EPS_REL x the mean of `var` [P,K,1,D] + G6_EPS_FLOOR."""
    return (G6_EPS_REL * var.mean(dim=3, keepdim=True)) + G6_EPS_FLOOR


def g6_branch_indep(f: Tensor) -> tuple[None, Tensor]:
    """G6, f [P,K,B,D] -> (None, value [P]): mean R_kl[i,j]^2 over branch pairs of standardised features."""
    P, K, B, D = f.shape
    if K < 2:
        return None, f.new_zeros(P)
    mean = f.mean(dim=2, keepdim=True)
    var = (f - mean).pow(2).mean(dim=2, keepdim=True)
    z = (f - mean) / torch.sqrt(var + g6_eps(var))
    # R[p,k,l,i,j] = sum_b z[p,k,b,i] z[p,l,b,j] / B
    R = torch.einsum("pkbi,plbj->pklij", z, z) / B
    iu, ju = torch.triu_indices(K, K, offset=1, device=f.device)
    pairs = R[:, iu, ju]  # [P, npairs, D, D]
    return None, pairs.pow(2).mean(dim=(1, 2, 3))


def g10_temporal(q_t: Tensor, q_tp1: Tensor, nd: Tensor) -> tuple[Tensor, Tensor]:
    """G10 temporal consistency. q_t, q_tp1 [P,B,K,A], nd [P,B] -> (per_sample [P,B], value [P])."""
    B = q_t.shape[1]
    per_sample = nd * (q_t - q_tp1).pow(2).mean(dim=(2, 3))
    return per_sample, per_sample.sum(dim=1) / B


def g12_predictive(pred: Tensor, target: Tensor, nd: Tensor) -> tuple[Tensor, Tensor]:
    """G12 predictive coding. pred, target [P,B,D], nd [P,B] -> (per_sample [P,B], value [P])."""
    B = pred.shape[1]
    per_sample = nd * (pred - target).pow(2).mean(dim=2)
    return per_sample, per_sample.sum(dim=1) / B


def c51_project(p: Tensor, r: Tensor, g: Tensor, v_min: float, v_max: float) -> Tensor:
    """Categorical projection of r + g*z onto the support (gather form), p [N,atoms], r, g [N]."""
    atoms = p.shape[-1]
    dz = (v_max - v_min) / (atoms - 1)
    z = v_min + dz * torch.arange(atoms, device=p.device, dtype=p.dtype)
    tz = (r.unsqueeze(-1) + g.unsqueeze(-1) * z).clamp(v_min, v_max)  # [N, atoms_i]
    w = (1.0 - (tz.unsqueeze(-1) - z).abs() / dz).clamp_min(0.0)  # [N, i, j]
    return torch.einsum("ni,nij->nj", p, w)


def c51_loss(logits: Tensor, m: Tensor) -> tuple[Tensor, Tensor]:
    """C51 cross-entropy, logits, m [P,B,K,atoms] -> (per_sample [P,B], value [P])."""
    return c51_cross_entropy(torch.log_softmax(logits, dim=-1), m)


def c51_cross_entropy(log_probs: Tensor, m: Tensor) -> tuple[Tensor, Tensor]:
    """`c51_loss` of log-probabilities (what the fused dueling-C51 head returns)."""
    B = log_probs.shape[1]
    per_sample = -(m * log_probs).sum(dim=-1).mean(dim=-1)
    return per_sample, per_sample.sum(dim=1) / B
