"""The fused dueling-C51 head (`tune_gems::dueling_c51`, issue 22) on CPU: its reference against
the network's unfused path (values bit for bit, gradients to float64 rounding), float64
gradcheck of the closed-form backward, opcheck, and members that never mix."""

from __future__ import annotations

import pytest
import torch

from learner_fixtures import tiny_config
from tune_gems.model.network import BranchingC51
from tune_gems.ops import custom_ops  # noqa: F401 (registers the ops)
from tune_gems.ops.dueling_head import dueling_c51, dueling_c51_grads

OP = torch.ops.tune_gems.dueling_c51
SHAPES = [(1, 1, 1, 2, 3), (2, 5, 2, 3, 11), (3, 4, 3, 4, 51)]  # (P, N, K, A, atoms)


def make_inputs(shape, dtype=torch.float64, seed=0, rows=None):
    P, N, K, A, atoms = shape
    gen = torch.Generator().manual_seed(seed)
    value = (3 * torch.randn(P, N, atoms, generator=gen, dtype=dtype)).requires_grad_()
    adv = (3 * torch.randn(P, K, N, A, atoms, generator=gen, dtype=dtype)).requires_grad_()
    support = torch.linspace(-10, 10, atoms, dtype=dtype)
    R = N if rows is None else rows
    action = torch.randint(A, (P, R, K), generator=gen)
    return value, adv, support, action


def unfused(out_logits, support, action):
    """The learner's unfused path: expected Q of the logits, log-softmax of the taken action's."""
    q = (torch.softmax(out_logits, dim=-1) * support).sum(-1)
    P, R, K = action.shape
    taken = out_logits[:, :R].gather(3, action[..., None, None].expand(P, R, K, 1, out_logits.shape[-1])).squeeze(3)
    return q, torch.log_softmax(taken, dim=-1)


def test_reference_equals_the_networks_unfused_path_bit_for_bit():
    cfg = tiny_config()
    net = BranchingC51(cfg.model, 6, 2, 3, [1, 2, 3])
    out = net(torch.randn(3, 10, 6), net.weights("eval"))
    action = torch.randint(3, (3, 4, 2))
    q, lp = OP(out.value, out.adv, net.support, action)
    want_q, want_lp = unfused(out.logits, net.support, action)
    assert torch.equal(q, want_q) and torch.equal(q, net.expected_q(out.logits))
    assert torch.equal(lp, want_lp)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_closed_form_gradients_equal_autograd_of_the_unfused_path(shape):
    value, adv, support, action = make_inputs(shape, rows=max(1, shape[1] - 1))
    P, N, K, A, atoms = shape
    gen = torch.Generator().manual_seed(1)
    gq = torch.randn(P, N, K, A, generator=gen, dtype=torch.float64)
    glp = torch.randn(*action.shape, atoms, generator=gen, dtype=torch.float64)
    logits = value.unsqueeze(2).unsqueeze(3) + adv.permute(0, 2, 1, 3, 4) - adv.permute(0, 2, 1, 3, 4).mean(3, keepdim=True)
    q, lp = unfused(logits, support, action)
    for weights in ((gq, glp), (gq, None), (None, glp)):
        loss = sum((o * w).sum() for o, w in zip((q, lp), weights) if w is not None)
        want = torch.autograd.grad(loss, (value, adv), retain_graph=True)
        got = dueling_c51_grads(*weights, value.detach(), adv.detach(), support, action)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12)


def test_gradcheck_float64():
    value, adv, support, action = make_inputs((2, 3, 2, 2, 4), rows=2)
    assert torch.autograd.gradcheck(lambda v, a: OP(v, a, support, action), (value, adv))
    assert torch.autograd.gradcheck(lambda v, a: OP(v, a, support, action)[0], (value, adv))  # no log-prob grad


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_opcheck(dtype):
    value, adv, support, action = make_inputs(SHAPES[1], dtype, rows=3)
    torch.library.opcheck(OP.default, (value, adv, support, action))
    P, N, K, A, atoms = SHAPES[1]
    grads = (torch.randn(P, N, K, A, dtype=dtype), torch.randn(P, 3, K, atoms, dtype=dtype))
    torch.library.opcheck(torch.ops.tune_gems.dueling_c51_backward.default, (*grads, value.detach(), adv.detach(), support, action))


def test_members_never_mix():
    value, adv, support, action = make_inputs((3, 4, 2, 3, 11))
    q, lp = dueling_c51(value, adv, support, action)
    q0, lp0 = dueling_c51(value[:1], adv[:1], support, action[:1])
    assert torch.equal(q[:1], q0) and torch.equal(lp[:1], lp0)
