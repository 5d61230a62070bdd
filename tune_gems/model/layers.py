"""Population-batched linear layers: a leading group axis G (a member, or a member x branch), every product one batched
matmul, so G layers run as one kernel and never mix. `weights()` computes the effective weights once per iteration,
keeping spectral norm's state update out of the backward graph (torch's parametrization fails when a module runs twice)
and letting s_t and s_{t+1} share one noise sample. Per-member switches are masks, never Python branches (docs/design.md
"Arms"); `set_member_block(n)` gives each arm a single-arm run's matmul shapes (BLAS picks by batch count)."""

from __future__ import annotations

import importlib.util
import math
from typing import Literal, Sequence

import torch
from torch import Tensor, nn

from tune_gems.model.member_select import select, uniform


WeightMode = Literal["train", "target", "eval"]
"""train: noise on, spectral-norm power iteration advances; target: noise on, power iteration
frozen; eval: noise off (mean weights), power iteration frozen."""


_NORM_EPS = 1e-12
SN_INIT_ITERATIONS = 15
"""Power iterations run at construction (as torch.nn.utils.spectral_norm does), so sigma is
accurate from the first forward, also for a target net that does not iterate."""


def _draws(gens: list[torch.Generator], reps: int, shape: tuple[int, ...], draw) -> Tensor:
    """[P, reps, *shape] float64, member p's block drawn by `draw` from its own generator in place,
    consuming each generator exactly as a call of its own would."""
    out = torch.empty((len(gens), reps, *shape), dtype=torch.float64)
    for member, g in zip(out, gens):
        draw((reps, *shape), generator=g, dtype=torch.float64, out=member)
    return out


def _uniform(gens: list[torch.Generator], reps: int, shape: tuple[int, ...], bound: float) -> Tensor:
    """[P, reps, *shape] uniform(-bound, bound), member by member from its own generator; the
    affine map runs in place (the same float64 operations as (u * 2 - 1) * bound)."""
    return _draws(gens, reps, shape, torch.rand).mul_(2).sub_(1).mul_(bound).float()


def _normal(gens: list[torch.Generator], reps: int, shape: tuple[int, ...]) -> Tensor:
    return _draws(gens, reps, shape, torch.randn).float()


def _normalize(x: Tensor) -> Tensor:
    return x / x.norm(dim=-1, keepdim=True).clamp_min(_NORM_EPS)


def member_flags(flags: bool | Sequence[bool], population: int, what: str) -> list[bool]:
    """One switch per member: a bool for every member, or a sequence of P bools."""
    if isinstance(flags, bool):
        return [flags] * population
    out = [bool(f) for f in flags]
    if len(out) != population:
        raise ValueError(f"{len(out)} {what} switches for a population of {population}")
    return out


class TorchProducts:
    """The layers' products on torch: `weights()` materialises the effective weights and every
    product is a baddbmm, once per member block (`model.layer_kernel: torch`)."""

    name = "torch"
    fused = False
    """Whether the products build the effective weight from the raw parameters themselves."""
    flat_layout: dict = {}
    """FlatParameters' layout arguments (tune_gems.model.flat: `align`, `transposed`)."""
    clip_adam = None
    """The optimizer's fused clip-and-Adam step (PopulationAdam `clip_adam`); None: torch's calls."""
    row_means = None
    """Per-member means of a [P, n] matrix in an order that does not depend on P; None: torch's."""
    uniform_block = None
    """The RNG's block of uniforms in one launch (tune_gems.rng.DrawPlan `kernel`); None: torch's ops."""

    @staticmethod
    def product(x: Tensor, wb: tuple[Tensor, Tensor], relu: bool) -> Tensor:
        w, b = wb
        y = _blockwise(lambda b_, x_, w_: torch.baddbmm(b_, x_, w_), getattr(wb, "chunk", None), b, x, w)
        return torch.relu(y) if relu else y

    @staticmethod
    def resample_noise(net, draws, stream: str) -> None:
        """Fresh NoisyNet noise for `net` from the iteration's draws of `stream`."""
        net.resample_noise(draws.normal(stream))


