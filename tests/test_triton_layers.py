"""The Triton layer kernels (tune_gems.ops.triton_layers, `model.layer_kernel: triton`) on the CPU,
through Triton's interpreter (TRITON_INTERPRET=1), at small odd shapes with masked tiles.

The oracle is the torch path of the same layer (tune_gems.model.layers) in float64 on the same
parameters, noise and inputs. The tolerance is the forward error bound of floating-point sums:
an output that sums n products is within about n u sum|a_i b_i| of the exact value (u = 2^-24
for float32; Higham's gamma_n), so every output is checked against (n + 4) u times the same
expression evaluated on absolute values (`Magnitudes`; the 4 covers the noise, the scale and the
bias, each one rounding). Gradients are compared through the float32 forward's ReLU mask (an
output within rounding of zero may take either side of the kink).

Bits: a member's outputs and gradients computed in a population of P members equal those of
the member alone (P = 1, 3, 5: the tiles never depend on P), and two runs are bit-equal.
"""

from __future__ import annotations

import importlib
import sys

import numpy as np

import pytest
import torch

from tune_gems.model.flat import FlatParameters
from tune_gems.model.layers import NoisyPopLinear, PopLinear, layer_products

pytestmark = pytest.mark.filterwarnings(  # the interpreter's own use of a one-element array as an index
    "ignore:Conversion of an array with ndim > 0 to a scalar:DeprecationWarning"
)

U32 = 2.0**-24
"""float32's unit roundoff."""
SIGMA0 = 0.5
KERNEL_MODULES = ("triton_layers", "triton_layer_kernels")


def _fma_rounded_once(create_fma):
    """tl.fma as the GPU computes it: the interpreter rounds the float32 product and the sum apart
    (a rounding of x * y where the sum cancels), while a float32 product is exact in float64."""

    def fused(builder, x, y, z):
        if z.data.dtype != np.float32:
            return create_fma(builder, x, y, z)
        return type(z)((x.data.astype(np.float64) * y.data + z.data).astype(np.float32), z.dtype.scalar)

    return fused


def fresh_kernel_modules(interpret: bool):
    """Import the Triton kernel modules afresh, on Triton's CPU interpreter or compiled (Triton
    reads TRITON_INTERPRET when a kernel is defined); yield tune_gems.ops.triton_layers, then
    take them out again (any copies the process had before are put back)."""
    pytest.importorskip("triton")
    import tune_gems.ops as ops_package

    mp = pytest.MonkeyPatch()
    if interpret:
        mp.setenv("TRITON_INTERPRET", "1")
        from triton.runtime import interpreter

        mp.setattr(interpreter.InterpreterBuilder, "create_fma", _fma_rounded_once(interpreter.InterpreterBuilder.create_fma))
    else:
        mp.delenv("TRITON_INTERPRET", raising=False)
    for name in KERNEL_MODULES:
        mp.delitem(sys.modules, f"tune_gems.ops.{name}", raising=False)
        mp.delattr(ops_package, name, raising=False)
    module = importlib.import_module("tune_gems.ops.triton_layers")
    assert module.kernels.INTERPRETED == interpret
    yield module
    for name in KERNEL_MODULES:
        sys.modules.pop(f"tune_gems.ops.{name}", None)
        ops_package.__dict__.pop(name, None)
    mp.undo()


@pytest.fixture(scope="module", autouse=True)
def triton_interpreter():
    """This module's tests on Triton's CPU interpreter."""
    yield from fresh_kernel_modules(interpret=True)


# -- layers of each kind, from per-member seeds ------------------------------------------------------

KINDS = ("plain", "spectral", "noisy")


def build_layer(kind: str, seeds: list[int], reps: int, K: int, O: int, kernel: str = "triton", device: str = "cpu"):
    """(layer, flat parameters): a population layer of `kind` for members with these seeds on
    `device`, its parameters in a flat matrix laid out as the learner lays it out for `kernel`
    (aligned columns and the weights stored [out, in] on the triton path), noise resampled and spectral-norm switches set per
    member from the seed (so a member's switch is its own, alone or in a population)."""
    gens = [torch.Generator().manual_seed(s) for s in seeds]
    on = [s % 3 != 1 for s in seeds]
    if kind == "noisy":
        layer = NoisyPopLinear(gens, reps, K, O, SIGMA0, noisy=on)
        eps = torch.stack([torch.randn(layer.noise_size, generator=torch.Generator().manual_seed(s + 7)) for s in seeds])
        layer.resample(NoisyPopLinear.scale_noise(eps))
    else:
        layer = PopLinear(gens, reps, K, O, spectral_norm=on if kind == "spectral" else None)
    products = layer_products(kernel)
    layer.set_layer_products(products)
    layer.to(device)
    return layer, FlatParameters(layer, len(seeds), **products.flat_layout)


