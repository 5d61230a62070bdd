"""The population Adam: per-member equality with torch's Adam, per-member clipping."""

from __future__ import annotations

import pytest
import torch

from tune_gems.model.flat import FlatParameters
from tune_gems.trainer.optim import PopulationAdam


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


# -- per-member learning rates (arms) ------------------------------------------------------------


def _run(rows: torch.Tensor, grads: torch.Tensor, lr, blocks=None, clip=1.0) -> tuple[torch.Tensor, ...]:
    """Five clipped Adam steps of parameters `rows` [P, n] under gradients grads [steps, P, n]."""
    module = _TwoParams(rows[:, :3].clone(), rows[:, 3:].clone())
    flat = FlatParameters(module, rows.shape[0])
    opt = PopulationAdam(flat, lr=lr, eps=1e-8, max_grad_norm=clip, blocks=blocks)
    norms = []
    for g in grads:
        flat.grad.copy_(g)
        norms.append(opt.step())
    return flat.data.clone(), opt.exp_avg.clone(), opt.exp_avg_sq.clone(), torch.stack(norms)


def test_each_block_of_members_steps_bit_identically_to_a_run_of_that_block_alone():
    """Arms: rows 0-2 at lr 1e-2, rows 3-5 at 3e-3, rows 6-8 at 1e-2 again (three blocks, two
    fused calls). Each block equals, bit for bit, a run of its three members alone at its lr."""
    torch.manual_seed(3)
    rows, grads = torch.randn(9, 700), torch.randn(5, 9, 700) * 0.2
    lrs = [1e-2] * 3 + [3e-3] * 3 + [1e-2] * 3
    blocks = [slice(0, 3), slice(3, 6), slice(6, 9)]
    together = _run(rows, grads, lrs, blocks)
    for blk, lr in zip(blocks, (1e-2, 3e-3, 1e-2)):
        alone = _run(rows[blk], grads[:, blk], lr)
        for t, a in zip(together[:3], alone[:3]):
            assert torch.equal(t[blk], a)
        assert torch.equal(together[3][..., blk], alone[3])
    # the learning rate matters (the test can fail): block 1 at the other rate differs
    other = _run(rows[3:6], grads[:, 3:6], 1e-2)
    assert not torch.equal(together[0][3:6], other[0])


def test_one_learning_rate_for_all_is_one_block_and_the_old_single_call():
    torch.manual_seed(4)
    rows, grads = torch.randn(4, 50), torch.randn(5, 4, 50)
    a = _run(rows, grads, 1e-2)
    b = _run(rows, grads, [1e-2] * 4)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    module = _TwoParams(rows[:, :3].clone(), rows[:, 3:].clone())
    opt = PopulationAdam(FlatParameters(module, 4), lr=1e-2, eps=1e-8, max_grad_norm=1.0)
    assert [rate for rate, *_ in opt._calls] == [1e-2] and len(opt._calls[0][1]) == 1


def test_a_parameter_with_exactly_zero_gradient_never_moves():
    """A NoisyNet sigma of a member without NoisyNets gets gradient 0 (or -0) every step: Adam's
    moments stay zero and the parameter keeps its bits, as if it did not train."""
    torch.manual_seed(5)
    rows, grads = torch.randn(2, 40), torch.randn(5, 2, 40)
    grads[:, :, 10:20] = 0.0
    grads[::2, :, 15:20] = -0.0
    data, m, v, _ = _run(rows, grads, [1e-2, 3e-2])
    assert torch.equal(data[:, 10:20], rows[:, 10:20])
    assert (m[:, 10:20] == 0).all() and (v[:, 10:20] == 0).all()
    assert not torch.equal(data[:, :10], rows[:, :10])


def test_bad_learning_rate_blocks_are_refused():
    module = _TwoParams(torch.zeros(4, 3), torch.zeros(4, 1))
    flat = FlatParameters(module, 4)
    with pytest.raises(ValueError, match="learning rates"):
        PopulationAdam(flat, lr=[1e-2, 1e-2, 3e-3, 3e-3], eps=1e-8, max_grad_norm=1.0, blocks=[slice(0, 3), slice(3, 4)])
    with pytest.raises(ValueError, match="consecutive"):
        PopulationAdam(flat, lr=1e-2, eps=1e-8, max_grad_norm=1.0, blocks=[slice(0, 2), slice(3, 4)])
    with pytest.raises(ValueError, match="3 learning rates"):
        PopulationAdam(flat, lr=[1e-2] * 3, eps=1e-8, max_grad_norm=1.0)



def test_freezing_columns_is_a_no_op_on_the_cpu():
    """On the CPU the fused kernel's vectorised body and scalar tail round differently, so a
    frozen column would move others between them: every row stays whole there (the CUDA
    check that freezing keeps the bits is tests/gpu/test_optim_gpu.py)."""
    module = _TwoParams(torch.randn(4, 3), torch.randn(4, 57))
    opt = PopulationAdam(FlatParameters(module, 4), lr=1e-2, eps=1e-8, max_grad_norm=1.0)
    calls = opt._calls
    opt.freeze_columns([slice(50, 60)])
    assert opt.frozen == () and opt._calls is calls
