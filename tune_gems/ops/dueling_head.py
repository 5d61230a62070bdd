"""The fused dueling-C51 head in plain torch, the oracle of `tune_gems::dueling_c51` (docs/design.md
"Ops and kernels"): the network's own expressions, so on CPU q equals the unfused path bit for bit;
the backward is written out because an op runs below autograd."""

from __future__ import annotations

import torch
from torch import Tensor


def combined_logits(value: Tensor, adv: Tensor) -> Tensor:
    """Dueling logits [P,N,K,A,atoms] of v [P,N,atoms] and adv [P,K,N,A,atoms] (the network's
    expression, on the same permuted view)."""
    adv = adv.permute(0, 2, 1, 3, 4)  # [P,N,K,A,atoms]
    return value.unsqueeze(2).unsqueeze(3) + adv - adv.mean(dim=3, keepdim=True)


def _taken(logits: Tensor, action: Tensor) -> Tensor:
    """Rows [:R] of logits [P,N,K,A,atoms] at the taken sub-action action [P,R,K] -> [P,R,K,atoms]."""
    P, R, K = action.shape
    atoms = logits.shape[-1]
    return logits[:, :R].gather(3, action[..., None, None].expand(P, R, K, 1, atoms)).squeeze(3)


def dueling_c51(value: Tensor, adv: Tensor, support: Tensor, action: Tensor) -> tuple[Tensor, Tensor]:
    """(q [P,N,K,A], taken log-probabilities [P,R,K,atoms]) of the dueling-C51 head."""
    logits = combined_logits(value, adv)
    q = (torch.softmax(logits, dim=-1) * support).sum(-1)
    log_probs = torch.log_softmax(_taken(logits, action), dim=-1)
    return q.contiguous(), log_probs.contiguous()


def dueling_c51_grads(
    grad_q: Tensor | None, grad_log_probs: Tensor | None, value: Tensor, adv: Tensor, support: Tensor, action: Tensor
) -> tuple[Tensor, Tensor]:
    """(grad_value [P,N,atoms], grad_adv [P,K,N,A,atoms]); an absent upstream gradient is zero."""
    logits = combined_logits(value, adv)
    p = torch.softmax(logits, dim=-1)
    dl = torch.zeros_like(logits)
    if grad_q is not None:
        q = (p * support).sum(-1, keepdim=True)
        dl = dl + p * (support - q) * grad_q.unsqueeze(-1)
    if grad_log_probs is not None:
        P, R, K = action.shape
        atoms = logits.shape[-1]
        p_taken = _taken(p, action)
        d_taken = grad_log_probs - p_taken * grad_log_probs.sum(-1, keepdim=True)  # [P,R,K,atoms]
        onehot = (action.unsqueeze(-1) == torch.arange(logits.shape[3], device=action.device)).to(logits.dtype)
        rows = onehot.unsqueeze(-1) * d_taken.unsqueeze(3)  # [P,R,K,A,atoms]
        dl = dl + torch.cat([rows, rows.new_zeros(P, logits.shape[1] - R, K, logits.shape[3], atoms)], dim=1)
    grad_value = dl.sum(dim=(2, 3))
    grad_adv = (dl - dl.mean(dim=3, keepdim=True)).permute(0, 2, 1, 3, 4)
    return grad_value.contiguous(), grad_adv.contiguous()
