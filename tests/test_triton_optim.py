"""The triton path's optimizer step (tune_gems.ops.triton_layers.ClipAdam: the clip-group norms in a
fixed order, then the clip and Adam of every element in one kernel), its row means and its one-launch
draw of the RNG's block, on Triton's CPU interpreter.

The oracle is the update rule in float64 (torch.optim.Adam's, after each member's clip per
group) with the float32 values of its hyperparameters and bias corrections, as CUDA's fused Adam
computes them, one step at a time from the kernel's own float32 state, so the tolerance is a few
float32 roundings of each quantity (the interpreter's tl.fma is made to round once, as the GPU's);
beside it, torch's fused Adam on the CPU. Bits: a member's parameters, moments and norms equal those
of the member alone (P = 1) at its learning rate, inside a population with other rates (what the
seed-block and arms invariants need: tests/gpu/test_target_copy_and_seed_blocks_gpu.py checks them
through the learner on the GPU), with or without frozen columns.
"""

from __future__ import annotations

import pytest
import torch

from test_triton_layers import triton_interpreter  # noqa: F401  (the module's interpreter fixture)
from tune_gems.model.flat import FlatParameters
from tune_gems.trainer.optim import CLIP_EPS, PopulationAdam

pytestmark = pytest.mark.filterwarnings("ignore:Conversion of an array with ndim > 0 to a scalar:DeprecationWarning")

U32 = 2.0**-24
BETAS, EPS = (0.9, 0.999), 1e-8
WIDTH = 2600
"""Columns: three programs of the kernel per row, the last one masked."""
GROUPS = [slice(0, 700), slice(700, 1537), slice(1537, WIDTH)]
"""Clip groups of odd widths, the second straddling the kernel's first column block."""
ALIGNED_GROUPS = [slice(0, 704), slice(704, 1536), slice(1536, WIDTH)]
"""Groups at multiples of 4 columns (the learner's, whose parameters start at multiples of 32):
the kernels address them in units of 4 columns."""


class _Rows(torch.nn.Module):
    def __init__(self, rows: torch.Tensor):
        super().__init__()
        self.w = torch.nn.Parameter(rows.clone())


def _gradients(steps: int, rows: int, seed: int = 0) -> torch.Tensor:
    """[steps, rows, WIDTH] gradients over six decades, each group's norm near the clip bound so
    some members clip and others do not."""
    g = torch.Generator().manual_seed(seed)
    scale = torch.logspace(-3, 3, WIDTH)[torch.randperm(WIDTH, generator=g)] * 1e-3
    return torch.randn(steps, rows, WIDTH, generator=g) * scale * torch.logspace(-1, 1, rows)[:, None]


def _optimizer(module, rows: torch.Tensor, lrs, max_norm: float = 1.0, kernel: bool = True, groups=GROUPS):
    flat = FlatParameters(_Rows(rows), rows.shape[0])
    opt = PopulationAdam(flat, lr=lrs, eps=EPS, max_grad_norm=max_norm, betas=BETAS, clip_groups=groups,
                         clip_adam=module.ClipAdam if kernel else None)  # fmt: skip
    return flat, opt


def _run(module, rows, grads, lrs, frozen=(), kernel=True) -> tuple[torch.Tensor, ...]:
    flat, opt = _optimizer(module, rows, lrs, kernel=kernel)
    opt.freeze_columns(list(frozen))
    norms = []
    for g in grads:
        flat.grad.copy_(g)
        norms.append(opt.step_groups())
    return flat.data.clone(), opt.exp_avg.clone(), opt.exp_avg_sq.clone(), torch.stack(norms)


def _reference_step(p, g, m, v, step: int, lrs, max_norm: float, groups):
    """One clipped Adam step in float64 (torch.optim.Adam's rule); returns (p, m, v, norms)."""
    p, g, m, v = (t.double() for t in (p, g, m, v))
    norms = torch.stack([torch.linalg.vector_norm(g[:, c], dim=1) for c in groups])
    for c, norm in zip(groups, norms):
        g[:, c] *= (max_norm / (norm + CLIP_EPS)).clamp(max=1.0)[:, None]
    # the hyperparameters' float32 values and bias corrections (1 - beta^step, which cancels), as both steps compute them
    b1, b2, eps = (torch.tensor(x, dtype=torch.float32).item() for x in (*BETAS, EPS))
    correction1, correction2 = (1 - torch.pow(torch.tensor(BETAS), torch.tensor(float(step)))).tolist()
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    lr = torch.tensor(lrs, dtype=torch.float32).double()[:, None]
    p = p - lr / correction1 * m / (v.sqrt() / correction2**0.5 + eps)
    return p, m, v, norms


