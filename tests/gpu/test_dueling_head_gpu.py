"""The fused dueling-C51 head's CUDA kernels (kernels/dueling_head.cu) against its plain-torch
reference (tune_gems.ops.dueling_head) computed in float64 on CPU, on fresh random inputs:
values and gradients (with each upstream gradient present or absent), every output element
written, bitwise equal across two runs and across CUDA-graph replays, opcheck, and a member's
outputs independent of how many members follow (the arms invariant).

Run on the GPU machine: `pytest -m gpu tests/gpu/test_dueling_head_gpu.py -q`.
"""

from __future__ import annotations

import pytest
import torch

from tune_gems.ops import resolve_backend
from tune_gems.ops.dueling_head import dueling_c51, dueling_c51_grads

from test_kernels_gpu import assert_bitwise_equal, assert_close_to_reference, poison_allocator

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

OPS = torch.ops.tune_gems
# (P, N, K, A, atoms, R): the learner's online pass is N = 2B rows, R = B of them taken
SHAPES = [(1, 512, 2, 3, 51, 256), (64, 512, 2, 3, 51, 256), (3, 7, 4, 5, 11, 7), (2, 3, 1, 2, 1024, 1), (5, 33, 3, 1, 3, 0)]
DTYPES = [torch.float32, torch.float64]
GRADS = ["both", "q_only", "log_probs_only"]


def shape_id(shape):
    return "P{}_N{}_K{}_A{}_atoms{}_R{}".format(*shape)


@pytest.fixture(scope="module")
def device():
    dev = torch.device("cuda", torch.cuda.current_device())
    assert resolve_backend("cuda", dev).name == "cuda"  # builds the extension
    return dev


def make_inputs(shape, seed):
    """float64 CPU inputs and upstream gradients of one shape."""
    P, N, K, A, atoms, R = shape
    gen = torch.Generator().manual_seed(seed)
    return {
        "value": 3 * torch.randn(P, N, atoms, generator=gen, dtype=torch.float64),
        "adv": 3 * torch.randn(P, K, N, A, atoms, generator=gen, dtype=torch.float64),
        "support": torch.linspace(-10, 10, atoms, dtype=torch.float64),
        "action": torch.randint(A, (P, R, K), generator=gen),
        "grad_q": torch.randn(P, N, K, A, generator=gen, dtype=torch.float64),
        "grad_log_probs": torch.randn(P, R, K, atoms, generator=gen, dtype=torch.float64),
    }


def on(x, dtype, device):
    return {k: (v.to(device) if v.dtype == torch.int64 else v.to(device, dtype)) for k, v in x.items()}


def upstream(x, which):
    return (x["grad_q"] if which != "log_probs_only" else None, x["grad_log_probs"] if which != "q_only" else None)


def run(x, which="both"):
    """(q, log_probs, grad_value, grad_adv) through the custom ops (CUDA kernels on CUDA)."""
    q, lp = OPS.dueling_c51(x["value"], x["adv"], x["support"], x["action"])
    gv, ga = OPS.dueling_c51_backward(*upstream(x, which), x["value"], x["adv"], x["support"], x["action"])
    return q, lp, gv, ga


@pytest.mark.parametrize("which", GRADS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_kernels_match_float64_reference(device, shape, dtype, which):
    x64 = make_inputs(shape, seed=10 * SHAPES.index(shape) + GRADS.index(which))
    poison_allocator(device)
    # the float32 kernels see the float32-rounded inputs; the reference runs on the same values
    x = on(x64, dtype, device)
    xr = {k: v.to("cpu", torch.float64) if v.is_floating_point() else v.cpu() for k, v in x.items()}
    want = (*dueling_c51(xr["value"], xr["adv"], xr["support"], xr["action"]),
            *dueling_c51_grads(*upstream(xr, which), xr["value"], xr["adv"], xr["support"], xr["action"]))  # fmt: skip
    got = run(x, which)
    for name, g, w in zip(("q", "log_probs", "grad_value", "grad_adv"), got, want):
        assert g.dtype == dtype
        assert_close_to_reference(g, w, dtype, f"{name} {shape_id(shape)} {which}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_two_runs_are_bitwise_identical(device, dtype):
    x = on(make_inputs(SHAPES[1], seed=3), dtype, device)
    for a, b, name in zip(run(x), run(x), ("q", "log_probs", "grad_value", "grad_adv")):
        assert_bitwise_equal(a, b, name)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cuda_graph_replays_are_bitwise_eager(device, dtype):
    x = on(make_inputs(SHAPES[1], seed=4), dtype, device)
    eager = [t.clone() for t in run(x)]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        run(x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = run(x)
    for _ in range(2):
        graph.replay()
        torch.cuda.synchronize()
        for a, b, name in zip(captured, eager, ("q", "log_probs", "grad_value", "grad_adv")):
            assert_bitwise_equal(a, b, f"replay {name}")


def test_first_members_do_not_depend_on_population(device):
    x = on(make_inputs((8, 64, 2, 3, 51, 32), seed=5), torch.float32, device)
    small = {k: v[:1].contiguous() for k, v in x.items() if k != "support"} | {"support": x["support"]}
    for a, b, name in zip(run(x), run(small), ("q", "log_probs", "grad_value", "grad_adv")):
        assert_bitwise_equal(a[:1].contiguous(), b, name)


def test_autograd_through_the_op_matches_reference(device):
    x = on(make_inputs(SHAPES[2], seed=6), torch.float64, device)
    v, a = x["value"].requires_grad_(), x["adv"].requires_grad_()
    q, lp = OPS.dueling_c51(v, a, x["support"], x["action"])
    gv, ga = torch.autograd.grad((q * x["grad_q"]).sum() + (lp * x["grad_log_probs"]).sum(), (v, a))
    cpu = {k: t.detach().cpu() for k, t in x.items()}
    wv, wa = dueling_c51_grads(cpu["grad_q"], cpu["grad_log_probs"], cpu["value"], cpu["adv"], cpu["support"], cpu["action"])
    assert_close_to_reference(gv, wv, torch.float64, "grad_value")
    assert_close_to_reference(ga, wa, torch.float64, "grad_adv")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_opcheck_on_cuda(device, dtype):
    x = on(make_inputs((3, 9, 2, 3, 11, 4), seed=7), dtype, device)
    x["value"].requires_grad_(True)
    x["adv"].requires_grad_(True)
    args = (x["value"], x["adv"], x["support"], x["action"])
    torch.library.opcheck(OPS.dueling_c51, args)
    detached = tuple(t.detach() for t in args)
    for grads in ((x["grad_q"], x["grad_log_probs"]), (None, x["grad_log_probs"]), (x["grad_q"], None)):
        torch.library.opcheck(OPS.dueling_c51_backward, (*grads, *detached))
