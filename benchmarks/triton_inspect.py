"""What a compiled Triton kernel is: its dot instructions (tensor-core wgmma or mma, at which
precision, or none), registers, spills and the width of its global-to-shared copies.

A kernel that runs at a fraction of the GPU's speed is often one that compiled to something
else than its source suggests: a dot silently in fp32 FMA ("ieee"), registers spilled to local
memory, or 4-byte copies where 16-byte ones were meant. `compile_for_h100` compiles a kernel for
sm_90 from the arguments of a real launch, with the specialisation the JIT would give them on
the GPU (16-byte-aligned pointers and integers divisible by 16 marked, ints equal to 1 folded),
on any machine: ptxas ships with Triton, no GPU is needed. `describe` reads the result, or a
kernel the JIT loaded on the GPU (its `n_regs`, `n_spills`). The compile gate
(tests/test_triton_compile.py) and benchmarks/layer_gemm_probe.py use both.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections import Counter

H100 = ("cuda", 90, 32)
"""Triton's target of the H100 and H200 (sm_90, warps of 32)."""


def compile_for_h100(fn, args: tuple, kwargs: dict):
    """`fn` (a @triton.jit kernel, not interpreted) compiled for sm_90 as a launch
    `fn[grid](*args, **kwargs)` would compile it on the GPU; tensors may live on the CPU (only
    their dtype and address alignment count)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature

    target = GPUTarget(*H100)
    backend = make_backend(target)
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    bound, specialization, options = binder(*args, **kwargs)
    _, signature, constexprs, attrs = fn._pack_args(backend, kwargs, bound, specialization, options)
    compile_options = {k: v for k, v in kwargs.items() if k in ("num_warps", "num_stages", "maxnreg")}
    return triton.compile(ASTSource(fn, signature, constexprs, attrs), target=target, options=compile_options)


def _ptxas_usage(ptx: str) -> tuple[int, int, bool]:
    """(registers, spill bytes stored + loaded, whether ptxas serialised the wgmma pipeline) as
    ptxas reports them for this PTX on sm_90a."""
    from triton.backends.nvidia.compiler import get_ptxas

    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "k.ptx")
        with open(src, "w") as f:
            f.write(ptx)
        log = subprocess.run(
            [get_ptxas(90).path, "-v", "--gpu-name=sm_90a", src, "-o", os.path.join(d, "k.cubin")],
            capture_output=True, text=True, check=True,
        ).stderr  # fmt: skip
    regs = int(re.search(r"Used (\d+) registers", log).group(1))
    spills = sum(int(n) for n in re.findall(r"(\d+) bytes spill (?:stores|loads)", log))
    return regs, spills, "wgmma.mma_async instructions are serialized" in log


def describe(kernel) -> dict:
    """dot: "wgmma.tf32", "wgmma.bf16", "mma.tf32", ..., or "fma" when no tensor-core
    instruction is present (a kernel with no dot at all says "none"); wgmma: its instruction
    shapes; wgmma_serialized: ptxas's warning that it serialised them (each waits for the
    previous: a many-fold slowdown the PTX does not show); regs, spills (bytes), shared (bytes); copies: global-to-shared cp.async counts by
    width in bytes ("tma" for bulk tensor copies); loads: vector widths of plain global loads."""
    ptx = kernel.asm["ptx"]
    wgmma = Counter(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+)\.f32\.(\w+)\.\w+", ptx))
    mma = Counter(re.findall(r"mma\.sync\.aligned\.m\d+n\d+k\d+\.row\.col\.f32\.(\w+)\.", ptx))
    if wgmma:
        dot = "wgmma." + "/".join(sorted({t for _, t in wgmma}))
    elif mma:
        dot = "mma." + "/".join(sorted(mma))
    else:
        dot = "fma" if re.search(r"\bfma\.rn\.f32", ptx) else "none"
    copies = Counter(int(w, 0) for w in re.findall(r"cp\.async\.c[ag]\.shared\.global(?:\.\S+)?\s+\[[^\]]*\],\s*\[[^\]]*\],\s*(0x[0-9a-f]+|\d+)", ptx))
    tma = len(re.findall(r"cp\.async\.bulk\.tensor", ptx))
    loads = Counter(4 * int(v or 1) for v in re.findall(r"ld\.global(?:\.[a-zA-Z:0-9_]+)*?(?:\.v(\d))?\.(?:b|f)32", ptx))
    regs, spills, serialized = _ptxas_usage(ptx)
    if kernel.__dict__.get("n_regs") is not None:
        regs, spills = kernel.n_regs, kernel.n_spills  # loaded on a GPU: the driver's figures
    return {
        "dot": dot,
        "wgmma": sorted(f"{shape}.{t}" for shape, t in wgmma),
        "wgmma_serialized": serialized,
        "regs": regs,
        "spills": spills,
        "shared": kernel.metadata.shared,
        "copies": {**{str(w): n for w, n in sorted(copies.items())}, **({"tma": tma} if tma else {})},
        "loads": {str(w): n for w, n in sorted(loads.items())},
        "warps": kernel.metadata.num_warps,
        "stages": kernel.metadata.num_stages,
    }
