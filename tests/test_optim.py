"""The population Adam: per-member equality with torch's Adam, per-member clipping."""

from __future__ import annotations

import torch

from tune_gems.model.flat import FlatParameters
from tune_gems.optim import PopulationAdam


# -- optimizer ----------------------------------------------------------------------------------


class _TwoParams(torch.nn.Module):
    def __init__(self, a: torch.Tensor, b: torch.Tensor):
        super().__init__()
        self.a, self.b = torch.nn.Parameter(a.clone()), torch.nn.Parameter(b.clone())


def test_population_adam_matches_torch_adam_per_member():
    torch.manual_seed(1)
    a, b = torch.randn(3, 4, 5), torch.randn(3, 2, 1, 5)
    module = _TwoParams(a, b)
    flat = FlatParameters(module, 3)
    assert module.a.data_ptr() == flat.data.data_ptr()  # parameters are views of the matrix
    ref = [a.clone().requires_grad_(True), b.clone().requires_grad_(True)]
    ours = PopulationAdam(flat, lr=1e-2, eps=1e-8, max_grad_norm=1e9)
    theirs = torch.optim.Adam(ref, lr=1e-2, eps=1e-8)
    for step in range(5):
        grads = [torch.randn_like(p) for p in ref]
        loss = (module.a * grads[0]).sum() + (module.b * grads[1]).sum()
        flat.gather_grads(torch.autograd.grad(loss, flat.params))
        ours.step()
        theirs.zero_grad()
        for p, g in zip(ref, grads):
            p.grad = g.clone()
        theirs.step()
    torch.testing.assert_close(module.a.detach(), ref[0].detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(module.b.detach(), ref[1].detach(), rtol=1e-5, atol=1e-6)
    ours._fused = False  # the plain-torch fallback follows the same rule
    flat.gather_grads((grads[0], None))
    before = module.a.detach().clone()
    ours.step()
    assert not torch.equal(before, module.a.detach())


def test_population_adam_clips_each_member_alone():
    module = _TwoParams(torch.zeros(2, 3), torch.zeros(2, 1))
    flat = FlatParameters(module, 2)
    opt = PopulationAdam(flat, lr=1.0, eps=1e-8, max_grad_norm=1.0)
    flat.grad.copy_(torch.tensor([[30.0, 40.0, 0.0, 0.0], [0.3, 0.4, 0.0, 0.0]]))
    norm = opt.step()
    torch.testing.assert_close(norm, torch.tensor([50.0, 0.5]))
    # after clipping member 0's gradient is [0.6, 0.8, 0]; member 1's is untouched
    torch.testing.assert_close(opt.exp_avg[0, :3] / 0.1, torch.tensor([0.6, 0.8, 0.0]))
    torch.testing.assert_close(opt.exp_avg[1, :3] / 0.1, torch.tensor([0.3, 0.4, 0.0]))
