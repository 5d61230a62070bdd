"""The Triton layer kernels compile for the H200 (sm_90) on a machine without a GPU, into what
they are meant to be.

The interpreter (tests/test_triton_layers.py) runs the kernels' Python; the compiler checks what
the interpreter does not (types, constexpr branches, layouts) and ends in ptxas, which Triton
ships. Every launch one layer product and its backward make, for each kind of layer and each
precision, and the noise kernel's launches, are recorded with their real arguments (the kernels
stubbed out) and compiled with the specialisation those arguments get on the GPU
(benchmarks/triton_inspect.py), so the GPU session starts from kernels that build.

The gate: at the network's real shapes, every tf32 and bf16 product compiles to a tensor-core dot
at its precision (never fp32 FMA), spills nothing, and keeps ptxas's wgmma pipeline (no
"wgmma serialized" warning: a K-loop ptxas cannot prove non-empty cost that), and its copies are
16 bytes wide where the operand allows it (aligned parameters, the weights stored [out, in]:
tune_gems.model.flat), every one of them in the forward.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from test_triton_layers import build_layer, fresh_kernel_modules, member_inputs
from tune_gems.model.flat import FlatParameters
from tune_gems.trainer.optim import PopulationAdam

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # triton_inspect.py

KERNELS = ("_rows_kernel", "_weight_grad_kernel", "_sigma_grad_kernel", "_spectral_kernel", "_noise_factors_kernel", "_row_reduce_kernel",
           "_clip_adam_kernel", "_uniform_block_kernel")
CASES = [  # (layer kind, ReLU, precision): every kernel variant the network launches, each precision once
    ("plain", True, "tf32"),
    ("spectral", True, "ieee"),
    ("noisy", False, "bf16"),
    ("noisy", True, "tf32"),
]


@pytest.fixture(scope="module")
def compiled_kernels():
    import triton.language as tl
    from triton.runtime.jit import JITFunction

    if not isinstance(tl.standard._sum_combine, JITFunction):  # the kernels' one library function
        pytest.skip("Triton was imported under TRITON_INTERPRET=1: its library is interpreted, nothing compiles")
    yield from fresh_kernel_modules(interpret=False)


def _recorded_launches(module, monkeypatch, work) -> list[tuple]:
    """(kernel, args, kwargs) of every launch `work()` makes, the kernels stubbed out (nothing
    runs; the CPU tensors pass the device check)."""
    launches: list[tuple] = []

    class Recorder:
        def __init__(self, fn):
            self.fn = fn

        def __getitem__(self, grid):
            return lambda *args, **kwargs: launches.append((self.fn, args, kwargs))

    for name in KERNELS:
        monkeypatch.setattr(module.kernels, name, Recorder(getattr(module.kernels, name)))
    monkeypatch.setattr(module.kernels, "INTERPRETED", True)
    work()
    return launches


def _layer_product(module, monkeypatch, kind: str, relu: bool, precision: str):
    """One forward and backward (train weights) and one target-mode forward of a `kind` layer."""
    monkeypatch.setattr(module, "dot_precision", lambda t: precision)
    layer, flat = build_layer(kind, [1, 2], 2, 33, 51)
    x, dy = member_inputs([1, 2], 2, 37, 33, 51, salt=0)
    x.requires_grad_()
    torch.autograd.grad(layer.apply(x, layer.weights("train"), relu), [x, *flat.params], dy)
    with torch.no_grad():
        layer.apply(x, layer.weights("target"), relu)


def _compile_all(launches: list[tuple]) -> dict:
    """Compile every distinct launch of `launches` for the H200: {(kernel, constexprs): compiled}."""
    from triton_inspect import compile_for_h100

    compiled = {}
    for fn, args, kwargs in launches:
        key = (fn.__name__, tuple(sorted(kwargs.items())))
        if key not in compiled:
            compiled[key] = compile_for_h100(fn, args, kwargs)
            assert compiled[key].asm["cubin"], key
    return compiled


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_every_kernel_variant_a_layer_launches_compiles_for_the_h200(compiled_kernels, monkeypatch, case):
    launches = _recorded_launches(compiled_kernels, monkeypatch, lambda: _layer_product(compiled_kernels, monkeypatch, *case))
    names = {name for name, _ in _compile_all(launches)}
    expected = {"_rows_kernel", "_weight_grad_kernel"}
    expected |= {"_sigma_grad_kernel", "_spectral_kernel"} if case[0] == "spectral" else set()
    assert names == expected


# The network's layers at train_step.py's shapes (hidden 256, stream 64, 51 atoms, 2 branches of 3
# sub-actions, batch 256: 2B = 512 rows with autograd), and the act step's 16 rows.
REAL_SHAPES = [  # (kind, replicas, rows N, inputs K, outputs O, ReLU)
    ("spectral", 1, 512, 256, 256, True),  # trunk1
    ("noisy", 1, 512, 256, 192, True),  # stream_in
    ("noisy", 2, 512, 64, 153, False),  # adv_out: odd outputs, so its rows are not 16-byte aligned
    ("plain", 1, 256, 128, 256, False),  # G12's pred_out
    ("spectral", 1, 16, 256, 256, True),  # trunk1 when acting (16 environments)
]
DOT = {"tf32": "tf32", "bf16": "bf16"}


@pytest.mark.parametrize("precision", ["tf32", "bf16"])
@pytest.mark.parametrize("shape", REAL_SHAPES, ids=lambda s: f"{s[0]}-{s[2]}x{s[3]}x{s[4]}")
def test_at_real_shapes_every_product_is_a_pipelined_tensor_core_dot_without_spills(compiled_kernels, monkeypatch, shape, precision):
    from triton_inspect import describe

    kind, reps, N, K, O, relu = shape
    monkeypatch.setattr(compiled_kernels, "dot_precision", lambda t: precision)

    def product():
        layer, flat = build_layer(kind, [1, 2], reps, K, O)
        x, dy = member_inputs([1, 2], reps, N, K, O, salt=0)
        x.requires_grad_()
        torch.autograd.grad(layer.apply(x, layer.weights("train"), relu), [x, *flat.params], dy)

    compiled = _compile_all(_recorded_launches(compiled_kernels, monkeypatch, product))
    for (name, flags), kernel in compiled.items():
        d, where = describe(kernel), f"{name} {dict(flags)}"
        assert d["spills"] == 0, f"{where}: {d['spills']} bytes spilled"
        if name in ("_sigma_grad_kernel", "_spectral_kernel"):  # no product: rank-one updates and matvecs
            continue
        assert d["dot"] in (f"wgmma.{DOT[precision]}", f"mma.{DOT[precision]}"), f"{where}: dot {d['dot']}"
        assert d["dot"].startswith("wgmma") or dict(flags)["BM"] < 64, f"{where}: {d['dot']} where a wgmma fits"
        assert not d["wgmma_serialized"], f"{where}: ptxas serialised the wgmma pipeline"
        if name != "_rows_kernel" or K % 4:
            continue  # dW's operands run along the batch rows (MN-major: tf32's wgmma copies them transposed)
        if not dict(flags)["BACKWARD"]:
            # the forward's x and W (stored [out, in]) both run along the K-loop, their rows 16-byte
            # aligned: every copy of every kind of layer is 16 bytes wide
            assert d["copies"].get("16", 0) > 0 and d["copies"].get("4", 0) == 0, f"{where}: copies {d['copies']}"
        elif O % 4 == 0:  # dx's dy is K-major (W^T is not: W stored [out, in] runs along its columns)
            assert d["copies"].get("16", 0) > 0, f"{where}: no 16-byte copy ({d['copies']})"


def test_the_noise_kernel_compiles_for_the_h200(compiled_kernels, monkeypatch):
    from test_triton_noise import _nets, _uniforms

    _, net = _nets([1, 2], [True, False])
    launches = _recorded_launches(compiled_kernels, monkeypatch, lambda: net.resample_noise_from_uniforms(_uniforms(net, [1, 2])))
    assert len(launches) == len(net.noisy_layers())
    assert {name for name, _ in _compile_all(launches)} == {"_noise_factors_kernel"}


def test_the_optimizer_step_compiles_to_ieee_arithmetic_and_16_byte_loads(compiled_kernels, monkeypatch):
    """The clip-group norms and the clip-and-Adam kernel at a network's width (clip groups at
    aligned columns): no spills, 16-byte loads, and the float32 divisions and square roots
    IEEE-rounded (Triton's `/` and tl.sqrt are approximate ones), as torch's fused Adam computes."""
    import re

    from triton_inspect import describe

    class Rows(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(3, 286304))

    def step():
        flat = FlatParameters(Rows(), 3)
        opt = PopulationAdam(flat, 1e-4, 1e-8, 10.0, clip_groups=[slice(0, 200000), slice(200000, 286304)],
                             clip_adam=compiled_kernels.ClipAdam)  # fmt: skip
        opt.step_groups()

    compiled = _compile_all(_recorded_launches(compiled_kernels, monkeypatch, step))
    assert {name for name, _ in compiled} == {"_row_reduce_kernel", "_clip_adam_kernel"}
    for (name, _), kernel in compiled.items():
        d = describe(kernel)
        assert d["spills"] == 0 and d["loads"].get("16", 0) > 0, (name, d)
        if name == "_clip_adam_kernel":
            ptx = kernel.asm["ptx"]
            assert not re.search(r"div\.(full|approx)\.|sqrt\.approx|rcp\.approx", ptx), "an approximate division or square root"
            assert set(re.findall(r"(?:div|sqrt|fma)\.rn\.f\d\d", ptx)) == {"div.rn.f32", "sqrt.rn.f32", "fma.rn.f32"}  # float32, as torch's


def test_the_one_launch_draw_compiles_to_64_bit_integer_hashing(compiled_kernels, monkeypatch):
    """The RNG's block: the hash's products in 64-bit integers (as torch's int64 ops), nothing spilled."""
    from triton_inspect import describe

    from tune_gems.rng import CounterRNG, DrawPlan

    plan = DrawPlan({"noise": 3000, "env": 16}, "cpu", kernel=compiled_kernels.uniform_block)
    compiled = _compile_all(_recorded_launches(compiled_kernels, monkeypatch, lambda: CounterRNG([1, 2], "cpu").draw(plan)))
    ((name, _), kernel), = compiled.items()
    assert name == "_uniform_block_kernel" and describe(kernel)["spills"] == 0
    assert "mul.lo.s64" in kernel.asm["ptx"] and "mul.lo.s32" not in kernel.asm["ptx"]


@pytest.mark.parametrize("cols", [1, 200])
def test_row_means_compile_to_an_ieee_division(compiled_kernels, monkeypatch, cols):
    """A row of one column included: the GPU compiles an argument equal to 1 as a constant."""
    import re

    rows = torch.zeros(3, cols)
    compiled = _compile_all(_recorded_launches(compiled_kernels, monkeypatch, lambda: compiled_kernels.row_means(rows)))
    ((name, _), kernel), = compiled.items()
    ptx = kernel.asm["ptx"]
    assert name == "_row_reduce_kernel" and not re.search(r"div\.(full|approx)\.|rcp\.approx", ptx)
    assert cols == 1 or "div.rn.f32" in ptx
