"""The double-DQN C51 target, `tune_gems::c51_target`'s reference: the online net selects, the target evaluates."""

from __future__ import annotations

from torch import Tensor
import torch


def c51_target(online_logits: Tensor, target_logits: Tensor, support: Tensor) -> Tensor:
    """p_next [..., K, atoms] from logits [..., K, A, atoms] and support [atoms] (first maximum on a tie)."""
    q = (torch.softmax(online_logits, dim=-1) * support).sum(-1)  # [..., K, A]
    a_star = q.argmax(dim=-1)  # [..., K]: double DQN, the online net selects
    p = torch.softmax(target_logits, dim=-1)  # the target net evaluates
    index = a_star[..., None, None].expand(*a_star.shape, 1, p.shape[-1])
    return p.gather(-2, index).squeeze(-2)


def c51_target_in_online_dtype(online_logits: Tensor, target_logits: Tensor, support: Tensor) -> Tensor:
    """c51_target in online_logits' dtype (the target logits and support cast to it)."""
    dtype = online_logits.dtype
    return c51_target(online_logits, target_logits.to(dtype), support.to(dtype))