TORCH = TorchProducts()


def resolve_layer_kernel(name: str, device: torch.device) -> str:
    """`model.layer_kernel` on `device`: auto is triton on CUDA where the triton package is installed."""
    if name != "auto":
        return name
    return "triton" if device.type == "cuda" and importlib.util.find_spec("triton") is not None else "torch"


def layer_products(name: str):
    """The strategy `model.layer_kernel` names (auto: torch, for a network built on the CPU); the triton one is
    imported at each call, so a test that reimports it under TRITON_INTERPRET=1 gets the fresh one."""
    if name in ("torch", "auto"):
        return TORCH
    if name != "triton":
        raise ValueError(f"layer kernel {name!r} is not one of ('torch', 'triton')")
    return importlib.import_module("tune_gems.ops.triton_layers").TRITON


class Affine(tuple):
    """A layer's effective weights (W [G,in,out], b [G,1,out]), unpacking like a pair; `chunk`: the
    groups per member block (None: one block)."""

    chunk: int | None

    def __new__(cls, w: Tensor, b: Tensor, chunk: int | None = None, products=TORCH) -> "Affine":
        obj = super().__new__(cls, (w, b))
        obj.chunk = chunk
        obj.products = products
        return obj

    @classmethod
    def copy_of(cls, wb: tuple[Tensor, Tensor]) -> "Affine":
        """Fresh copies of the tensors of `wb` (an Affine or a plain pair), with its chunk and strategy."""
        w, b = wb
        return cls(w.clone(), b.clone(), getattr(wb, "chunk", None), getattr(wb, "products", TORCH))


def _blockwise(op, chunk: int | None, *tensors: Tensor) -> Tensor:
    """op over the leading group axis, once per block of `chunk` groups (once when None)."""
    if chunk is None or chunk >= tensors[0].shape[0]:
        return op(*tensors)
    return torch.cat([op(*parts) for parts in zip(*(t.split(chunk) for t in tensors))])


