"""The Triton layer kernels compile for the H200 (sm_90) on a machine without a GPU.

The interpreter (tests/test_triton_layers.py) runs the kernels' Python; the compiler checks what
the interpreter does not (types, constexpr branches, layouts) and ends in ptxas, which Triton
ships. Every launch one layer product and its backward make, for each kind of layer and each
precision, and the noise kernel's launches, are recorded with their real arguments (the kernels
stubbed out) and compiled with the signature those arguments give, so the GPU session starts
from kernels that build.
"""

from __future__ import annotations

import pytest
import torch

from test_triton_layers import build_layer, fresh_kernel_modules, member_inputs

KERNELS = ("_rows_kernel", "_weight_grad_kernel", "_sigma_grad_kernel", "_spectral_kernel", "_noise_factors_kernel")
H200 = ("cuda", 90, 32)
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


def _compile_all(launches: list[tuple]) -> set:
    """Compile every distinct (kernel, constexprs) of `launches` for the H200; their keys."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    seen = set()
    for fn, args, kwargs in launches:
        sig, constexprs = _signature(fn, args, kwargs)
        key = (fn.__name__, tuple(sorted(constexprs.items())))
        if key in seen:
            continue
        seen.add(key)
        options = {"num_warps": kwargs["num_warps"]} if "num_warps" in kwargs else {}
        kernel = triton.compile(ASTSource(fn, signature=sig, constexprs=constexprs), target=GPUTarget(*H200), options=options)
        assert kernel.asm["cubin"], key
    return seen


def _signature(fn, args, kwargs) -> tuple[dict, dict]:
    constexprs = {k: v for k, v in kwargs.items() if k != "num_warps"}
    types = {torch.float32: "*fp32", torch.bool: "*i1"}
    sig = {}
    for name, a in zip(fn.arg_names, args):
        if isinstance(a, torch.Tensor):
            sig[name] = types[a.dtype]
        elif isinstance(a, float):
            sig[name] = "fp32"
        else:
            sig[name] = "i32" if -(2**31) <= a < 2**31 else "i64"
    sig.update({k: "constexpr" for k in constexprs})
    return sig, constexprs


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_every_kernel_variant_a_layer_launches_compiles_for_the_h200(compiled_kernels, monkeypatch, case):
    launches = _recorded_launches(compiled_kernels, monkeypatch, lambda: _layer_product(compiled_kernels, monkeypatch, *case))
    names = {k[0] for k in _compile_all(launches)}
    expected = {"_rows_kernel", "_weight_grad_kernel"}
    expected |= {"_sigma_grad_kernel", "_spectral_kernel"} if case[0] == "spectral" else set()
    assert names == expected


def test_the_noise_kernel_compiles_for_the_h200(compiled_kernels, monkeypatch):
    from test_triton_noise import _nets, _uniforms

    _, net = _nets([1, 2], [True, False])
    launches = _recorded_launches(compiled_kernels, monkeypatch, lambda: net.resample_noise_from_uniforms(_uniforms(net, [1, 2])))
    assert len(launches) == len(net.noisy_layers())
    assert {k[0] for k in _compile_all(launches)} == {"_noise_factors_kernel"}
