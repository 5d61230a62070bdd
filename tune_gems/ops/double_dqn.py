"""The double-DQN C51 target in plain torch: the reference of `tune_gems::c51_target`.

The online network selects the next action (the argmax of its expected Q, first maximum on a
tie, as torch.argmax), the target network evaluates it (its softmax at that action). These are
the learner's own expressions (expected Q = sum_atoms softmax(logits) * support), so on CPU the
op equals the learner's former inline code bit for bit.
"""

from __future__ import annotations

from torch import Tensor
import torch


def c51_target(online_logits: Tensor, target_logits: Tensor, support: Tensor) -> Tensor:
    """p_next [..., K, atoms] from online and target logits [..., K, A, atoms], support [atoms].

    a* = argmax_a sum_j softmax(online_logits)[..., a, j] * support[j];
    p_next = softmax(target_logits)[..., a*, :]. No gradient (a target).
    """
    q = (torch.softmax(online_logits, dim=-1) * support).sum(-1)  # [..., K, A]
    a_star = q.argmax(dim=-1)  # [..., K]: double DQN, the online net selects
    p = torch.softmax(target_logits, dim=-1)  # the target net evaluates
    index = a_star[..., None, None].expand(*a_star.shape, 1, p.shape[-1])
    return p.gather(-2, index).squeeze(-2)


def c51_target_in_online_dtype(online_logits: Tensor, target_logits: Tensor, support: Tensor) -> Tensor:
    """c51_target in online_logits' dtype (the target logits and support are cast to it; the
    learner's online logits are float32, so this is its float32 target)."""
    dtype = online_logits.dtype
    return c51_target(online_logits, target_logits.to(dtype), support.to(dtype))
