"""The triton path's optimizer step on the GPU (tune_gems.ops.triton_layers.ClipAdam: the clip-group
norms in a fixed order, then the clip and Adam of every element in one kernel).

Against the step it replaces (the same norms, torch's clip coefficient and `torch._fused_adam_`)
at the learner's P=64 width: the moments within one float32 ulp, the parameters within a few of
the larger of them and their update (the kernel follows the fused Adam's operations in their
types; where the two compilers contract a multiply-add differently a rounding may differ), the
share of bit-equal elements printed. Bits: each member alone equals
the member inside P = 5 with other learning rates, and a captured graph's replays equal the
eager steps. Beside it, the RNG's block drawn in one launch (`triton_layers.uniform_block`) has the
bits of torch's ops.

Run on the GPU machine: `pytest -m gpu tests/gpu/test_triton_optim_gpu.py -q -rfE`.
"""

from __future__ import annotations

import pytest
import torch

from tune_gems.model.flat import FlatParameters
from tune_gems.trainer.optim import CLIP_EPS, PopulationAdam

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]
pytest.importorskip("triton")

WIDTH = 286304
"""The P=64 benchmark network's aligned row (benchmarks/train_step.py)."""
GROUPS = [slice(0, 200000), slice(200000, 250016), slice(250016, WIDTH)]
BETAS, EPS, MAX_NORM = (0.9, 0.999), 1e-8, 10.0


class _Rows(torch.nn.Module):
    def __init__(self, rows: torch.Tensor):
        super().__init__()
        self.w = torch.nn.Parameter(rows.clone())