def member_inputs(seeds: list[int], reps: int, N: int, K: int, O: int, salt: int, device: str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """(x [G, N, K], dy [G, N, O]) on `device`: each member's rows drawn from its own seed."""
    xs, dys = [], []
    for s in seeds:
        g = torch.Generator().manual_seed(s * 1000 + salt)
        xs.append(torch.randn(reps, N, K, generator=g))
        dys.append(torch.randn(reps, N, O, generator=g))
    return torch.cat(xs).to(device), torch.cat(dys).to(device)


def run_layer(layer, flat, x: torch.Tensor, dy: torch.Tensor, relu: bool, mode: str = "train"):
    """One product with autograd, its gradients gathered into the flat matrix as the learner
    does: (y, dx, flat gradient without the layout's alignment gaps)."""
    x = x.clone().requires_grad_()
    y = layer.apply(x, layer.weights(mode), relu)
    grads = torch.autograd.grad(y, [x, *flat.params], dy, allow_unused=True)
    flat.gather_grads(grads[1:])
    return y.detach(), grads[0], flat.unpack(flat.grad).clone()


# -- the float64 oracle and the error bound --------------------------------------------------------


def float64_reference(kind, seeds, reps, K, O, x, dy, mask):
    """The torch path of the same layer in float64: (y before the ReLU, dx, flat gradient, the
    layer), with dy passed through `mask` (the float32 forward's ReLU mask, or None)."""
    layer, _ = build_layer(kind, seeds, reps, K, O, kernel="torch", device=x.device)
    layer.double()  # every parameter and buffer, as the same values in float64
    x64 = x.double().requires_grad_()
    y = layer.apply(x64, layer.weights("train"))
    upstream = dy.double() if mask is None else dy.double() * mask
    params = list(layer.parameters())
    grads = torch.autograd.grad(y, [x64, *params], upstream, allow_unused=True)
    P = len(seeds)
    flat_grad = torch.cat([g.reshape(P, -1) for g in grads[1:]], dim=1)
    return y.detach(), grads[0], flat_grad, layer


class Magnitudes:
    """Each output's sum of |terms| (the float64 expression on absolute values) and the number
    of terms its longest sum adds: the error bound is (n + 4) u times it."""

    def __init__(self, kind, ref_layer, x, dy_pre):
        G, N, K = x.shape
        ax, ady = x.double().abs(), dy_pre.double().abs()
        if kind == "noisy":
            L = ref_layer
            w = (L.mu_w.abs() + L.sigma_w.abs() * (L.f_in.abs() * L.f_out.abs())).reshape(G, K, -1)
            b = (L.mu_b.abs() + L.sigma_b.abs() * L.f_out.abs()).reshape(G, 1, -1)
            s = ax.new_ones(G, 1, 1)
        else:
            L = ref_layer
            w = L.weight.abs().reshape(G, K, -1)
            b = L.bias.abs().reshape(G, 1, -1)
            s = ax.new_ones(G, 1, 1)
            if kind == "spectral":
                sigma = (L.sn_v * torch.bmm(L.weight.reshape(G, K, -1), L.sn_u.unsqueeze(-1)).squeeze(-1)).sum(-1)
                s = torch.where(L.sn_on.view(-1), 1.0 / sigma.abs(), 1.0).view(G, 1, 1)
        O = w.shape[-1]
        self.y = (torch.bmm(ax, w) * s + b, K)
        self.dx = (torch.bmm(ady, w.transpose(1, 2)) * s, O)
        g_abs = torch.bmm(ax.transpose(1, 2), ady)  # |x|^T |dy|: the weight gradient's terms
        P = len(ref_layer.mu_w if kind == "noisy" else ref_layer.weight)
        db = ady.sum(1, keepdim=True)
        if kind == "noisy":
            fi_fo = (L.f_in.abs() * L.f_out.abs()).reshape(G, K, O)
            parts = [g_abs, db, g_abs * fi_fo, db * L.f_out.abs().reshape(G, 1, O)]  # mu_w, mu_b, sigma_w, sigma_b
            terms = N
        else:
            dw = g_abs * s
            terms = N
            if kind == "spectral":
                vu = L.sn_v.abs().unsqueeze(-1) * L.sn_u.abs().unsqueeze(1)
                through_sigma = (g_abs * w).sum(dim=(1, 2), keepdim=True) * s * s * vu
                dw = dw + torch.where(L.sn_on.view(-1, 1, 1), through_sigma, 0.0)
                terms = N + K * O
            parts = [dw, db]
        self.flat_grad = (torch.cat([t.reshape(P, -1) for t in parts], dim=1), terms)


def assert_within_bound(
    got: torch.Tensor, ref: torch.Tensor, magnitude: tuple[torch.Tensor, int], what: str, operand_rounding: float = 0.0
) -> None:
    """|got - ref| <= ((n + 4) u + operand_rounding) x magnitude, elementwise; operand_rounding
    is what rounding the products' operands adds (2 x 2^-11 for tf32, 2 x 2^-8 for bf16)."""
    mag, n = magnitude
    bound = ((n + 4) * U32 + operand_rounding) * mag.reshape(ref.shape) + 1e-30
    excess = ((got.double() - ref).abs() / bound).max().item()
    assert excess <= 1.0, f"{what}: error {excess:.2f}x the bound (n={n})"


# -- values and gradients against the float64 oracle -----------------------------------------------

SHAPES = [  # (members, replicas, rows N, inputs K, outputs O): odd sizes, masked tiles, several tiles
    (3, 1, 37, 33, 51),
    (2, 2, 150, 70, 140),  # several output tiles in every product (3 x 3 of 64 in the forward), K-loops of 3 to 5 steps
    (2, 3, 5, 7, 9),
]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_values_and_gradients_match_the_float64_torch_path(kind, shape):
    P, reps, N, K, O = shape
    seeds = [11 + 3 * m for m in range(P)]  # switches on and off among them (s % 3)
    layer, flat = build_layer(kind, seeds, reps, K, O)
    x, dy = member_inputs(seeds, reps, N, K, O, salt=1)
    y, dx, grad = run_layer(layer, flat, x, dy, relu=True)
    mask = (y > 0).double()
    y_lin, dx64, grad64, ref = float64_reference(kind, seeds, reps, K, O, x, dy, mask)
    bounds = Magnitudes(kind, ref, x, dy * mask)
    assert_within_bound(y, y_lin.clamp_min(0.0), bounds.y, "y")
    assert_within_bound(dx, dx64, bounds.dx, "dx")
    assert_within_bound(grad, grad64, bounds.flat_grad, "parameter gradients")
    if kind == "spectral":  # the power iteration advanced the state as the torch path's did
        assert torch.allclose(layer.sn_u.double(), ref.sn_u, atol=1e-5, rtol=0)
        assert torch.allclose(layer.sn_v.double(), ref.sn_v, atol=1e-5, rtol=0)


@pytest.mark.parametrize("mode", ["target", "eval"])
@pytest.mark.parametrize("kind", ["spectral", "noisy"])
def test_target_and_eval_weights_match_the_float64_torch_path(kind, mode):
    """target: noise on, the power iteration frozen; eval: the noise-free, materialised weights."""
    P, reps, N, K, O = 3, 1, 9, 33, 17
    seeds = [5, 6, 7]
    layer, _ = build_layer(kind, seeds, reps, K, O)
    ref, _ = build_layer(kind, seeds, reps, K, O, kernel="torch")
    ref.double()
    x, dy = member_inputs(seeds, reps, N, K, O, salt=2)
    with torch.no_grad():
        y = layer.apply(x, layer.weights(mode))
        y64 = ref.apply(x.double(), ref.weights(mode))
    assert_within_bound(y, y64, Magnitudes(kind, ref, x, dy).y, f"y ({mode})")
    if kind == "spectral":
        assert torch.equal(layer.sn_u.double(), ref.sn_u)  # frozen: untouched by either


# -- bits: a member alone equals the member in a population; runs repeat ----------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_a_member_alone_equals_the_member_inside_any_population_bit_for_bit(kind):
    reps, N, K, O = 2, 37, 33, 51
    seeds = [101, 102, 103, 104, 105]
    results = {}
    for P in (1, 3, 5):
        layer, flat = build_layer(kind, seeds[:P], reps, K, O)
        x, dy = member_inputs(seeds[:P], reps, N, K, O, salt=3)
        y, dx, grad = run_layer(layer, flat, x, dy, relu=True)
        state = torch.cat([layer.sn_u, layer.sn_v], 1) if kind == "spectral" else torch.zeros(P * reps, 0)
        results[P] = [t.reshape(P, -1) for t in (y, dx, grad, state)]
    for m in range(5):
        alone, _ = _member_alone(kind, seeds[m], reps, N, K, O)
        for P in (p for p in (1, 3, 5) if m < p):
            for name, ours, theirs in zip(("y", "dx", "grad", "sn state"), results[P], alone):
                assert torch.equal(ours[m], theirs[0]), f"member {m} of {P}: {name} differs from the member alone"


def _member_alone(kind, seed, reps, N, K, O):
    layer, flat = build_layer(kind, [seed], reps, K, O)
    x, dy = member_inputs([seed], reps, N, K, O, salt=3)
    y, dx, grad = run_layer(layer, flat, x, dy, relu=True)
    state = torch.cat([layer.sn_u, layer.sn_v], 1) if kind == "spectral" else torch.zeros(reps, 0)
    return [t.reshape(1, -1) for t in (y, dx, grad, state)], layer


@pytest.mark.parametrize("kind", KINDS)
def test_two_runs_are_bit_equal(kind):
    def once():
        layer, flat = build_layer(kind, [3, 4, 5], 2, 33, 51)
        x, dy = member_inputs([3, 4, 5], 2, 21, 33, 51, salt=4)
        return run_layer(layer, flat, x, dy, relu=True)

    for a, b in zip(once(), once()):
        assert torch.equal(a, b)


# -- gradients straight into the flat matrix -------------------------------------------------------


def test_gradients_are_written_into_the_flat_slots_and_a_layer_used_twice_sums_its_uses():
    """One use: autograd returns the flat matrix's own slots (no copy). Two uses on the same
    weights (a gem head called twice): fresh gradients, summed by autograd, equal to the sum
    of the two single uses."""
    seeds, reps, N, K, O = [1, 2], 1, 9, 33, 17
    x, dy = member_inputs(seeds, reps, N, K, O, salt=5)
    layer, flat = build_layer("noisy", seeds, reps, K, O)
    w = layer.weights("train")
    grads = torch.autograd.grad(layer.apply(x, w, relu=True), flat.params, dy)
    assert all(g.data_ptr() == p.grad_slot.data_ptr() for g, p in zip(grads, flat.params))
    once = flat.grad.clone()
    flat.gather_grads(grads)
    assert torch.equal(flat.grad, once)  # left as written

    layer2, flat2 = build_layer("noisy", seeds, reps, K, O)
    w2 = layer2.weights("train")
    y = layer2.apply(x, w2, relu=True) + layer2.apply(x * 0.5, w2, relu=True)
    grads2 = torch.autograd.grad(y, flat2.params, dy)
    assert not any(g.data_ptr() == p.grad_slot.data_ptr() for g, p in zip(grads2, flat2.params))
    flat2.gather_grads(grads2)
    layer3, flat3 = build_layer("noisy", seeds, reps, K, O)
    _, _, half = run_layer(layer3, flat3, x * 0.5, dy, relu=True)
    assert torch.allclose(flat2.unpack(flat2.grad), flat.unpack(once) + half, rtol=1e-6, atol=1e-7)


def test_a_cpu_run_without_the_interpreter_is_refused_in_one_line(triton_interpreter, monkeypatch):
    from tune_gems.contracts.errors import ConfigError

    monkeypatch.setattr(triton_interpreter.kernels, "INTERPRETED", False)
    layer, _ = build_layer("plain", [1], 1, 8, 8)
    with pytest.raises(ConfigError, match="TRITON_INTERPRET=1"):
        layer.apply(torch.randn(1, 4, 8), layer.weights("train"))


def test_tiles_follow_the_shape_and_cover_small_products(triton_interpreter):
    """64 x 64 x 32 tiles with 4 warps for the forward and dW, up to 128 x 128 with 8 warps for
    the input gradient (the probe's fastest per layer shape), never larger than the product needs."""
    tiles, input_grad_tiles, Tiles = triton_interpreter.tiles, triton_interpreter.input_grad_tiles, triton_interpreter.Tiles
    assert tiles(37, 33, 51) == Tiles(rows=64, cols=64, inner=32, warps=4, stages=3)
    assert tiles(5, 7, 9) == Tiles(rows=16, cols=16, inner=16, warps=4, stages=3)  # tl.dot's smallest
    assert tiles(512, 256, 256) == Tiles(rows=64, cols=64, inner=32, warps=4, stages=3)
    assert input_grad_tiles(512, 256, 256) == Tiles(rows=128, cols=128, inner=32, warps=8, stages=3)
    assert input_grad_tiles(512, 153, 64) == Tiles(rows=128, cols=64, inner=32, warps=8, stages=3)
    assert input_grad_tiles(16, 256, 256) == Tiles(rows=16, cols=128, inner=32, warps=4, stages=3)


def test_the_weights_are_stored_out_in_and_read_through_their_strides(triton_interpreter):
    """The layer sees W [in, out]; the flat matrix holds W [out, in] (a transposed view), its
    gradient slot likewise, and `unpack` gives the plain layout back."""
    layer, flat = build_layer("noisy", [1, 2], 2, 33, 51)
    for w in (layer.mu_w, layer.sigma_w):
        assert w.shape == (2, 2, 33, 51) and w.stride(-2) == 1 and w.stride(-1) == 33
        assert w.grad_slot.stride() == w.stride()
    assert layer.mu_b.stride(-1) == 1
    plain = flat.unpack(flat.data)
    cols = flat.columns_of(layer.mu_w)
    assert torch.equal(flat.data[:, cols].view(2, 2, 51, 33).transpose(-1, -2), layer.mu_w.detach())
    assert torch.equal(plain[:, : 2 * 33 * 51].view(2, 2, 33, 51), layer.mu_w.detach())
