"""The population-batched branching dueling C51 network: obs [P,N,obs_dim] -> trunk -> one fused
stream layer -> value [P,N,atoms] and advantage logits [P,K,N,A,atoms] (its features G6's input).
Spectral norm and NoisyNets are per-member switches, so a seed's weights and noise ignore them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch
from torch import Tensor, nn

from tune_gems.config.schema import ModelConfig
from tune_gems.model.heads import HeadContext
from tune_gems.model.layers import NoisyPopLinear, PopLinear, WeightMode, layer_products
from tune_gems.ops.dueling_head import combined_logits

HeadFactory = Callable[[HeadContext], nn.Module]


@dataclass
class NetOutput:
    logits: Tensor | None  # [P,N,K,A,atoms]; None when the caller runs the fused head itself
    h: Tensor  # [P,N,H]
    adv_features: Tensor  # [P,K,N,Hs]
    value: Tensor  # [P,N,atoms]: the value stream's logits
    adv: Tensor  # [P,K,N,A,atoms]: the advantage streams' logits, as their matmul writes them


class BranchingC51(nn.Module):
    def __init__(self, cfg: ModelConfig, obs_dim: int, branches: int, sub_actions: int, seeds: list[int],
                 heads: dict[str, HeadFactory] | None = None, spectral_norm: Sequence[bool] | None = None,
                 noisy: Sequence[bool] | None = None, member_block: int | None = None):
        """`heads`: gem name -> factory of its parameters; `spectral_norm`, `noisy`: P per-member
        switches (default the config's); `member_block`: members per arm, apart in every matmul."""
        super().__init__()
        self.cfg, self.K, self.A, self.P = cfg, branches, sub_actions, len(seeds)
        gens = [torch.Generator().manual_seed(int(s)) for s in seeds]
        H, Hs, atoms = cfg.hidden, cfg.stream_hidden, cfg.atoms
        sn = cfg.spectral_norm if spectral_norm is None else spectral_norm
        noise = cfg.noisy if noisy is None else noisy
        dims = [obs_dim] + [H] * cfg.trunk_layers
        self.trunk = nn.ModuleList(PopLinear(gens, 1, a, b, sn) for a, b in zip(dims[:-1], dims[1:]))

        def stream(reps: int, a: int, b: int) -> nn.Module:
            return NoisyPopLinear(gens, reps, a, b, cfg.noisy_sigma0, noise)

        self.stream_in = stream(1, H, (1 + branches) * Hs)
        self.value_out = stream(1, Hs, atoms)
        self.adv_out = stream(branches, Hs, sub_actions * atoms)
        ctx = HeadContext(gens, cfg, H, branches, sub_actions)
        self.heads = nn.ModuleDict({name: make(ctx) for name, make in (heads or {}).items()})
        self.register_buffer("support", torch.linspace(cfg.v_min, cfg.v_max, atoms))
        if member_block is not None and (member_block < 1 or self.P % member_block):
            raise ValueError(f"member blocks of {member_block} do not divide the population {self.P}")
        self.products = layer_products(cfg.layer_kernel)  # the layers' products, chosen once
        for layer in self.weight_layers().values():
            if hasattr(layer, "set_member_block"):  # a plug-in head's own layer type may lack it
                layer.set_member_block(member_block)
            if hasattr(layer, "set_layer_products"):
                layer.set_layer_products(self.products)

    def weight_layers(self) -> dict[str, nn.Module]:
        layers = {f"trunk{i}": m for i, m in enumerate(self.trunk)}
        layers.update(stream_in=self.stream_in, value_out=self.value_out, adv_out=self.adv_out)
        for gem, head in self.heads.items():
            layers.update({f"{gem}.{name}": m for name, m in head.named_children()})
        return layers

    def noisy_layers(self) -> list[NoisyPopLinear]:
        return [m for m in self.weight_layers().values() if isinstance(m, NoisyPopLinear)]

    def weights(self, mode: WeightMode) -> dict[str, tuple[Tensor, Tensor]]:
        return {name: m.weights(mode) for name, m in self.weight_layers().items()}

    @property
    def noise_size(self) -> int:
        """Standard normals per member that one noise resample consumes."""
        return sum(layer.noise_size for layer in self.noisy_layers())

    def resample_noise(self, eps: Tensor) -> None:
        """Install fresh factorised noise from standard normals eps [P, noise_size]."""
        f = NoisyPopLinear.scale_noise(eps)
        offset = 0
        for layer in self.noisy_layers():
            layer.resample(f[:, offset : offset + layer.noise_size])
            offset += layer.noise_size

    def resample_noise_from_uniforms(self, u: Tensor) -> None:
        """The Triton path's noise from uniforms u [P, 2 x noise_size], one kernel per noisy layer."""
        offset = 0
        for layer in self.noisy_layers():
            layer.resample_from_uniforms(u, offset)
            offset += layer.noise_size

    def forward(self, obs: Tensor, w: dict[str, tuple[Tensor, Tensor]], logits: bool = True) -> NetOutput:
        """The outputs on obs [P,N,obs_dim]; `logits=False` leaves the dueling logits out (the fused head)."""
        P, N, _ = obs.shape
        K, A, Hs = self.K, self.A, self.cfg.stream_hidden
        x = obs
        for i in range(len(self.trunk)):
            x = PopLinear.apply(x, w[f"trunk{i}"], relu=True)
        h = x
        s = PopLinear.apply(h, w["stream_in"], relu=True)  # [P,N,(1+K)*Hs]
        v_feat = s[..., :Hs]
        adv_feat = s[..., Hs:].reshape(P, N, K, Hs).permute(0, 2, 1, 3).contiguous()  # [P,K,N,Hs]
        value = PopLinear.apply(v_feat, w["value_out"])  # [P,N,atoms]
        adv = PopLinear.apply(adv_feat.view(P * K, N, Hs), w["adv_out"]).view(P, K, N, A, -1)
        # the fused head's reference expression (tune_gems.ops.dueling_head), so the two agree
        combined = combined_logits(value, adv) if logits else None
        return NetOutput(logits=combined, h=h, adv_features=adv_feat, value=value, adv=adv)

    def bound_heads(self, w: dict[str, tuple[Tensor, Tensor]]) -> dict[str, Callable[..., Tensor]]:
        """Each gem's head as a callable of its own inputs, bound to the effective weights `w`."""

        def bind(gem: str, head: nn.Module) -> Callable[..., Tensor]:
            mine = {name: w[f"{gem}.{name}"] for name, _ in head.named_children()}
            return lambda *args: head(*args, weights=mine)

        return {gem: bind(gem, head) for gem, head in self.heads.items()}

    def expected_q(self, logits: Tensor) -> Tensor:
        """[..., atoms] logits -> expected values [...] over the support (float32)."""
        return (torch.softmax(logits.float(), dim=-1) * self.support).sum(-1)

    def noisy_sigma(self) -> Tensor:
        """Mean |sigma| of the NoisyNet weights per member, [P] (zeros where NoisyNets are off)."""
        per = [layer.mean_abs_sigma() for layer in self.noisy_layers()]
        return torch.stack(per).mean(0)