class PopLinear(nn.Module):
    """y = x @ W + b per group, stored [P, reps, in, out] (views of the member-major matrix).
    `spectral_norm`: None (no state, e.g. a gem head) or the per-member switch; a member whose switch
    is off uses W / 1, with the same initial weights."""

    matrices = ("weight",)
    """The [.., in, out] parameters (a flat matrix may store them transposed: tune_gems.model.flat)."""

    def __init__(self, gens: list[torch.Generator], reps: int, in_f: int, out_f: int,
                 spectral_norm: bool | Sequence[bool] | None = None):
        super().__init__()
        bound = 1.0 / math.sqrt(in_f)
        self.groups, self.reps, self.in_f, self.out_f = len(gens) * reps, reps, in_f, out_f
        self.chunk: int | None = None  # groups per member block (set_member_block)
        self.products = TORCH  # set_layer_products
        self.weight = nn.Parameter(_uniform(gens, reps, (in_f, out_f), bound))
        self.bias = nn.Parameter(_uniform(gens, reps, (1, out_f), bound))
        self.has_spectral_norm = spectral_norm is not None
        if self.has_spectral_norm:
            flags = member_flags(spectral_norm, len(gens), "spectral_norm")
            # a constant, not training state: not persistent (checkpoints hold state only)
            self.register_buffer("sn_on", torch.tensor(flags).repeat_interleave(reps).view(-1, 1, 1), persistent=False)
            self.sn_common = uniform(flags)  # the mask as a host fact when all members agree
            self.register_buffer("sn_u", _normalize(_normal(gens, reps, (out_f,))).view(self.groups, out_f))
            self.register_buffer("sn_v", _normalize(_normal(gens, reps, (in_f,))).view(self.groups, in_f))
            for _ in range(SN_INIT_ITERATIONS):
                self._power_iteration()

    def _grouped(self, t: Tensor, rows: int) -> Tensor:
        return t.reshape(self.groups, rows, self.out_f)

    def set_member_block(self, members: int | None) -> None:
        """Keep blocks of `members` consecutive members apart in every matmul (None: one block)."""
        self.chunk = None if members is None else members * self.reps

    def set_layer_products(self, products) -> None:
        """Run this layer's products on `products` (module docstring; `layer_products`)."""
        self.products = products

    @torch.no_grad()
    def _power_iteration(self) -> None:
        w = self._grouped(self.weight, self.in_f)
        v = _normalize(_blockwise(torch.bmm, self.chunk, w, self.sn_u.unsqueeze(-1)).squeeze(-1))
        u = _normalize(_blockwise(torch.bmm, self.chunk, v.unsqueeze(1), w).squeeze(1))
        self.sn_v.copy_(v)
        self.sn_u.copy_(u)

    def weights(self, mode: WeightMode) -> Affine:
        if self.products.fused:
            return self._fused_weights(mode)
        w, b = self._grouped(self.weight, self.in_f), self._grouped(self.bias, 1)
        if not self.has_spectral_norm:
            return Affine(w, b, self.chunk)
        if mode == "train":
            self._power_iteration()
        sigma = (self.sn_v * _blockwise(torch.bmm, self.chunk, w, self.sn_u.unsqueeze(-1)).squeeze(-1)).sum(-1)
        # W / 1 is W exactly; the where also keeps an off member's sigma out of its gradient.
        # Per member block: torch picks a reduction's blocks from the number of groups.
        # Every member off: no division, but a fresh contiguous copy as the division returns:
        # cuBLAS picks its kernel from the operand's strides and alignment, and a strided view
        # rounded an arm alone differently from the same arm beside others (test_arms_gpu.py).
        if self.sn_common is False:
            return Affine(w.clone(memory_format=torch.contiguous_format), b, self.chunk)
        scale = select(self.sn_common, self.sn_on, sigma.view(-1, 1, 1), 1.0)
        return Affine(_blockwise(torch.div, self.chunk, w, scale), b, self.chunk)

    @torch.no_grad()
    def _spectral_scale(self, iterate: bool) -> Tensor:
        """The fused products' spectral norm: [G, 2] = (1/sigma, -1/sigma^2), (1, 0) for members
        whose switch is off; `iterate`: one power iteration first (train mode)."""
        return self.products.spectral_scale(self.weight, self.reps, self.sn_u, self.sn_v, self.sn_on.view(-1), iterate)

    def _fused_weights(self, mode: WeightMode):
        """The raw parameters for products that build the effective weight themselves."""
        fused = self.products
        if not self.has_spectral_norm:
            if mode == "eval":
                return Affine(self._grouped(self.weight, self.in_f), self._grouped(self.bias, 1), products=fused)
            return fused.LayerWeights(self.weight, self.bias, self.reps)
        scale = self._spectral_scale(iterate=mode == "train")
        if mode == "eval":  # materialised, for the evaluator's fixed buffers
            w = self._grouped(self.weight, self.in_f) * scale[:, :1, None]
            return Affine(w, self._grouped(self.bias, 1), products=fused)
        return fused.LayerWeights(self.weight, self.bias, self.reps, scale=scale, sn_u=self.sn_u, sn_v=self.sn_v)

    @staticmethod
    def apply(x: Tensor, wb: tuple[Tensor, Tensor], relu: bool = False) -> Tensor:
        """x [G,N,in] -> x @ W + b [G,N,out] (then ReLU when `relu`), on the strategy `wb`
        carries (torch's for a plain pair), per member block when `wb` is an Affine with a chunk."""
        return getattr(wb, "products", TORCH).product(x, wb, relu)


