"""Plain-torch references of the gems, the C51 projection and the C51 loss.

These are the exact math of docs/design.md ("The gems") and the oracle every CUDA kernel is tested
against, in float64 on fresh random inputs. They are also what the custom ops run on CPU.
Shapes: P members, B samples, K branches, A sub-actions, D feature width, `nd` the not-done
mask [P,B] (1.0 / 0.0). Nothing here reduces across the population axis P.
"""

from __future__ import annotations

import torch
from torch import Tensor

G6_EPS_REL = 1e-3
"""Variance floor of the G6 standardisation, relative to the branch's mean feature variance over
the batch: with an absolute floor, wiring G6 could lower it by shrinking the features towards
the floor instead of decorrelating them; relative to the branch's own scale, G6 of c x f
equals G6 of f. The floor is part of the function (its gradient flows)."""
G6_EPS_FLOOR = 1e-12
"""Absolute floor under the relative one, so an all-constant branch standardises to 0, not 0/0;
G6 is scale-free while the branch's variances stay far above G6_EPS_FLOOR / G6_EPS_REL = 1e-9."""


def g6_eps(var: Tensor) -> Tensor:
    """The standardisation floor per member and branch: G6_EPS_REL x the mean over features of
    `var` [P,K,1,D] (the features' batch variances), + G6_EPS_FLOOR; [P,K,1,1]."""
    return (G6_EPS_REL * var.mean(dim=3, keepdim=True)) + G6_EPS_FLOOR


def g6_branch_indep(f: Tensor) -> tuple[None, Tensor]:
    """G6 branch independence. f [P,K,B,D] -> (None, value [P]).

    Standardise each feature over the batch (var with 1/B, floored by `g6_eps`: relative to the
    branch's mean variance, so the value is scale-free), form the cross-correlation
    R_kl = z_k^T z_l / B for every branch pair k<l and average R_kl[i,j]^2 over pairs and i,j.
    """
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
    """Categorical projection of r + g*z onto the support (gather form, no scatter).

    p [N,atoms] next-state probabilities, r [N] rewards, g [N] discounts (gamma^n * nd).
    m_j = sum_i p_i * max(0, 1 - |Tz_i - z_j| / dz), Tz_i = clamp(r + g*z_i, v_min, v_max).
    """
    atoms = p.shape[-1]
    dz = (v_max - v_min) / (atoms - 1)
    z = v_min + dz * torch.arange(atoms, device=p.device, dtype=p.dtype)
    tz = (r.unsqueeze(-1) + g.unsqueeze(-1) * z).clamp(v_min, v_max)  # [N, atoms_i]
    w = (1.0 - (tz.unsqueeze(-1) - z).abs() / dz).clamp_min(0.0)  # [N, i, j]
    return torch.einsum("ni,nij->nj", p, w)


def c51_loss(logits: Tensor, m: Tensor) -> tuple[Tensor, Tensor]:
    """C51 cross-entropy. logits, m [P,B,K,atoms] -> (per_sample [P,B], value [P]).

    per_sample = mean over branches of -sum_j m_j log softmax(logits)_j; value = sum_b / B.
    """
    return c51_cross_entropy(torch.log_softmax(logits, dim=-1), m)


def c51_cross_entropy(log_probs: Tensor, m: Tensor) -> tuple[Tensor, Tensor]:
    """C51 cross-entropy of log-probabilities (what the fused dueling-C51 head returns).
    log_probs, m [P,B,K,atoms] -> (per_sample [P,B], value [P]), as `c51_loss`."""
    B = log_probs.shape[1]
    per_sample = -(m * log_probs).sum(dim=-1).mean(dim=-1)
    return per_sample, per_sample.sum(dim=1) / B
