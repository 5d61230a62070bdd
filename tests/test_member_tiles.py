"""No member blocks (issue 33, item 3): batched matmuls in member tiles of a fixed size and
fixed-order per-member reductions, so a member's bits do not depend on the population size.

On the CPU torch's own products and reductions already do not depend on P, and they stay what
the learner runs there (the CPU bits of every earlier run). These tests check what can be
checked without a GPU: the CPU paths are torch's ops, bit for bit; the tiled and fixed-order
forms compute the same values, reassemble and differentiate correctly, and dispatch only the
reductions their P-invariance argument allows (tune_gems.model.member_reduce); and both forms,
forced onto the CPU, train a learner whose members equal those of a run with twice the seeds.
tests/gpu/test_member_tiles_gpu.py checks the bits on the GPU."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from learner_fixtures import bits_equal, tiny_config
from tune_gems.design.arms import ArmsConfig, expand_arms
from tune_gems.model import layers, member_reduce
from tune_gems.model.layers import member_tiled
from tune_gems.model.member_reduce import (
    INNER_CHUNK,
    MIN_CHUNKS,
    WIDE_CHUNK,
    expand_to,
    fixed_order_norm,
    fixed_order_sum,
    member_mean,
    member_norm,
    member_sum,
)


def _randn(*shape: int, seed: int = 0, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


# -- member tiles ---------------------------------------------------------------------------------


def test_a_tiled_product_equals_one_call_and_reassembles_every_group_in_place():
    G = 11
    b, x, w = _randn(G, 1, 3, seed=1), _randn(G, 7, 5, seed=2), _randn(G, 5, 3, seed=3)
    whole = torch.baddbmm(b, x, w)
    for tile in (1, 4, 16):
        for n in (1, 3, 4, 5, 11):
            out = member_tiled(torch.baddbmm, tile, b[:n], x[:n], w[:n])
            assert out.shape == (n, 7, 3)
            torch.testing.assert_close(out, whole[:n], rtol=1e-6, atol=1e-6)
            # group g computed at place g % tile of its call, at any n: the same bits as at n = G
            assert torch.equal(out, member_tiled(torch.baddbmm, tile, b, x, w)[:n]), (tile, n)


def test_gradients_flow_through_the_tiles_and_their_padding():
    G, tile = 5, 4
    x = _randn(G, 6, 4, seed=4).requires_grad_()
    w = _randn(G, 4, 3, seed=5).requires_grad_()
    b = _randn(G, 1, 3, seed=6).requires_grad_()
    up = _randn(G, 6, 3, seed=7)
    tiled = torch.autograd.grad((member_tiled(torch.baddbmm, tile, b, x, w) * up).sum(), (b, x, w))
    whole = torch.autograd.grad((torch.baddbmm(b, x, w) * up).sum(), (b, x, w))
    for a, c in zip(tiled, whole):
        torch.testing.assert_close(a, c, rtol=1e-5, atol=1e-6)


def test_the_network_gives_every_layer_its_tile_and_a_bad_tile_is_refused():
    from tune_gems.gems.registry import run_gems
    from tune_gems.model.network import BranchingC51

    heads = {g.name: g.head for g in run_gems(()) if g.head is not None}
    cfg = tiny_config().model
    net = BranchingC51(cfg, 9, 2, 3, [1, 2, 3], heads, member_tile=2)
    tiles = {name: (layer.tile, layer.reps) for name, layer in net.weight_layers().items()}
    assert all(t == 2 * reps for t, reps in tiles.values()) and tiles["adv_out"] == (4, 2) and "g12.pred_in" in tiles
    assert net.weights("eval")["g12.pred_in"].tile == 2 and net.weights("train")["trunk0"].tile == 2
    assert all(layer.tile is None for layer in BranchingC51(cfg, 9, 2, 3, [1, 2], heads).weight_layers().values())
    with pytest.raises(ValueError, match="member tile must be at least 1"):
        BranchingC51(cfg, 9, 2, 3, [1, 2], heads, member_tile=0)


# -- fixed-order reductions -----------------------------------------------------------------------

LENGTHS = (0, 1, 31, 32, 33, 200, WIDE_CHUNK * MIN_CHUNKS - 1, WIDE_CHUNK * MIN_CHUNKS, 5003, 70001)


def test_on_the_cpu_the_member_reductions_are_torchs_own_bit_for_bit():
    x = _randn(6, 3, 5, 4, seed=8)
    assert torch.equal(member_sum(x, (1, 2, 3)), x.sum(dim=(1, 2, 3)))
    assert torch.equal(member_sum(x, -1, keepdim=True), x.sum(-1, keepdim=True))
    assert torch.equal(member_mean(x, (1, 2, 3)), x.mean(dim=(1, 2, 3)))
    rows = _randn(4, 1000, seed=9)[:, 17:900]  # a column slice of a wider matrix (the clip groups)
    assert torch.equal(member_norm(rows, 1), torch.linalg.vector_norm(rows, dim=1))
    assert torch.equal(member_norm(x, -1, keepdim=True), x.norm(dim=-1, keepdim=True))  # spectral norm's normalise


@pytest.mark.parametrize("n", LENGTHS)
def test_the_fixed_order_sum_and_norm_are_the_sum_and_the_norm(n):
    x = _randn(5, n, seed=n)
    torch.testing.assert_close(fixed_order_sum(x, 1), x.double().sum(1).float(), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(fixed_order_norm(x, 1), torch.linalg.vector_norm(x.double(), dim=1).float(), rtol=1e-5, atol=1e-6)
    assert fixed_order_sum(x, 1, keepdim=True).shape == (5, 1) and fixed_order_norm(x, 1, keepdim=True).shape == (5, 1)


def test_the_fixed_order_sum_over_several_and_inner_dims_and_of_a_strided_view():
    x = _randn(4, 6, 7, 9, seed=10)
    torch.testing.assert_close(fixed_order_sum(x, (1, 2, 3)), x.double().sum((1, 2, 3)).float(), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(fixed_order_sum(x, (1,), keepdim=True), x.sum(1, keepdim=True), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(fixed_order_sum(x, (0, 2)), x.sum((0, 2)), rtol=1e-5, atol=1e-5)
    wide = _randn(3, 5000, seed=11)[:, 100:4100]
    torch.testing.assert_close(fixed_order_sum(wide, 1), wide.double().sum(1).float(), rtol=1e-5, atol=1e-4)


class _Reductions(TorchDispatchMode):
    """Records (elements per output, outputs per row, reduced dim contiguous) of every
    reduction (sum, norm) a fixed-order form dispatches."""

    def __init__(self):
        super().__init__()
        self.seen: list[tuple[int, int, bool]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if name in ("sum", "linalg_vector_norm", "norm", "mean"):
            x = args[0]
            dims = args[1] if name == "sum" else kwargs.get("dim", args[2] if len(args) > 2 else None)
            assert dims is not None and list(dims) in ([-1], [x.dim() - 1]), (name, dims)
            self.seen.append((x.shape[-1], x.shape[-2] if x.dim() == 3 else 1, x.stride(-1) == 1))
        return func(*args, **kwargs)


@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("form", [fixed_order_sum, fixed_order_norm])
def test_every_stage_reduces_few_contiguous_elements_per_output(n, form):
    """The precondition of the P-invariance argument (member_reduce's docstring): each torch
    reduction reduces the last, contiguous dim, at most INNER_CHUNK elements per output, or at
    most WIDE_CHUNK where every row has at least MIN_CHUNKS of them; the row count never matters."""
    rows = _randn(3, n + 7, seed=n)[:, 7:]  # strided rows, as a column slice
    with _Reductions() as seen:
        form(rows, 1)
    assert seen.seen
    for elements, chunks, contiguous in seen.seen:
        assert contiguous
        assert elements <= INNER_CHUNK or (elements <= WIDE_CHUNK and chunks >= MIN_CHUNKS), (elements, chunks)


@pytest.mark.parametrize("n", (33, 300, 5003, 70001))
@pytest.mark.parametrize("form", [fixed_order_sum, fixed_order_norm])
def test_a_rows_fixed_order_reduction_does_not_depend_on_the_other_rows(n, form):
    x = _randn(9, n, seed=12)
    alone = [form(x[p : p + 1], 1) for p in range(9)]
    for rows in (2, 5, 9):
        together = form(x[:rows], 1)
        for p in range(rows):
            assert torch.equal(together[p : p + 1], alone[p]), (rows, p)


def test_expand_to_is_a_view_whose_gradient_is_the_broadcast_gradient(monkeypatch):
    """On the CPU its gradient is autograd's own reduction of the broadcast, bit for bit; in the
    fixed-order form (forced here) the same sum to rounding, over the size-1 dims wherever they are."""
    t = _randn(4, 1, 1, seed=13).requires_grad_()
    w = _randn(4, 30, 50, seed=14)
    e = expand_to(t, w.shape)
    assert e.shape == w.shape and e.data_ptr() == t.data_ptr() and e.stride() == (1, 0, 0)
    broadcast = torch.autograd.grad((w / t).sum(), t)[0]
    assert torch.equal(torch.autograd.grad((w / e).sum(), t)[0], broadcast)
    monkeypatch.setattr(member_reduce, "fixed_order", lambda x: True)
    torch.testing.assert_close(torch.autograd.grad((w / expand_to(t, w.shape)).sum(), t)[0], broadcast, rtol=1e-5, atol=1e-6)
    bias = _randn(4, 1, 50, seed=15).requires_grad_()
    fixed = torch.autograd.grad((w * expand_to(bias, w.shape)).sum(), bias)[0]
    torch.testing.assert_close(fixed, torch.autograd.grad((w * bias).sum(), bias)[0], rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="keeps the number of dims"):
        expand_to(t, (4, 30))


# -- both forms in the learner, forced onto the CPU ------------------------------------------------

ARMS = ArmsConfig.model_validate({"list": [
    {"name": "measured"},
    {"name": "g10-wired", "gems.g10.mode": "wire", "gems.g10.weight": 0.1, "model.spectral_norm": True},
    {"name": "g12-wired", "gems.g12.mode": "wire", "gems.g12.weight": 0.1, "model.noisy": False},
]})  # fmt: skip


def _force_gpu_forms(monkeypatch, tile: int) -> None:
    """Run the CUDA forms on the CPU: member tiles of `tile` members, fixed-order reductions."""
    monkeypatch.setattr(layers, "MEMBER_TILE", tile)
    monkeypatch.setattr(layers, "_on_device", lambda t, _x: t)
    monkeypatch.setattr(member_reduce, "fixed_order", lambda _x: True)


ROW_WIDTH = "model.predictor_hidden=26"
"""A member's parameter row of 3664 = 229 x 16 floats: the CPU fused Adam rounds the last
numel % 16 elements of each tensor it is given on a scalar path (PopulationAdam.freeze_columns),
and its tensors are (fold, arm) blocks of S rows, so with a ragged row the last member of a
block would step differently at another S. A CPU matter only (CUDA's Adam is elementwise)."""


def _arms_run(seeds: int, iterations: int):
    from learner_fixtures import prefilled_learner

    base = tiny_config(f"trainer.population={seeds}", "model.spectral_norm=true", ROW_WIDTH)
    learner = prefilled_learner(base, expand_arms(base, ARMS))
    assert learner.online_flat.data.shape[1] % 16 == 0
    for _ in range(iterations):
        learner.iteration()
    return learner


def test_with_the_gpu_forms_an_arm_of_s_seeds_equals_the_first_s_seeds_of_a_run_with_2s(monkeypatch):
    """Tiles of 3 members (so the two runs' tiles cut the arms differently, with padding) and
    fixed-order reductions: after 6 iterations every member of the S = 2 run equals, bit for bit,
    the same arm and seed of the S = 4 run (arm a's seed s is member 2a + s there, 4a + s here)."""
    from learner_fixtures import member_part

    _force_gpu_forms(monkeypatch, tile=3)
    small, large = _arms_run(2, 6), _arms_run(4, 6)
    assert all(layer.tile == 3 * layer.reps for layer in small.online.weight_layers().values())
    mine, theirs = small.state_tensors(), large.state_tensors()
    for a in range(3):
        for s in range(2):
            for k, v in mine.items():
                assert bits_equal(member_part(k, v, 6, 2 * a + s), member_part(k, theirs[k], 12, 4 * a + s)), (a, s, k)


def test_the_gpu_forms_train_as_the_cpu_forms_do(monkeypatch):
    """The tiled products and the fixed-order reductions are the same arithmetic in another
    order: after 6 iterations the parameters agree with the CPU path's to float rounding."""
    plain = _arms_run(2, 6)
    _force_gpu_forms(monkeypatch, tile=4)
    forced = _arms_run(2, 6)
    torch.testing.assert_close(forced.online_flat.data, plain.online_flat.data, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(forced.acc, plain.acc, rtol=1e-4, atol=1e-5, equal_nan=True)