def _state(P: int, seed: int):
    """Parameters, gradients [steps, P, WIDTH] (some members' groups above the clip bound) and
    moments as after a few steps."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    rows = torch.randn(P, WIDTH, device="cuda", generator=g)
    grads = torch.randn(3, P, WIDTH, device="cuda", generator=g) * torch.logspace(-4, -1, P, device="cuda")[:, None]
    m = torch.randn(P, WIDTH, device="cuda", generator=g) * 1e-3
    v = torch.rand(P, WIDTH, device="cuda", generator=g) * 1e-6
    return rows, grads, m, v


def _optimizer(rows, lrs, m, v, step: float):
    from tune_gems.ops.triton_layers import ClipAdam

    flat = FlatParameters(_Rows(rows), rows.shape[0])
    opt = PopulationAdam(flat, lr=lrs, eps=EPS, max_grad_norm=MAX_NORM, betas=BETAS, clip_groups=GROUPS, clip_adam=ClipAdam)
    opt.exp_avg.copy_(m)
    opt.exp_avg_sq.copy_(v)
    opt.step_count.fill_(step)
    return flat, opt


def _ulps(a: torch.Tensor, b: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """|a - b| in float32 ulps of |scale| (0 where equal)."""
    ulp = torch.nextafter(scale.abs(), torch.tensor(float("inf"), device=b.device)) - scale.abs()
    return torch.where(a == b, 0.0, (a - b).abs() / ulp)


def test_one_step_is_within_an_ulp_of_the_torch_clip_and_fused_adam(capsys):
    P = 64
    rows, grads, m, v = _state(P, 0)
    lrs = [1e-4] * 32 + [3e-4] * 32
    flat, opt = _optimizer(rows, lrs, m, v, step=4.0)
    flat.grad.copy_(grads[0])
    norms = opt.step_groups()
    assert (norms > MAX_NORM).any() and (norms < MAX_NORM).any()  # both branches of the clip
    for c, norm in zip(GROUPS, norms):  # the norms' float64 values within float32 rounding
        want = torch.linalg.vector_norm(grads[0][:, c].double(), dim=1)
        torch.testing.assert_close(norm.double(), want, rtol=(c.stop - c.start) * 2.0**-24, atol=0.0)
    # the replaced step: torch's clip coefficient on the same norms, then torch's fused Adam per lr
    g = grads[0].clone()
    for c, norm in zip(GROUPS, norms):
        g[:, c].mul_((MAX_NORM / (norm + CLIP_EPS)).clamp(max=1.0).unsqueeze(1))
    p, mm, vv, step = rows.clone(), m.clone(), v.clone(), torch.full((), 5.0, device="cuda")
    for rows_, lr in ((slice(0, 32), 1e-4), (slice(32, 64), 3e-4)):
        torch._fused_adam_([p[rows_]], [g[rows_]], [mm[rows_]], [vv[rows_]], [], [step], lr=lr, beta1=BETAS[0], beta2=BETAS[1],
                           weight_decay=0.0, eps=EPS, amsgrad=False, maximize=False)  # fmt: skip
    # a parameter in ulps of the larger of itself and its update: an ulp of the moments moves the
    # update by about one, and p - update rounds once more (a few ulps where they cancel)
    # (the first moment likewise of the larger of its two terms, which may cancel)
    update = torch.maximum(p.abs(), (p - rows).abs())
    terms = torch.maximum(BETAS[0] * m.abs(), (1 - BETAS[0]) * g.abs())
    for name, ours, theirs, scale, bound in (("param", flat.data, p, update, 4.0), ("exp_avg", opt.exp_avg, mm, terms, 1.0),
                                             ("exp_avg_sq", opt.exp_avg_sq, vv, vv, 1.0)):  # fmt: skip
        ulps = _ulps(ours, theirs, scale)
        with capsys.disabled():
            print(f"\nclip+adam vs torch's fused Adam, {name}: {(ulps == 0).double().mean().item():.6f} bit-equal, max {ulps.max().item():.2f} ulp")
        assert ulps.max().item() <= bound, name


def test_a_member_alone_and_graph_replays_have_the_bits_of_the_population_eager_steps():
    P = 5
    rows, grads, m, v = _state(P, 1)
    lrs = [1e-4, 1e-4, 3e-4, 3e-4, 1e-3]

    def run(members: slice, graphed: bool):
        flat, opt = _optimizer(rows[members], lrs[members], m[members], v[members], step=0.0)
        norms = []
        if not graphed:
            for g in grads:
                flat.grad.copy_(g[members])
                norms.append(opt.step_groups().clone())
            return flat.data, opt.exp_avg, opt.exp_avg_sq, torch.stack(norms)
        flat.grad.copy_(grads[0][members])
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # a warm-up step outside the graph compiles the kernels
            state = [t.clone() for t in (flat.data, opt.exp_avg, opt.exp_avg_sq, opt.step_count)]
            opt.step_groups()
            for t, s in zip((flat.data, opt.exp_avg, opt.exp_avg_sq, opt.step_count), state):
                t.copy_(s)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = opt.step_groups()
        for g in grads:
            flat.grad.copy_(g[members])
            graph.replay()
            norms.append(out.clone())
        return flat.data, opt.exp_avg, opt.exp_avg_sq, torch.stack(norms)

    together = run(slice(0, P), graphed=False)
    assert all(torch.equal(a, b) for a, b in zip(together, run(slice(0, P), graphed=True)))
    for r in range(P):
        alone = run(slice(r, r + 1), graphed=False)
        assert all(torch.equal(t[..., r : r + 1, :] if t.dim() == 2 else t[..., r : r + 1], a) for t, a in zip(together, alone)), r


def test_the_one_launch_draw_has_the_bits_of_torch_ops_on_the_gpu():
    from tune_gems.ops.triton_layers import uniform_block
    from tune_gems.rng import CounterRNG, DrawPlan, member_seeds

    rng = CounterRNG(member_seeds(7, 64) + [0, 2**31 - 1], "cuda")
    sizes = {"noise_online": 9000, "noise_target": 9000, "env_starts": 64, "replay": 256, "eps_action": 192}
    kernel = DrawPlan(sizes, "cuda", kernel=uniform_block)
    for counter in (0, 12345, 2**32 + 9):
        rng.counter.fill_(counter)
        assert torch.equal(rng.draw(kernel).block, rng.draw(DrawPlan(sizes, "cuda")).block), counter
