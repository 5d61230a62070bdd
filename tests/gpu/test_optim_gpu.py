"""PopulationAdam on the GPU: frozen columns (parameters no gradient reaches) are skipped by the
fused update and every tensor keeps the bits of the full update (issue 15)."""

from __future__ import annotations

import pytest
import torch

from tune_gems.model.flat import FlatParameters
from tune_gems.trainer.optim import PopulationAdam

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


class _TwoParams(torch.nn.Module):
    def __init__(self, a: torch.Tensor, b: torch.Tensor):
        super().__init__()
        self.a, self.b = torch.nn.Parameter(a.clone()), torch.nn.Parameter(b.clone())


def _adam(rows, grads, lrs, frozen):
    module = _TwoParams(rows[:, :3], rows[:, 3:])
    flat = FlatParameters(module, rows.shape[0])
    opt = PopulationAdam(flat, lr=lrs, eps=1e-8, max_grad_norm=1.0)
    opt.freeze_columns(frozen)
    for g in grads:
        flat.grad.copy_(g)
        opt.step()
    torch.cuda.synchronize()
    return opt, (flat.data, opt.exp_avg, opt.exp_avg_sq)


@pytest.mark.parametrize("width", [60, 1001, 4099])
def test_frozen_columns_are_skipped_with_the_bits_of_the_full_update(width):
    torch.manual_seed(width)
    dev = torch.device("cuda")
    rows, grads = torch.randn(4, width, device=dev), torch.randn(5, 4, width, device=dev)
    frozen = [slice(10, 20), slice(width - 37, width)]
    for cols in frozen:
        grads[:, :, cols] = 0.0
    lrs = [1e-2, 1e-2, 3e-3, 3e-3]
    _, full = _adam(rows, grads, lrs, [])
    opt, part = _adam(rows, grads, lrs, frozen)
    assert sum(v.numel() for _, params, *_ in opt._calls for v in params) == 4 * (width - 47)
    for a, b in zip(full, part):
        assert torch.equal(a, b)