@pytest.mark.parametrize("groups", [GROUPS, ALIGNED_GROUPS], ids=["odd", "aligned"])
def test_each_step_equals_the_float64_rule_within_float32_rounding(triton_interpreter, groups):
    torch.manual_seed(0)
    rows, grads = torch.randn(3, WIDTH), _gradients(3, 3)
    lrs = [1e-2, 3e-3, 1e-2]
    flat, opt = _optimizer(triton_interpreter, rows, lrs, groups=groups)
    clipped = set()
    for step, g in enumerate(grads, start=1):
        before = (flat.data.clone(), g, opt.exp_avg.clone(), opt.exp_avg_sq.clone())
        flat.grad.copy_(g)
        norms = opt.step_groups()
        p, m, v, want_norms = _reference_step(*before, step, lrs, 1.0, groups)
        clipped |= {bool(x) for x in (want_norms > 1.0).flatten()}
        torch.testing.assert_close(norms.double(), want_norms, rtol=WIDTH * U32, atol=0.0)
        # each moment: two roundings of its own and one of the clipped gradient
        assert ((opt.exp_avg.double() - m).abs() <= 4 * U32 * (m.abs() + (1 - BETAS[0]) * g.double().abs())).all(), step
        assert ((opt.exp_avg_sq.double() - v).abs() <= 6 * U32 * v.abs()).all(), step
        # the parameter: its own rounding and a few of the step (about lr in size)
        step_size = torch.tensor(lrs, dtype=torch.float64)[:, None]
        assert ((flat.data.double() - p).abs() <= 2 * U32 * p.abs() + 16 * U32 * step_size).all(), step
    assert clipped == {True, False}  # some members clipped, others not: both branches ran


def test_it_agrees_with_torchs_fused_adam_within_float32_rounding(triton_interpreter):
    """The torch path's step (row norms, clip and torch's fused Adam, on the CPU) and the kernel
    from the same state: the same rule in float32, so a few roundings apart, besides the bias corrections
    1 - beta^t, which the kernel rounds to float32 as CUDA's fused Adam does (the GPU test compares those
    in ulps): at most U beta^t / (1 - beta^t) of each step, relative."""
    torch.manual_seed(1)
    rows, grads = torch.randn(2, WIDTH), _gradients(3, 2, seed=1)
    ours = _run(triton_interpreter, rows, grads, [1e-2, 3e-3])
    theirs = _run(triton_interpreter, rows, grads, [1e-2, 3e-3], kernel=False)
    torch.testing.assert_close(ours[3], theirs[3], rtol=WIDTH * U32, atol=0.0)
    t = torch.arange(1.0, len(grads) + 1)
    corrections = (BETAS[0] ** t / (1 - BETAS[0] ** t) + BETAS[1] ** t / (1 - BETAS[1] ** t) / 2).sum().item()
    for a, b in zip(ours[:3], theirs[:3]):
        assert ((a - b).abs() <= 8 * U32 * b.abs() + 1e-2 * (3 * 16 + corrections) * U32).all()


def test_a_member_alone_has_the_bits_it_has_inside_any_population(triton_interpreter):
    torch.manual_seed(2)
    rows, grads = torch.randn(4, WIDTH), _gradients(2, 4, seed=2)
    lrs = [1e-2, 1e-2, 3e-3, 3e-3]
    together = _run(triton_interpreter, rows, grads, lrs)
    again = _run(triton_interpreter, rows, grads, lrs)
    assert all(torch.equal(a, b) for a, b in zip(together, again))
    for r in range(4):
        alone = _run(triton_interpreter, rows[r : r + 1], grads[:, r : r + 1], lrs[r])
        for t, a in zip(together[:3], alone[:3]):
            assert torch.equal(t[r : r + 1], a), r
        assert torch.equal(together[3][..., r : r + 1], alone[3]), r
    middle = _run(triton_interpreter, rows[1:3], grads[:, 1:3], lrs[1:3])
    assert all(torch.equal(t[1:3], a) for t, a in zip(together[:3], middle[:3]))
    assert not torch.equal(together[0][2], _run(triton_interpreter, rows[2:3], grads[:, 2:3], 1e-2)[0][0])  # lr matters


