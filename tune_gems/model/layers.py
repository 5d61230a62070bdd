"""Population-batched linear layers: parameters carry a leading group axis G (a member, or a
member x branch), and every product is a batched matmul (`torch.baddbmm`), so G independent
layers run as one kernel and never mix.

A layer's forward takes its *effective* weights, computed once per iteration by `weights()`:
that is where spectral norm runs its power iteration and NoisyNets apply their noise. Computing
them once and reusing them for every batch of the iteration keeps the power-iteration state
update out of the backward graph (the failure mode of torch's spectral-norm parametrization
when one module runs twice) and lets s_t and s_{t+1} share one noise sample.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor, nn


WeightMode = Literal["train", "target", "eval"]
"""train: noise on, spectral-norm power iteration advances; target: noise on, power iteration
frozen; eval: noise off (mean weights), power iteration frozen."""

_NORM_EPS = 1e-12
SN_INIT_ITERATIONS = 15
"""Power iterations run at construction (as torch.nn.utils.spectral_norm does), so sigma is
accurate from the first forward, also for a target net that does not iterate."""


def _uniform(gens: list[torch.Generator], reps: int, shape: tuple[int, ...], bound: float) -> Tensor:
    """[P, reps, *shape] uniform(-bound, bound), member by member from its own generator."""
    out = [torch.rand((reps, *shape), generator=g, dtype=torch.float64) for g in gens]
    return ((torch.stack(out) * 2 - 1) * bound).float()


def _normal(gens: list[torch.Generator], reps: int, shape: tuple[int, ...]) -> Tensor:
    return torch.stack([torch.randn((reps, *shape), generator=g, dtype=torch.float64) for g in gens]).float()


def _normalize(x: Tensor) -> Tensor:
    return x / x.norm(dim=-1, keepdim=True).clamp_min(_NORM_EPS)


class PopLinear(nn.Module):
    """y = x @ W + b per group, optionally spectral-normed by per-group power iteration.

    Parameters are stored [P, reps, in, out] (member first, so they can be views of one
    member-major matrix, see flat.py) and used as G = P*reps independent [in, out] matrices.
    """

    def __init__(self, gens: list[torch.Generator], reps: int, in_f: int, out_f: int, spectral_norm: bool = False):
        super().__init__()
        bound = 1.0 / math.sqrt(in_f)
        self.groups, self.in_f, self.out_f = len(gens) * reps, in_f, out_f
        self.weight = nn.Parameter(_uniform(gens, reps, (in_f, out_f), bound))
        self.bias = nn.Parameter(_uniform(gens, reps, (1, out_f), bound))
        self.spectral_norm = spectral_norm
        if spectral_norm:
            self.register_buffer("sn_u", _normalize(_normal(gens, reps, (out_f,))).view(self.groups, out_f))
            self.register_buffer("sn_v", _normalize(_normal(gens, reps, (in_f,))).view(self.groups, in_f))
            for _ in range(SN_INIT_ITERATIONS):
                self._power_iteration()

    def _grouped(self, t: Tensor, rows: int) -> Tensor:
        return t.reshape(self.groups, rows, self.out_f)

    @torch.no_grad()
    def _power_iteration(self) -> None:
        w = self._grouped(self.weight, self.in_f)
        v = _normalize(torch.bmm(w, self.sn_u.unsqueeze(-1)).squeeze(-1))
        u = _normalize(torch.bmm(v.unsqueeze(1), w).squeeze(1))
        self.sn_v.copy_(v)
        self.sn_u.copy_(u)

    def weights(self, mode: WeightMode) -> tuple[Tensor, Tensor]:
        w, b = self._grouped(self.weight, self.in_f), self._grouped(self.bias, 1)
        if not self.spectral_norm:
            return w, b
        if mode == "train":
            self._power_iteration()
        sigma = (self.sn_v * torch.bmm(w, self.sn_u.unsqueeze(-1)).squeeze(-1)).sum(-1)
        return w / sigma.view(-1, 1, 1), b

    @staticmethod
    def apply(x: Tensor, wb: tuple[Tensor, Tensor]) -> Tensor:
        w, b = wb
        return torch.baddbmm(b, x, w)


class NoisyPopLinear(nn.Module):
    """Factorised-Gaussian NoisyNet layer (Fortunato et al. 2018) per group.

    W = mu_w + sigma_w * f(eps_in) f(eps_out)^T, b = mu_b + sigma_b * f(eps_out), with
    f(x) = sign(x) sqrt(|x|). The buffers `f_in`, `f_out` hold f(eps), refilled in place by
    `resample` from each member's counter RNG inside the captured iteration.
    """

    def __init__(self, gens: list[torch.Generator], reps: int, in_f: int, out_f: int, sigma0: float):
        super().__init__()
        bound = 1.0 / math.sqrt(in_f)
        P = len(gens)
        self.P, self.reps, self.in_f, self.out_f = P, reps, in_f, out_f
        self.mu_w = nn.Parameter(_uniform(gens, reps, (in_f, out_f), bound))
        self.mu_b = nn.Parameter(_uniform(gens, reps, (1, out_f), bound))
        self.sigma_w = nn.Parameter(torch.full((P, reps, in_f, out_f), sigma0 / math.sqrt(in_f)))
        self.sigma_b = nn.Parameter(torch.full((P, reps, 1, out_f), sigma0 / math.sqrt(in_f)))
        self.register_buffer("f_in", torch.zeros(P, reps, in_f, 1))
        self.register_buffer("f_out", torch.zeros(P, reps, 1, out_f))

    @property
    def noise_size(self) -> int:
        """Noise values per member: reps x (in + out)."""
        return self.reps * (self.in_f + self.out_f)

    @staticmethod
    def scale_noise(eps: Tensor) -> Tensor:
        """f(x) = sign(x) sqrt(|x|), the factorised-noise transform."""
        return eps.sign() * eps.abs().sqrt()

    def resample(self, f_noise: Tensor) -> None:
        """Install f(eps) for this layer from [P, noise_size] values."""
        f = f_noise.reshape(self.P, self.reps, self.in_f + self.out_f)
        self.f_in.copy_(f[..., : self.in_f].unsqueeze(-1))
        self.f_out.copy_(f[..., self.in_f :].unsqueeze(-2))

    def weights(self, mode: WeightMode) -> tuple[Tensor, Tensor]:
        G = self.P * self.reps
        if mode == "eval":
            return self.mu_w.reshape(G, self.in_f, self.out_f), self.mu_b.reshape(G, 1, self.out_f)
        w = torch.addcmul(self.mu_w, self.sigma_w, self.f_in * self.f_out)  # fresh, contiguous
        b = torch.addcmul(self.mu_b, self.sigma_b, self.f_out)
        return w.view(G, self.in_f, self.out_f), b.view(G, 1, self.out_f)

    apply = staticmethod(PopLinear.apply)

    def mean_abs_sigma(self) -> Tensor:
        """Per-member mean |sigma_w| (the `noisy_sigma` health metric)."""
        return self.sigma_w.detach().abs().mean(dim=(1, 2, 3))
