"""The Triton layer kernels (`model.layer_kernel: triton`) on the GPU at the network's real shapes:
the invariants the CPU interpreter tests check at small shapes (tests/test_triton_layers.py),
compiled and at every precision.

- a member's outputs, input gradient, parameter gradients and spectral-norm state computed in a
  population of P members equal, bit for bit, those of the member alone (P = 1, 3, 64, 256: the
  tiles depend on the shape only), at fp32, tf32 and bf16;
- two runs are bit-equal;
- values and gradients are within the float64 torch path's error bound, widened by the rounding
  of the products' operands (tf32: 2 x 2^-11, bf16: 2 x 2^-8 of the magnitude);
- a product and its backward replay in a CUDA graph with the eager bits;
- the kernels the driver loaded are tensor-core dots at the product's precision, with no spills
  (the driver's own count) and ptxas's wgmma pipeline kept (tests/test_triton_compile.py checks
  the same on the CPU's compile).

Run on the GPU machine: `pytest -m gpu tests/gpu/test_triton_layers_gpu.py -q` (skipped without
CUDA); `bash benchmarks/gpu_session.sh triton` runs it.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import pytest
import torch

from test_triton_layers import Magnitudes, assert_within_bound, build_layer, float64_reference, member_inputs, run_layer

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # triton_inspect.py

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]
triton = pytest.importorskip("triton")

# (kind, replicas, rows N, inputs K, outputs O): train_step.py's network (hidden 256, stream 64,
# 51 atoms, 2 branches of 3 sub-actions) at batch 256 (2B = 512 rows through the online net)
SHAPES = {
    "plain": (1, 512, 256, 256),  # trunk1 without spectral norm (a gem head's layer)
    "spectral": (1, 512, 256, 256),  # trunk1
    "noisy": (2, 512, 64, 153),  # adv_out: 2 branches of 3 x 51
}
OPERAND_ROUNDING = {"fp32": 0.0, "tf32": 2 * 2.0**-11, "bf16": 2 * 2.0**-8}


@contextlib.contextmanager
def precision(name: str):
    """The learner's precision contexts (trainer/learner.py): tf32 through the float32 matmul
    precision, bf16 through autocast."""
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest" if name == "fp32" else "high")
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False) if name == "bf16" else contextlib.nullcontext()
    try:
        with autocast:
            yield
    finally:
        torch.set_float32_matmul_precision(previous)


def _run(kind: str, seeds: list[int], prec: str, salt: int = 0):
    reps, N, K, O = SHAPES[kind]
    layer, flat = build_layer(kind, seeds, reps, K, O, device="cuda")
    x, dy = member_inputs(seeds, reps, N, K, O, salt=salt, device="cuda")
    with precision(prec):
        y, dx, grad = run_layer(layer, flat, x, dy, relu=True)
    state = torch.cat([layer.sn_u, layer.sn_v], 1) if kind == "spectral" else x.new_zeros(len(seeds) * reps, 0)
    P = len(seeds)
    return [t.reshape(P, -1) for t in (y, dx, grad, state)]


@pytest.mark.parametrize("prec", ["fp32", "tf32", "bf16"])
@pytest.mark.parametrize("kind", ["plain", "spectral", "noisy"])
def test_a_member_alone_equals_the_member_inside_any_population_bit_for_bit(kind, prec):
    seeds = list(range(1000, 1256))
    alone = {m: _run(kind, [seeds[m]], prec) for m in (0, 1, 2, 63, 255)}
    for P in (3, 64, 256):
        together = _run(kind, seeds[:P], prec)
        for m in (m for m in alone if m < P):
            for name, ours, theirs in zip(("y", "dx", "grad", "sn state"), together, alone[m]):
                assert torch.equal(ours[m], theirs[0]), f"member {m} of {P} ({prec}): {name} differs from the member alone"


@pytest.mark.parametrize("kind", ["plain", "spectral", "noisy"])
def test_two_runs_are_bit_equal(kind):
    a, b = _run(kind, [5, 6, 7, 8], "tf32"), _run(kind, [5, 6, 7, 8], "tf32")
    for x, y in zip(a, b):
        assert torch.equal(x, y)


@pytest.mark.parametrize("prec", ["fp32", "tf32", "bf16"])
@pytest.mark.parametrize("kind", ["plain", "spectral", "noisy"])
def test_values_and_gradients_are_within_the_bound_of_the_float64_torch_path(kind, prec):
    reps, N, K, O = SHAPES[kind]
    seeds = [21, 22, 23, 24]
    layer, flat = build_layer(kind, seeds, reps, K, O, device="cuda")
    x, dy = member_inputs(seeds, reps, N, K, O, salt=1, device="cuda")
    with precision(prec):
        y, dx, grad = run_layer(layer, flat, x, dy, relu=True)
    mask = (y > 0).double()
    y_lin, dx64, grad64, ref = float64_reference(kind, seeds, reps, K, O, x, dy, mask)
    bounds = Magnitudes(kind, ref, x, dy * mask)
    r = OPERAND_ROUNDING[prec]
    assert_within_bound(y, y_lin.clamp_min(0.0), bounds.y, f"y ({prec})", r)
    assert_within_bound(dx, dx64, bounds.dx, f"dx ({prec})", r)
    assert_within_bound(grad, grad64, bounds.flat_grad, f"parameter gradients ({prec})", r)


@pytest.mark.parametrize("kind", ["spectral", "noisy"])
def test_a_product_and_its_backward_replay_in_a_cuda_graph_with_the_eager_bits(kind):
    reps, N, K, O = SHAPES[kind]
    layer, flat = build_layer(kind, [1, 2, 3], reps, K, O, device="cuda")
    x, dy = member_inputs([1, 2, 3], reps, N, K, O, salt=2, device="cuda")
    state = [t.clone() for t in layer.buffers()]

    def restore():
        for t, s in zip(layer.buffers(), state):
            t.copy_(s)

    def step():
        with precision("tf32"):
            return run_layer(layer, flat, x, dy, relu=True)

    eager = [t.clone() for t in step()]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()  # warm-up (compiles), outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step()
    for _ in range(2):
        restore()
        graph.replay()
        torch.cuda.synchronize()
        for a, b in zip(eager, captured):
            assert torch.equal(a, b)


@pytest.mark.parametrize("prec", ["tf32", "bf16"])
@pytest.mark.parametrize("kind", ["plain", "spectral", "noisy"])
def test_the_loaded_kernels_are_pipelined_tensor_core_dots_without_spills(kind, prec, monkeypatch):
    from tune_gems.ops import triton_layers
    from triton_inspect import describe

    loaded = []

    class Logged:
        def __init__(self, fn):
            self.fn = fn

        def __getitem__(self, grid):
            launch = self.fn[grid]
            return lambda *args, **kwargs: loaded.append(launch(*args, **kwargs))

    for name in ("_rows_kernel", "_weight_grad_kernel"):
        monkeypatch.setattr(triton_layers.kernels, name, Logged(getattr(triton_layers.kernels, name)))
    _run(kind, [1, 2, 3], prec)
    assert len(loaded) == 3  # forward, dx, dW
    for kernel in loaded:
        d = describe(kernel)
        assert d["dot"] == f"wgmma.{prec}", (kernel.name, d)
        assert d["spills"] == 0 and not d["wgmma_serialized"], (kernel.name, d)