def test_frozen_columns_keep_their_values_and_the_others_their_bits(triton_interpreter):
    """Columns no gradient reaches (zero gradients) are skipped: the result is the full update's."""
    torch.manual_seed(3)
    rows, grads = torch.randn(2, WIDTH), _gradients(2, 2, seed=3)
    frozen = [slice(10, 20), slice(1400, WIDTH)]
    for c in frozen:
        grads[:, :, c] = 0.0
    full = _run(triton_interpreter, rows, grads, 1e-2)
    part = _run(triton_interpreter, rows, grads, 1e-2, frozen=frozen)
    assert all(torch.equal(a, b) for a, b in zip(full, part))
    assert torch.equal(part[0][:, 1400:], rows[:, 1400:])


def test_clip_groups_that_do_not_tile_the_columns_are_refused(triton_interpreter):
    flat = FlatParameters(_Rows(torch.zeros(2, 100)), 2)
    with pytest.raises(ValueError, match="consecutive column ranges"):
        PopulationAdam(flat, lr=1e-2, eps=EPS, max_grad_norm=1.0, clip_groups=[slice(0, 40), slice(50, 100)],
                       clip_adam=triton_interpreter.ClipAdam)  # fmt: skip


# -- row means (the learner's q_mean on this path) ------------------------------------------------


def _row_block(rows: int, cols: int) -> torch.Tensor:
    """Rows of `cols` contiguous columns inside wider rows, magnitudes over six decades."""
    g = torch.Generator().manual_seed(rows * 1000 + cols)
    full = torch.randn(rows, cols + 7, generator=g) * torch.logspace(-3, 3, cols + 7)[torch.randperm(cols + 7, generator=g)]
    return full[:, 3 : 3 + cols]


@pytest.mark.parametrize("cols", [1, 200, 1000, 2500])
def test_row_means_equal_the_float64_mean_within_float32_rounding(triton_interpreter, cols):
    rows = _row_block(5, cols)
    got = triton_interpreter.row_means(rows).double()
    want = rows.double().mean(dim=1)
    assert ((got - want).abs() <= (cols + 2) * U32 * rows.double().abs().mean(dim=1)).all()


def test_a_row_mean_alone_has_the_bits_it_has_inside_any_number_of_rows(triton_interpreter):
    rows = _row_block(9, 2500)
    together = triton_interpreter.row_means(rows)
    for r in range(9):
        assert torch.equal(triton_interpreter.row_means(rows[r : r + 1]), together[r : r + 1]), r
    assert torch.equal(triton_interpreter.row_means(rows.flip(0).contiguous()).flip(0), together)


def test_a_matrix_it_cannot_read_row_by_row_is_refused(triton_interpreter):
    with pytest.raises(ValueError, match="contiguous rows"):
        triton_interpreter.row_means(_row_block(4, 10).t())
    with pytest.raises(ValueError, match="float32"):
        triton_interpreter.row_means(_row_block(4, 10).double())


# -- the RNG's block in one launch ---------------------------------------------------------------


@pytest.mark.parametrize("counter", [0, 1, 2**32 + 5])
def test_the_one_launch_draw_has_the_bits_of_the_counter_rngs_torch_ops(triton_interpreter, counter):
    """Keys over the whole 31-bit range, a counter past 2^32 (masked as torch's ops mask it), a plan
    of two and a half programs per member."""
    from tune_gems.rng import CounterRNG, DrawPlan, member_seeds

    rng = CounterRNG(member_seeds(2**40 + 3, 5) + [0, 2**31 - 1], "cpu")
    rng.counter.fill_(counter)
    sizes = {"noise": 1500, "env": 7, "replay": 1060}
    torch_block = rng.draw(DrawPlan(sizes, "cpu")).block
    kernel_block = rng.draw(DrawPlan(sizes, "cpu", kernel=triton_interpreter.uniform_block)).block
    assert kernel_block.shape == torch_block.shape == (7, 2567) and torch.equal(kernel_block, torch_block)