class NoisyPopLinear(nn.Module):
    """Factorised-Gaussian NoisyNet layer (Fortunato et al. 2018) per group; `f_in`, `f_out` hold
    f(eps), refilled by `resample` inside the captured iteration. A member with `noisy` off gets zero
    noise (its sigma exactly zero gradient); mu draws what a PopLinear of the same shape would."""

    matrices = ("mu_w", "sigma_w")

    def __init__(self, gens: list[torch.Generator], reps: int, in_f: int, out_f: int, sigma0: float,
                 noisy: bool | Sequence[bool] = True):
        super().__init__()
        bound = 1.0 / math.sqrt(in_f)
        P = len(gens)
        self.P, self.reps, self.in_f, self.out_f = P, reps, in_f, out_f
        self.chunk: int | None = None  # groups per member block (set_member_block)
        self.products = TORCH  # set_layer_products
        self.mu_w = nn.Parameter(_uniform(gens, reps, (in_f, out_f), bound))
        self.mu_b = nn.Parameter(_uniform(gens, reps, (1, out_f), bound))
        self.sigma_w = nn.Parameter(torch.full((P, reps, in_f, out_f), sigma0 / math.sqrt(in_f)))
        self.sigma_b = nn.Parameter(torch.full((P, reps, 1, out_f), sigma0 / math.sqrt(in_f)))
        self.register_buffer("f_in", torch.zeros(P, reps, in_f, 1))
        self.register_buffer("f_out", torch.zeros(P, reps, 1, out_f))
        flags = member_flags(noisy, P, "noisy")
        self.register_buffer("noise_on", torch.tensor(flags).view(P, 1, 1), persistent=False)
        self.noise_common = uniform(flags)  # the mask as a host fact when all members agree

    @property
    def noise_size(self) -> int:
        """Noise values per member: reps x (in + out)."""
        return self.reps * (self.in_f + self.out_f)

    @staticmethod
    def scale_noise(eps: Tensor) -> Tensor:
        """f(x) = sign(x) sqrt(|x|), the factorised-noise transform."""
        return eps.sign() * eps.abs().sqrt()

    def resample(self, f_noise: Tensor) -> None:
        """Install f(eps) for this layer from [P, noise_size] values (zero for members without NoisyNets)."""
        f = select(self.noise_common, self.noise_on, f_noise.reshape(self.P, self.reps, self.in_f + self.out_f), 0.0)
        self.f_in.copy_(f[..., : self.in_f].unsqueeze(-1))
        self.f_out.copy_(f[..., self.in_f :].unsqueeze(-2))

    def resample_from_uniforms(self, u: Tensor, offset: int) -> None:
        """The fused products' `resample`: f(eps) straight from the net's uniforms, one kernel."""
        self.products.noise_factors(u, offset, self.noise_on.view(-1), self.f_in, self.f_out)

    set_member_block = PopLinear.set_member_block
    set_layer_products = PopLinear.set_layer_products

    def weights(self, mode: WeightMode) -> Affine:
        G = self.P * self.reps
        if mode == "eval":
            w, b = self.mu_w.reshape(G, self.in_f, self.out_f), self.mu_b.reshape(G, 1, self.out_f)
            return Affine(w, b, self.chunk, self.products)
        if self.products.fused:  # the noise is applied inside the kernels
            return self.products.LayerWeights(self.mu_w, self.mu_b, self.reps, self.sigma_w, self.sigma_b, self.f_in, self.f_out)
        w = torch.addcmul(self.mu_w, self.sigma_w, self.f_in * self.f_out)  # fresh, contiguous
        b = torch.addcmul(self.mu_b, self.sigma_b, self.f_out)
        return Affine(w.view(G, self.in_f, self.out_f), b.view(G, 1, self.out_f), self.chunk)

    apply = staticmethod(PopLinear.apply)

    def mean_abs_sigma(self) -> Tensor:
        """Per-member mean |sigma_w| (the `noisy_sigma` health metric); 0 for members without
        NoisyNets (their sigma is never used)."""
        return select(self.noise_common, self.noise_on.view(-1), self.sigma_w.detach().abs().mean(dim=(1, 2, 3)), 0.0)
