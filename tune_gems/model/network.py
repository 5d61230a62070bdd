"""The population-batched branching dueling C51 network with a G12 predictor head.

obs [P,N,obs_dim] -> trunk of (spectral-normed) linear layers -> latent h [P,N,H]
  -> one fused first stream layer (value + K advantage streams, NoisyNet when enabled)
  -> value logits [P,N,atoms] and per-branch advantage logits [P,K,N,A,atoms]
  -> dueling per branch: logits = V + A - mean_a A  ->  [P,N,K,A,atoms]
The advantage-stream features of each branch, [P,K,N,Hs], are G6's input; the predictor head
maps (h_t, taken action) to a prediction of h_{t+1} for G12.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tune_gems.config import ModelConfig
from tune_gems.model.layers import NoisyPopLinear, PopLinear, WeightMode


@dataclass
class NetOutput:
    logits: Tensor  # [P,N,K,A,atoms]
    h: Tensor  # [P,N,H]
    adv_features: Tensor  # [P,K,N,Hs]


class BranchingC51(nn.Module):
    def __init__(self, cfg: ModelConfig, obs_dim: int, branches: int, sub_actions: int, seeds: list[int]):
        super().__init__()
        self.cfg, self.K, self.A, self.P = cfg, branches, sub_actions, len(seeds)
        gens = [torch.Generator().manual_seed(int(s)) for s in seeds]
        H, Hs, atoms = cfg.hidden, cfg.stream_hidden, cfg.atoms
        dims = [obs_dim] + [H] * cfg.trunk_layers
        self.trunk = nn.ModuleList(PopLinear(gens, 1, a, b, cfg.spectral_norm) for a, b in zip(dims[:-1], dims[1:]))

        def stream(reps: int, a: int, b: int) -> nn.Module:
            return NoisyPopLinear(gens, reps, a, b, cfg.noisy_sigma0) if cfg.noisy else PopLinear(gens, reps, a, b)

        self.stream_in = stream(1, H, (1 + branches) * Hs)
        self.value_out = stream(1, Hs, atoms)
        self.adv_out = stream(branches, Hs, sub_actions * atoms)
        self.pred_in = PopLinear(gens, 1, H + branches * sub_actions, cfg.predictor_hidden)
        self.pred_out = PopLinear(gens, 1, cfg.predictor_hidden, H)
        self.register_buffer("support", torch.linspace(cfg.v_min, cfg.v_max, atoms))

    # -- effective weights -------------------------------------------------------------------
    def weight_layers(self) -> dict[str, nn.Module]:
        layers = {f"trunk{i}": m for i, m in enumerate(self.trunk)}
        layers.update(stream_in=self.stream_in, value_out=self.value_out, adv_out=self.adv_out)
        layers.update(pred_in=self.pred_in, pred_out=self.pred_out)
        return layers

    def noisy_layers(self) -> list[NoisyPopLinear]:
        return [m for m in self.weight_layers().values() if isinstance(m, NoisyPopLinear)]

    def weights(self, mode: WeightMode) -> dict[str, tuple[Tensor, Tensor]]:
        """Effective weights of every layer for one iteration (see layers.py)."""
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

    # -- forward -----------------------------------------------------------------------------
    def forward(self, obs: Tensor, w: dict[str, tuple[Tensor, Tensor]]) -> NetOutput:
        P, N, _ = obs.shape
        K, A, Hs = self.K, self.A, self.cfg.stream_hidden
        x = obs
        for i in range(len(self.trunk)):
            x = F.relu(PopLinear.apply(x, w[f"trunk{i}"]))
        h = x
        s = F.relu(PopLinear.apply(h, w["stream_in"]))  # [P,N,(1+K)*Hs]
        v_feat = s[..., :Hs]
        adv_feat = s[..., Hs:].reshape(P, N, K, Hs).permute(0, 2, 1, 3).contiguous()  # [P,K,N,Hs]
        value = PopLinear.apply(v_feat, w["value_out"])  # [P,N,atoms]
        adv = PopLinear.apply(adv_feat.view(P * K, N, Hs), w["adv_out"])  # [P*K,N,A*atoms]
        adv = adv.view(P, K, N, A, -1).permute(0, 2, 1, 3, 4)  # [P,N,K,A,atoms]
        logits = value.unsqueeze(2).unsqueeze(3) + adv - adv.mean(dim=3, keepdim=True)
        return NetOutput(logits=logits, h=h, adv_features=adv_feat)

    def predict_next_latent(self, h: Tensor, action: Tensor, w: dict[str, tuple[Tensor, Tensor]]) -> Tensor:
        """G12's predictor: (h_t [P,B,H], action [P,B,K]) -> predicted h_{t+1} [P,B,H]."""
        # one-hot by comparison: F.one_hot validates its input with a host sync on CUDA
        ids = torch.arange(self.A, device=action.device)
        onehot = (action.unsqueeze(-1) == ids).to(h.dtype).flatten(-2)  # [P,B,K*A]
        x = F.relu(PopLinear.apply(torch.cat([h, onehot], dim=-1), w["pred_in"]))
        return PopLinear.apply(x, w["pred_out"])

    def expected_q(self, logits: Tensor) -> Tensor:
        """[..., atoms] logits -> expected values [...] over the support (float32)."""
        return (torch.softmax(logits.float(), dim=-1) * self.support).sum(-1)

    def noisy_sigma(self) -> Tensor:
        """Mean |sigma| of the NoisyNet weights per member, [P] (zeros when NoisyNets are off)."""
        layers = self.noisy_layers()
        if not layers:
            return torch.zeros(self.P, device=self.support.device)
        per = [layer.mean_abs_sigma() for layer in layers]
        return torch.stack(per).mean(0)
